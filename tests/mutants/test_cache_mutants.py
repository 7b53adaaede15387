"""Defects of the verdict cache (docs/cache.md) the stateful machine must find.

Each mutant is ``LookupCore`` with one rule of the cache changed; the shipped
machine, with the cache on (tests/property/test_stateful_cache.py's
configuration), must find each (derandomized, as tests/mutants/
test_named_mutants.py searches), and the check that fails must be one of
the mutant's ``CAUGHT_BY``: ``CacheProvenance``, the clause written for
what may be remembered; for ``cache-forgets-live-only`` also the trace
replay against the reference model (``TraceDivergence``), which fails
first when the lookup served from the kept entry comes in the same
scheduler step as the ``mark_miss`` (the search meets that case first).
"""

from __future__ import annotations

from collections.abc import Iterable

import pytest
from mutant_cores import manager_with

from kvprobe.statemachine import LookupCore, VerdictCache
from kvprobe.statemachine.inputs import key_list
from kvprobe.statemachine.types import GroupOutcome, Key, is_death_marker
from kvprobe.testing.search import hunt
from kvprobe.testing.stateful import lookup_machine

CACHE = VerdictCache(max_entries=2, hit_ttl_s=2.5, miss_ttl_s=1.0)


class MarkMissKeepsRemembered(LookupCore):
    def mark_miss(self, keys: Iterable[Key]) -> None:
        # MUTANT: mark_miss does not tell the cache, so a "stored" whose load
        # failed is served again to the next request.
        memory, self.memory = self.memory, None
        try:
            super().mark_miss(keys)
        finally:
            self.memory = memory


class ForgetsLiveOnly(LookupCore):
    def mark_miss(self, keys: Iterable[Key]) -> None:
        listed = key_list(keys, "mark_miss")
        held = [key for key in listed if key in self.states]
        memory, self.memory = self.memory, None
        try:
            super().mark_miss(listed)
        finally:
            self.memory = memory
        # MUTANT: only the keys that had a state are forgotten, so the
        # remembered "stored" of a key no request holds, whose load failed,
        # is served to the next request.
        if memory is not None:
            for key in held:
                memory.forget(key)


class RemembersFailureMiss(LookupCore):
    def apply(self, outcome: GroupOutcome) -> None:
        super().apply(outcome)
        # MUTANT: a failed group's MISS (an error, a timeout, a saturated or dead
        # worker) is remembered as if the backend had answered "not stored".
        if outcome.failure is None or is_death_marker(outcome) or self.memory is None:
            return
        for state in outcome.group.states:
            if self.states.get(state.key) is state and state.verdict is False:
                self.memory.remember(state.key, state.generation, False)


MUTANTS = {
    "cache-keeps-marked-miss": MarkMissKeepsRemembered,
    "cache-remembers-failure": RemembersFailureMiss,
    "cache-forgets-live-only": ForgetsLiveOnly,
}


#: The checks whose failure counts as catching each mutant.
CAUGHT_BY = {
    "cache-keeps-marked-miss": ("CacheProvenance",),
    "cache-remembers-failure": ("CacheProvenance",),
    "cache-forgets-live-only": ("CacheProvenance", "TraceDivergence"),
}


def test_every_cache_mutant_names_what_catches_it() -> None:
    assert set(CAUGHT_BY) == set(MUTANTS)


@pytest.mark.parametrize("name", sorted(MUTANTS))
def test_machine_finds_cache_mutant(name: str) -> None:
    machine = lookup_machine(manager_class=manager_with(MUTANTS[name]), verdict_cache=CACHE)
    elapsed, messages = hunt(machine, CAUGHT_BY[name])
    print(f"{name}: caught in {elapsed:.1f} s: {messages[:300]}")
