"""Broken tiers that ``kvprobe conform`` must fail, each a factory for the CLI.

Each is an in-memory tier (a ``BlockStore``: ``batch_lookup``, ``store``,
``remove``) with one defect a real tier can have.  ``LYING_TIERS`` maps a
short name to ``(factory path, what is wrong)``; the CI test runs the
derandomized default ``kvprobe conform`` on each, and
``bench/checks/conform_power.py`` measures over random seeds how often and how fast
the default run catches each one.
"""

from __future__ import annotations

import bisect
import time
from collections.abc import Sequence

from kvprobe.backends import InMemoryBackend
from kvprobe.conform import DEFAULT_TIMEOUT_S


class AlwaysTrue(InMemoryBackend):
    """Says every block is stored."""

    def batch_lookup(self, keys: Sequence[bytes], req_context: object) -> list[bool]:
        return [True for _ in keys]


class AlwaysFalse(InMemoryBackend):
    """Says no block is stored."""

    def batch_lookup(self, keys: Sequence[bytes], req_context: object) -> list[bool]:
        return [False for _ in keys]


class RemovedStillFound(InMemoryBackend):
    """A removal leaves a tombstone the lookup mistakes for the block: True for a
    key only after it was removed (a lookup that checks the index, not the data)."""

    def __init__(self) -> None:
        super().__init__()
        self.tombstones: set[bytes] = set()

    def store(self, key: bytes, data: bytes = b"") -> None:
        self.tombstones.discard(key)
        super().store(key, data)

    def remove(self, key: bytes) -> None:
        if key in self.stored:
            self.tombstones.add(key)
        super().remove(key)

    def batch_lookup(self, keys: Sequence[bytes], req_context: object) -> list[bool]:
        return [k in self.stored or k in self.tombstones for k in keys]


class PermutedVerdicts(InMemoryBackend):
    """Right verdicts in the wrong order: a group's answers come back reversed."""

    def batch_lookup(self, keys: Sequence[bytes], req_context: object) -> list[bool]:
        return super().batch_lookup(keys, req_context)[::-1]


class NeighbourVerdict(InMemoryBackend):
    """A bisect without its equality check: True when the key *or the next stored
    key in sorted order* exists, i.e. often the verdict of a neighbouring key."""

    def batch_lookup(self, keys: Sequence[bytes], req_context: object) -> list[bool]:
        index = sorted(self.stored)
        return [bisect.bisect_left(index, k) < len(index) for k in keys]


class DropsOneAnswer(InMemoryBackend):
    """Loses the last answer of every call (one result too few)."""

    def batch_lookup(self, keys: Sequence[bytes], req_context: object) -> list[bool]:
        return super().batch_lookup(keys, req_context)[:-1]


class StaleNegativeCache(InMemoryBackend):
    """Caches "not stored" and never invalidates it: misses blocks stored later."""

    def __init__(self) -> None:
        super().__init__()
        self.known_missing: set[bytes] = set()

    def batch_lookup(self, keys: Sequence[bytes], req_context: object) -> list[bool]:
        fresh = super().batch_lookup(keys, req_context)
        answers = [v and k not in self.known_missing for k, v in zip(keys, fresh, strict=True)]
        self.known_missing.update(k for k, v in zip(keys, answers, strict=True) if not v)
        return answers


class SlowButRight(InMemoryBackend):
    """Right answers, after twice the default timeout of ``kvprobe conform``."""

    def batch_lookup(self, keys: Sequence[bytes], req_context: object) -> list[bool]:
        time.sleep(2 * DEFAULT_TIMEOUT_S)
        return super().batch_lookup(keys, req_context)


class ForgetfulStore(InMemoryBackend):
    """Loses every second block it stores (the write path drops data)."""

    def __init__(self) -> None:
        super().__init__()
        self.writes = 0

    def store(self, key: bytes, data: bytes = b"") -> None:
        self.writes += 1
        if self.writes % 2:
            super().store(key, data)


#: name -> (MODULE:FACTORY for ``kvprobe conform``, the defect in words)
LYING_TIERS: dict[str, tuple[str, str]] = {
    "always-true": ("lying_tiers:AlwaysTrue", "every block stored"),
    "always-false": ("lying_tiers:AlwaysFalse", "no block stored"),
    "removed-still-found": ("lying_tiers:RemovedStillFound", "True for a key only after it was removed"),
    "permuted": ("lying_tiers:PermutedVerdicts", "a group's verdicts reversed"),
    "neighbour": ("lying_tiers:NeighbourVerdict", "the verdict of the next key in sorted order"),
    "drops-one": ("lying_tiers:DropsOneAnswer", "one answer too few per call"),
    "stale-cache": ("lying_tiers:StaleNegativeCache", "misses blocks stored after a miss was cached"),
    "slow": ("lying_tiers:SlowButRight", "right, but after 2x the timeout"),
    "forgetful": ("lying_tiers:ForgetfulStore", "loses every second store"),
}
