"""Tiers that break the backend contract in ways the manager tolerates, each a factory for the CLI.

The contract of ``batch_lookup`` is one ``bool`` per key, in key order.  A
tier that raises, or answers with something else (0/1, numpy bools, None, a
generator that raises part way), does not make the manager give a wrong
verdict: ``probe_group`` fails the group and its keys resolve as MISS.  So
``kvprobe conform`` must fail such a tier as the tier's fault, naming the
call and what it returned or raised, and not report a divergence of kvprobe
from its model.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from kvprobe.backends import InMemoryBackend


class IntVerdicts(InMemoryBackend):
    """Answers 1 and 0 where the contract says True and False."""

    def batch_lookup(self, keys: Sequence[bytes], req_context: object) -> list[int]:
        return [int(v) for v in super().batch_lookup(keys, req_context)]


class SometimesRaises(InMemoryBackend):
    """Every third call raises ``OSError`` (a flaky device)."""

    def __init__(self) -> None:
        super().__init__()
        self.lookups = 0

    def batch_lookup(self, keys: Sequence[bytes], req_context: object) -> list[bool]:
        self.lookups += 1
        if self.lookups % 3 == 0:
            raise OSError(5, "Input/output error")
        return super().batch_lookup(keys, req_context)


class AnswersNone(InMemoryBackend):
    """Returns None (a forgotten ``return``)."""

    def batch_lookup(self, keys: Sequence[bytes], req_context: object) -> None:
        super().batch_lookup(keys, req_context)


class StreamBreaks(InMemoryBackend):
    """Streams its answers from a generator that loses its connection after the first."""

    def batch_lookup(self, keys: Sequence[bytes], req_context: object) -> Iterator[bool]:
        verdicts = super().batch_lookup(keys, req_context)
        yield verdicts[0]
        raise ConnectionResetError("connection reset by peer")
