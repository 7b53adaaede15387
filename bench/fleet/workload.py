"""Requests for the fleet: Poisson arrivals, long prompts, shared prefixes, what the tier holds.

A key is an 8-byte block hash (random, so the store's partitions share the
load evenly once split).  Shared prefixes are the same keys on every
engine.  What the tier holds is prefix-closed, as in a prefix cache: a
request's first ``stored`` blocks are in the tier, the rest are not.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from bench.fleet.params import WorkloadParams

__all__ = ["Prompt", "Tier", "Workload"]


@dataclass(frozen=True)
class Prompt:
    keys: tuple[bytes, ...]
    stored: int  # the tier holds keys[:stored]


class Tier:
    """The set of keys the tier holds (shared by every engine: one bucket)."""

    def __init__(self) -> None:
        self.keys: set[bytes] = set()
        self.evictions = 0  # suffixes evicted
        self.evicted_blocks = 0
        self.rewritten_blocks = 0  # evicted blocks written back by a request that computed them

    def holds(self, key: bytes) -> bool:
        return key in self.keys

    def evict_suffix(self, prefix: Prompt, rng: random.Random) -> None:
        """``prefix`` loses a uniformly drawn suffix of its stored blocks (those still held)."""
        if prefix.stored:
            gone = self.keys.intersection(prefix.keys[rng.randrange(prefix.stored) : prefix.stored])
            self.keys -= gone
            self.evictions += 1
            self.evicted_blocks += len(gone)

    def write_back(self, keys: tuple[bytes, ...]) -> None:
        """A request computed ``keys`` (blocks the workload stores) and wrote those the tier had lost."""
        lost = [k for k in keys if k not in self.keys]
        self.keys.update(lost)
        self.rewritten_blocks += len(lost)


class Workload:
    """Draws prompts for one engine; shared prefixes come from the fleet-wide list.

    Args:
        params: the workload's figures.
        shared: the fleet's shared prefixes and how deep the tier holds each.
        tier: where stored keys are recorded.
        rng: this engine's draws.
    """

    def __init__(self, params: WorkloadParams, shared: list[Prompt], tier: Tier, rng: random.Random) -> None:
        self.p = params
        self.shared = shared
        self.tier = tier
        self.rng = rng

    @staticmethod
    def shared_prefixes(params: WorkloadParams, tier: Tier, rng: random.Random) -> list[Prompt]:
        """The fleet's shared prefixes, each stored in ``tier`` up to its drawn depth."""
        out = []
        for _ in range(params.shared_prefixes):
            length = rng.randint(*params.shared_len)
            keys = tuple(rng.randbytes(8) for _ in range(length))
            stored = int(length * rng.uniform(*params.shared_stored))
            tier.keys.update(keys[:stored])
            out.append(Prompt(keys, stored))
        return out

    def next_gap(self) -> float:
        """Seconds until the next arrival (Poisson)."""
        return self.rng.expovariate(self.p.arrivals_per_s)

    def prompt(self) -> Prompt:
        """A new request's keys; its stored blocks are added to the tier."""
        p, rng = self.p, self.rng
        length = int(math.exp(rng.uniform(math.log(p.min_blocks), math.log(p.max_blocks + 1))))
        length = max(p.min_blocks, min(p.max_blocks, length))
        head: tuple[bytes, ...] = ()
        stored = 0
        if self.shared and rng.random() < p.shared_fraction:
            prefix = self.shared[rng.randrange(len(self.shared))]
            head = prefix.keys[:length]
            stored = min(prefix.stored, len(head))
        own = tuple(rng.randbytes(8) for _ in range(length - len(head)))
        if stored == len(head) and own and rng.random() < p.return_fraction:
            # A conversation coming back: its earlier turn's blocks are stored.
            mine = int(len(own) * rng.uniform(*p.return_stored))
            self.tier.keys.update(own[:mine])
            stored += mine
        return Prompt(head + own, stored)
