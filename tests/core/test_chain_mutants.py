"""Power of the stateful machine's chain rule: mutant ``lookup_chain`` s it must catch.

Each mutant core gets one defect of the walk; the shipped machine
(:func:`kvprobe.testing.stateful.lookup_machine`, manual worker) must fail on
every one, derandomized so the figure is stable (5 of 5 when written).
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis.stateful import run_state_machine_as_test

from kvprobe.statemachine import AsyncLookupManager, ChainAnswer, HasReqId, LookupCore
from kvprobe.testing.stateful import lookup_machine


class WalksPastTheMiss(LookupCore):
    def lookup_chain(self, keys: Sequence[bytes], req_context: HasReqId) -> ChainAnswer:
        answer = super().lookup_chain(keys, req_context)
        for key in list(keys)[answer.looked_up :]:
            self.lookup(key, req_context)
        return answer


class CountsWithoutTheStoppingKey(LookupCore):
    def lookup_chain(self, keys: Sequence[bytes], req_context: HasReqId) -> ChainAnswer:
        a = super().lookup_chain(keys, req_context)
        return ChainAnswer(a.leading_hits, a.stopped_at_miss, a.pending, a.looked_up - a.stopped_at_miss)


class HitsCountedPastAnUnknownKey(LookupCore):
    def lookup_chain(self, keys: Sequence[bytes], req_context: HasReqId) -> ChainAnswer:
        a = super().lookup_chain(keys, req_context)
        hits = a.looked_up - a.stopped_at_miss if a.pending else a.leading_hits
        return ChainAnswer(hits, a.stopped_at_miss, a.pending, a.looked_up)


class StopsAtTheFirstUnknownKey(LookupCore):
    def lookup_chain(self, keys: Sequence[bytes], req_context: HasReqId) -> ChainAnswer:
        verdicts = []
        for key in keys:
            verdicts.append(self.lookup(key, req_context))
            if verdicts[-1] is not True:
                break
        stopped = bool(verdicts) and verdicts[-1] is False
        return ChainAnswer(verdicts.count(True), stopped, None in verdicts, len(verdicts))


class JoinsNotCounted(LookupCore):
    def lookup_chain(self, keys: Sequence[bytes], req_context: HasReqId) -> ChainAnswer:
        joins, reuses = self._stats.joins, self._stats.in_flight_reuses
        answer = super().lookup_chain(keys, req_context)
        self._stats.joins, self._stats.in_flight_reuses = joins, reuses
        return answer


MUTANTS = [
    WalksPastTheMiss,
    CountsWithoutTheStoppingKey,
    HitsCountedPastAnUnknownKey,
    StopsAtTheFirstUnknownKey,
    JoinsNotCounted,
]


@pytest.mark.parametrize("core", MUTANTS, ids=[m.__name__ for m in MUTANTS])
def test_stateful_machine_catches_the_mutant_chain(core: type[LookupCore]) -> None:
    manager = type(f"Manager{core.__name__}", (AsyncLookupManager,), {"core_class": core})
    machine = lookup_machine(manager_class=manager)
    config = settings(
        max_examples=1000,
        stateful_step_count=40,
        deadline=None,
        database=None,
        derandomize=True,
        suppress_health_check=list(HealthCheck),
        phases=[p for p in Phase if p is not Phase.shrink],
    )
    with pytest.raises(AssertionError):
        run_state_machine_as_test(machine, settings=config)
