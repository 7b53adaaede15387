"""The shipped stateful machine with the verdict cache on (docs/cache.md).

The machine's clock (the ``Tick`` rule) drives the cache's, so remembered
answers age and expire within a run; a bound of two entries over the
machine's keys makes evictions happen; both TTLs are positive so that hits
and misses are remembered.  The model's memory is compared with the core's
after every step, and ``CacheProvenance`` is checked on both.
"""

from __future__ import annotations

from typing import Any

from hypothesis import settings
from hypothesis.stateful import run_state_machine_as_test

from kvprobe.statemachine import VerdictCache
from kvprobe.testing.stateful import lookup_machine

CACHE = VerdictCache(max_entries=2, hit_ttl_s=1.5, miss_ttl_s=0.5)

# Chain walks too: a walk meets keys served from memory (chain.py takes the
# verdict LookupCore._new_probe returns; the model's ChainHitsAnswered judges
# a recalled key by the generation it was recalled from).
WALKS = True

# The manual worker: every interleaving of lookups, answers, failures, forced misses and time.
TestManualWorkerWithCache = lookup_machine(verdict_cache=CACHE, chain_walks=WALKS).TestCase

# The real ThreadedWorker: each flush waits for it; few examples (the manual machine searches).
_Threaded = lookup_machine(worker="thread", verdict_cache=CACHE, chain_walks=WALKS)
_Threaded.TestCase.settings = settings(settings(), max_examples=max(5, settings().max_examples // 10))
TestThreadedWorkerWithCache = _Threaded.TestCase


def test_the_machine_reaches_what_the_cache_does() -> None:
    """Not vacuous: the runs serve lookups from memory, find entries expired and forget on mark_miss."""
    machine = lookup_machine(verdict_cache=CACHE, chain_walks=WALKS)
    seen = {"recalled": 0, "remembered": 0, "expired": 0, "forgotten": 0}
    shutdown = machine.teardown

    def count_then_teardown(self: Any) -> None:
        memory = self.m.core.memory
        for name in seen:
            seen[name] += getattr(memory, name)
        shutdown(self)

    machine.teardown = count_then_teardown  # type: ignore[method-assign]
    run_state_machine_as_test(machine, settings=settings(max_examples=60, derandomize=True, database=None))
    assert all(seen.values()), seen
