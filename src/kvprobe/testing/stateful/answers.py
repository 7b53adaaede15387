"""One call of the tier under test, and what it returned, as the conformance report words them.

The contract of ``batch_lookup`` is one ``bool`` per key, in key order.  A
tier that raises, or returns something else, is tolerated by the manager:
``probe_group`` fails the group with a :class:`FailureKind` and its keys
resolve as MISS.  That is the tier's fault, not kvprobe's, so the machine
reads each answer the way ``probe_group`` does (:meth:`TierAnswer.read`),
tells the model that the group failed that way, and reports the call as the
tier's: which call, its keys and request, what it returned or raised.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from kvprobe.statemachine import FailureKind

__all__ = ["TierAnswer", "TierCall"]

#: How much of a returned value a report shows.
_SHOWN_CHARS = 200


@dataclass(frozen=True)
class TierCall:
    """One ``batch_lookup`` call: its number (1 for the run's first call), keys and request id."""

    number: int
    keys: tuple[bytes, ...]
    req_id: str | None
    pool: tuple[bytes, ...]

    def names(self) -> str:
        """The keys as ``k1, k2`` (keys outside the pool as hex)."""
        return ", ".join(f"k{self.pool.index(k) + 1}" if k in self.pool else k.hex() for k in self.keys)

    def says(self, what: str) -> str:
        """``the tier's batch_lookup(keys=[k1, k2], req='req-a') (call 3 of the run) <what>``."""
        return (
            f"the tier's batch_lookup(keys=[{self.names()}], req={self.req_id!r}) (call {self.number} of the run) "
            + what
        )


def _replayed(items: Sequence[Any], error: BaseException | None) -> Iterator[Any]:
    yield from items
    if error is not None:
        raise error


@dataclass(frozen=True)
class TierAnswer:
    """What a call returned, read as ``probe_group`` reads it: at most one item
    past the number of keys, stopping at an error while iterating.

    ``failure`` is the FailureKind ``probe_group`` gives the answer (None:
    one bool per key); ``shown`` is the answer as a report prints it.
    """

    items: tuple[Any, ...]
    error: Exception | None
    failure: FailureKind | None
    shown: str
    consumed: bool  # an iterator: reading it used it up
    not_iterable: bool

    @classmethod
    def read(cls, result: object, expected: int) -> TierAnswer:
        """Read ``result`` (never raises: an error while iterating is kept in ``error``)."""
        try:
            iterator = iter(result)  # type: ignore[call-overload]
        except TypeError as exc:
            return cls((), exc, FailureKind.RAISED_WHILE_ITERATING, _shown(result, ()), False, True)
        items: list[Any] = []
        error: Exception | None = None
        try:
            for item in iterator:
                items.append(item)
                if len(items) > expected:
                    break
        except Exception as exc:
            error = exc
        return cls(
            tuple(items), error, _failure(items, error, expected), _shown(result, items), iterator is result, False
        )

    def replay(self, result: object) -> object:
        """``result`` as the manager would have met it, had nobody read it first."""
        return _replayed(self.items, self.error) if self.consumed else result

    def describe(self) -> str:
        """What the tier did, as a report says it (``returned [0, 1] (int, not bool)``)."""
        if self.failure is FailureKind.BAD_VERDICT:
            kinds = ", ".join(dict.fromkeys(_type_name(v) for v in self.items if v is not True and v is not False))
            return f"returned {self.shown} ({kinds}, not bool)"
        if self.not_iterable:
            return f"returned {self.shown}, not a sequence of bools"
        if self.failure is FailureKind.RAISED_WHILE_ITERATING:
            return f"returned {self.shown}, which raised {self.error!r} while it was iterated"
        return f"returned {self.shown}"


def _failure(items: Sequence[Any], error: Exception | None, expected: int) -> FailureKind | None:
    """The FailureKind ``probe_group`` gives these items (its checks, in its order)."""
    for index, item in enumerate(items):
        if index == expected:
            return FailureKind.LONG_RESULT
        if item is not True and item is not False:
            return FailureKind.BAD_VERDICT
    if error is not None:
        return FailureKind.RAISED_WHILE_ITERATING
    if len(items) < expected:
        return FailureKind.SHORT_RESULT
    return None


def _shown(result: object, items: Sequence[Any]) -> str:
    """``result`` for a report: its repr, or for an iterator (whose repr names an
    address, different in every run) its type and what it yielded."""
    text = repr(result)
    if " at 0x" in text:
        text = f"a {type(result).__name__} yielding {list(items)!r}"
    return text if len(text) <= _SHOWN_CHARS else text[: _SHOWN_CHARS - 3] + "..."


def _type_name(value: object) -> str:
    if value is None:
        return "None"
    kind = type(value)
    return kind.__name__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__qualname__}"
