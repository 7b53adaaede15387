"""What every worker shares: the protocol the manager drives, the one backend call, the setting checks.

A worker receives :class:`~kvprobe.statemachine.types.Batch` es from the
manager's ``flush`` and publishes one
:class:`~kvprobe.statemachine.types.GroupOutcome` per group through the
``publish`` callable it was started with (the core's inbox
``deque.append``: atomic, so no lock).  It touches nothing else of the
manager.  Every worker calls the backend through :func:`probe_group`, which
turns whatever the backend does into an outcome.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Protocol

from kvprobe.backends.base import Backend, Key, Verdicts
from kvprobe.backends.timeouts import check_seconds
from kvprobe.statemachine.types import (
    Batch,
    FailureKind,
    GroupOutcome,
    InvalidInputError,
    InvalidValueError,
    ProbeGroup,
)

__all__ = [
    "Publish",
    "Worker",
    "check_count",
    "check_hold",
    "check_timeout",
    "describe_exception",
    "discard_outcome",
    "probe_group",
]

Publish = Callable[[GroupOutcome], None]


class Worker(Protocol):
    """What the manager needs of a worker driver (the shape is ``docs/worker.md``).

    Optional: ``abandon()``, a lock-free stop that the manager's finalizer
    calls instead of ``stop(0)`` when the manager is collected unshut; and
    publishing :func:`~kvprobe.statemachine.types.death_marker` when the
    worker dies, so that a ``lookup`` notices.
    """

    def start(self, backend: Backend, publish: Publish) -> None:
        """Begin serving; called once at construction and again after a death.

        The manager passes its backend through a
        :class:`~kvprobe.statemachine.weak_backend.WeakBackend` (every
        attribute forwarded, the backend not kept alive), so that a dropped
        manager is collected even while the worker's threads run.
        """

    def submit(self, batch: Batch) -> None:
        """Queue a batch; must not block."""

    def is_alive(self) -> bool:
        """False once the worker can no longer deliver the groups it was given."""

    def stop(self, timeout_s: float) -> None:
        """Stop serving and discard anything published later; wait at most ``timeout_s``."""


def probe_group(backend: Backend, group: ProbeGroup) -> GroupOutcome:
    """Call ``backend.batch_lookup`` for one group and check what it returns.

    Never raises for an ``Exception`` from the backend: a raise at call time,
    a raise while its iterable is consumed, too few or too many results, or a
    result that is not a ``bool`` becomes a failed outcome naming the problem.
    The outcome's ``call_s`` is the call's own duration, its result read
    to the end.
    """
    keys = list(group.keys)
    started = time.perf_counter()
    verdicts, failure, detail, unanswered = _answer(backend, keys, group.req_context)
    call_s = time.perf_counter() - started
    return GroupOutcome(group, verdicts, failure, detail, call_s=call_s, unanswered=unanswered)


_Answer = tuple[tuple[bool, ...] | None, FailureKind | None, str, frozenset[int]]
_NONE: frozenset[int] = frozenset()


def _answer(backend: Backend, keys: list[Key], req_context: object) -> _Answer:
    """The backend's verdicts for ``keys``, or the failure and its detail (never raises an ``Exception``).

    Last, the indices a :class:`Verdicts` result marked as no answer (only
    those that are ``False`` and in range: a mark cannot turn a hit into
    anything else).
    """
    expected = len(keys)
    try:
        result = backend.batch_lookup(keys, req_context)
    except Exception as exc:
        return None, FailureKind.RAISED, describe_exception(exc), _NONE
    if type(result) is list and len(result) == expected and set(map(type, result)) <= _BOOL_ONLY:
        # The common answer, checked in C: a large group's verdicts would
        # otherwise hold the GIL for a Python loop the scheduler waits on.
        return tuple(result), None, "", _NONE
    if type(result) is Verdicts and len(result) == expected and set(map(type, result)) <= _BOOL_ONLY:
        marked = result.unanswered
        unanswered = (
            frozenset(i for i in marked if type(i) is int and 0 <= i < expected and not result[i])
            if type(marked) is frozenset
            else _NONE
        )
        return tuple(result), None, "", unanswered
    verdicts: list[bool] = []
    try:
        for verdict in result:
            if len(verdicts) == expected:
                return None, FailureKind.LONG_RESULT, f"more than {expected} results", _NONE
            if verdict is not True and verdict is not False:
                return None, FailureKind.BAD_VERDICT, f"result {len(verdicts)} is {type(verdict).__name__}", _NONE
            verdicts.append(verdict)
    except Exception as exc:
        return None, FailureKind.RAISED_WHILE_ITERATING, describe_exception(exc), _NONE
    if len(verdicts) < expected:
        return None, FailureKind.SHORT_RESULT, f"{len(verdicts)} results for {expected} keys", _NONE
    return tuple(verdicts), None, "", _NONE


_BOOL_ONLY = frozenset({bool})


def describe_exception(exc: BaseException) -> str:
    """``exc`` as ``"Type: message"``, at most 500 characters (an outcome's detail)."""
    return f"{type(exc).__name__}: {exc}"[:500]


def discard_outcome(outcome: GroupOutcome) -> None:
    """A ``publish`` that drops the outcome: a stopped worker's."""
    del outcome


def check_timeout(name: str, value: object) -> float:
    """``value`` as a float number of seconds that ``threading`` can wait for.

    Raises:
        InvalidInputError: not a real number (``bool`` excluded).
        InvalidValueError: not positive, not finite, or above
            ``threading.TIMEOUT_MAX`` (an ``Event.wait`` would raise
            ``OverflowError`` on the worker for every group).
    """
    return _seconds_threading_waits(name, value, zero_ok=False)


def check_hold(name: str, value: object) -> float:
    """``value`` as a float number of seconds, 0 or more, that ``threading`` can wait for.

    Raises:
        InvalidInputError: not a real number (``bool`` excluded).
        InvalidValueError: negative, not finite, or above ``threading.TIMEOUT_MAX``.
    """
    return _seconds_threading_waits(name, value, zero_ok=True)


def _seconds_threading_waits(name: str, value: object, *, zero_ok: bool) -> float:
    return check_seconds(
        name,
        value,
        limit=threading.TIMEOUT_MAX,
        limit_name="threading.TIMEOUT_MAX",
        zero_ok=zero_ok,
        wrong_type=InvalidInputError,
        wrong_value=InvalidValueError,
    )


def check_count(name: str, value: object) -> int:
    """``value`` if it is an int of at least 1.

    Raises:
        InvalidInputError: not an ``int`` (``bool`` excluded).
        InvalidValueError: less than 1.
    """
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidInputError(f"{name} must be an int, got {type(value).__name__}")
    if value < 1:
        raise InvalidValueError(f"{name} must be at least 1, got {value}")
    return value
