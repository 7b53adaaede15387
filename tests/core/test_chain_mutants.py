"""Power of the stateful machine's chain rule: mutant ``lookup_chain`` s it must catch.

Each mutant core gets one defect of the walk; the shipped machine
(:func:`kvprobe.testing.stateful.lookup_machine`, manual worker) must fail on
every one, derandomized so the figure is stable (8 of 8 when written).  The
machine walks with a first window of one key, so the window rule is in play
on its short chains.

The window mutants change the walk itself (their extra keys are the walk's:
traced with their chain index), as a defect of the walk would.
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis.stateful import run_state_machine_as_test

from kvprobe.statemachine import AsyncLookupManager, ChainAnswer, HasReqId, LookupCore
from kvprobe.statemachine.windows import window_end
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


class WindowSkipsAhead(LookupCore):
    """Submits the next window while the current one is still unanswered (one window ahead)."""

    def lookup_chain(self, keys: Sequence[bytes], req_context: HasReqId) -> ChainAnswer:
        a = super().lookup_chain(keys, req_context)
        if not a.pending or a.stopped_at_miss or a.looked_up >= len(keys):
            return a
        ahead = list(keys)[a.looked_up : window_end(self.chain_window, a.looked_up)]
        for key in ahead:
            LookupCore.lookup(self, key, req_context)
        return ChainAnswer(a.leading_hits, False, True, a.looked_up + len(ahead))


class ProbeAfterMiss(LookupCore):
    """Finishes the window it is in after meeting a known miss (probes the keys after it)."""

    def lookup_chain(self, keys: Sequence[bytes], req_context: HasReqId) -> ChainAnswer:
        a = super().lookup_chain(keys, req_context)
        if not a.stopped_at_miss:
            return a
        rest = list(keys)[a.looked_up : window_end(self.chain_window, a.looked_up - 1)]
        for key in rest:
            LookupCore.lookup(self, key, req_context)
        return ChainAnswer(a.leading_hits, True, a.pending, a.looked_up + len(rest))


class PresumesWindowStored(LookupCore):
    """Counts the keys of an unanswered window as stored (as an inferring walk might)."""

    def lookup_chain(self, keys: Sequence[bytes], req_context: HasReqId) -> ChainAnswer:
        a = super().lookup_chain(keys, req_context)
        if a.pending and not a.stopped_at_miss:
            return ChainAnswer(a.looked_up, False, True, a.looked_up)
        return a


MUTANTS = [
    WindowSkipsAhead,
    ProbeAfterMiss,
    PresumesWindowStored,
    WalksPastTheMiss,
    CountsWithoutTheStoppingKey,
    HitsCountedPastAnUnknownKey,
    StopsAtTheFirstUnknownKey,
    JoinsNotCounted,
]


def mutant_settings(examples: int = 1000) -> settings:
    """Derandomized runs of 40 steps, no shrinking: a stable figure of the machine's power."""
    return settings(
        max_examples=examples,
        stateful_step_count=40,
        deadline=None,
        database=None,
        derandomize=True,
        suppress_health_check=list(HealthCheck),
        phases=[p for p in Phase if p is not Phase.shrink],
    )


@pytest.mark.parametrize("core", MUTANTS, ids=[m.__name__ for m in MUTANTS])
def test_stateful_machine_catches_the_mutant_chain(core: type[LookupCore]) -> None:
    manager = type(f"Manager{core.__name__}", (AsyncLookupManager,), {"core_class": core})
    machine = lookup_machine(manager_class=manager)
    with pytest.raises(AssertionError):
        run_state_machine_as_test(machine, settings=mutant_settings())
