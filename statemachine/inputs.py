"""The core's checks of what callers pass, and the errors that name the problem.

Every action checks its arguments before it changes anything, so an
:class:`InvalidInputError` always leaves the core as it was.  Keys must be
exactly ``bytes`` and request ids exactly ``str``: a subclass or a
look-alike (a memoryview, a ``numpy.bytes_``) is refused wherever it would
change something.  The checks that run per call are written for both builds
(see :data:`kvprobe.statemachine.rules.COMPILED`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Final

from kvprobe.statemachine.rules import COMPILED
from kvprobe.statemachine.types import HasReqId, InvalidInputError

__all__ = ["bad_context", "bad_lookup", "chain_keys", "chain_req_id", "check_chain_keys"]

_MISSING: Final = object()
_ONLY_BYTES: Final = {bytes}


def bad_lookup(key: object, req_context: object) -> InvalidInputError:
    """The error for a ``lookup`` whose key or request context is not allowed."""
    if type(key) is not bytes:
        return InvalidInputError(f"lookup() keys must be bytes, got {type(key).__name__}")
    return bad_context("lookup()", req_context)


def bad_context(caller: str, req_context: object) -> InvalidInputError:
    """The error for a ``req_context`` whose ``req_id`` is missing, not a str, or raises."""
    try:
        req_id = getattr(req_context, "req_id", _MISSING)
    except Exception as exc:  # a property that raises: name it, whatever it raised
        return InvalidInputError(f"{caller} req_context.req_id raised {type(exc).__name__}: {exc}")
    if req_id is _MISSING:
        return InvalidInputError(
            f"{caller} req_context must have a .req_id attribute; {type(req_context).__name__} has none"
        )
    return InvalidInputError(f"{caller} req_context.req_id must be a str, got {type(req_id).__name__}")


def chain_req_id(req_context: HasReqId) -> str:
    """The request id of a ``lookup_chain`` call.

    Raises:
        InvalidInputError: ``req_context`` has no ``req_id``, reading it
            raises, or it is not exactly a ``str``.
    """
    try:
        req_id = req_context.req_id
    except Exception as exc:  # a missing attribute, or whatever a property raised
        raise bad_context("lookup_chain()", req_context) from exc
    if type(req_id) is not str:
        raise bad_context("lookup_chain()", req_context)
    return req_id


def chain_keys(keys: object) -> list[Any]:
    """``keys`` as a list, if it is a sequence of keys (the element types are checked later).

    Raises:
        InvalidInputError: ``keys`` is a single key (``bytes``/``str``) or
            not a sequence, or reading it raised.
    """
    if type(keys) is tuple:
        return list(keys)
    if isinstance(keys, (bytes, bytearray, memoryview, str)):
        raise InvalidInputError(
            f"lookup_chain() takes a sequence of keys, got a single {type(keys).__name__}; wrap it in a list"
        )
    if not isinstance(keys, Sequence):
        raise InvalidInputError(f"lookup_chain() takes a sequence of keys, got {type(keys).__name__}")
    try:
        return list(keys)
    except Exception as exc:  # whatever the caller's sequence raised while it was read
        raise InvalidInputError(f"lookup_chain() could not read its keys: {type(exc).__name__}: {exc}") from exc


def check_chain_keys(keys: list[Any], start: int) -> None:
    """Check that every key from index ``start`` on is exactly ``bytes``.

    Raises:
        InvalidInputError: naming the type of the first key that is not.
    """
    if COMPILED:
        # A C loop here; set(map(type, ...)) would be generic calls per key.
        for i in range(start, len(keys)):
            if type(keys[i]) is not bytes:
                raise InvalidInputError(f"lookup_chain() keys must be bytes, got {type(keys[i]).__name__}")
        return
    # The pure-Python build checks in C: one set of the types, no Python loop.
    rest = keys[start:] if start else keys
    if set(map(type, rest)) != _ONLY_BYTES and rest:
        bad = next(key for key in rest if type(key) is not bytes)
        raise InvalidInputError(f"lookup_chain() keys must be bytes, got {type(bad).__name__}")


def key_list(keys: Iterable[Any], caller: str) -> list[Any]:
    """``keys`` read into a list of ``bytes`` keys, for ``caller`` (``mark_miss`` and the like).

    Raises:
        InvalidInputError: ``keys`` is a single key or not iterable, raised
            while it was read, or holds a key that is not ``bytes``.  The
            caller has changed nothing yet.
    """
    if isinstance(keys, (bytes, bytearray, memoryview, str)):
        raise InvalidInputError(
            f"{caller}() takes an iterable of keys, got a single {type(keys).__name__}; wrap it in a list"
        )
    try:
        listed = list(keys)
    except TypeError as exc:
        raise InvalidInputError(f"{caller}() takes an iterable of keys, got {type(keys).__name__}") from exc
    except Exception as exc:
        # The caller's iterable broke while it was read: nothing is applied.
        raise InvalidInputError(f"{caller}() could not read its keys: {type(exc).__name__}: {exc}") from exc
    for key in listed:
        if type(key) is not bytes:
            raise InvalidInputError(f"{caller}() keys must be bytes, got {type(key).__name__}")
    return listed
