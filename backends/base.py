"""The backend protocol: what a secondary tier must offer the manager."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Protocol, runtime_checkable

__all__ = ["Backend", "BlockStore", "Key", "Verdicts", "check_key"]

Key = bytes


@runtime_checkable
class Backend(Protocol):
    """Answers "is each of these blocks stored?" for one request's keys.

    ``batch_lookup`` returns one ``bool`` per key, in order.  It may raise or
    be slow: the manager turns any of that into a MISS and keeps serving.
    """

    def batch_lookup(self, keys: Sequence[Key], req_context: object) -> Iterable[bool]: ...


class Verdicts(list[bool]):
    """A ``batch_lookup`` result that marks which of its ``False`` are no answer (a failure, not "not stored").

    A tier that answers a group in part (the object tier: keys shed by its
    pace, or still failing at its deadline) returns one, so that the
    manager's verdict cache (docs/cache.md) never remembers those keys as
    not stored.  To everything else it is the list of verdicts it holds.

    Args:
        verdicts: one ``bool`` per key, in order (``False`` for a key without an answer).
        unanswered: the indices of the keys without an answer.
    """

    def __init__(self, verdicts: Iterable[bool] = (), *, unanswered: frozenset[int] = frozenset()) -> None:
        super().__init__(verdicts)
        self.unanswered = unanswered


@runtime_checkable
class BlockStore(Protocol):
    """A backend that can also write ground truth (tests, demos, conformance)."""

    def batch_lookup(self, keys: Sequence[Key], req_context: object) -> Iterable[bool]: ...

    def locate(self, key: Key) -> str: ...

    def store(self, key: Key, data: bytes = b"") -> None: ...

    def remove(self, key: Key) -> None: ...


def check_key(key: object) -> bytes:
    """Return ``key`` if it is ``bytes``.

    Raises:
        TypeError: naming the type that was passed instead.
    """
    if type(key) is not bytes:
        raise TypeError(f"keys must be bytes, got {type(key).__name__}")
    return key
