"""Defects only the worker's Saturate and death-marker rules of the machine reach.

The manual machine once killed its worker only without the death marker and
never saturated, so a core that mishandles the marker or a SATURATED outcome
passed it.  Each mutant here is ``LookupCore`` with one rule of those paths
changed; the machine must find each (derandomized, as tests/mutants/
test_named_mutants.py searches).
"""

from __future__ import annotations

import pytest
from mutant_cores import manager_with
from test_named_mutants import DIVERGENCE

from kvprobe.statemachine import LookupCore
from kvprobe.statemachine.types import FailureKind, GroupOutcome, is_death_marker
from kvprobe.testing.search import hunt
from kvprobe.testing.stateful import lookup_machine


class MarkerIgnored(LookupCore):
    def apply(self, outcome: GroupOutcome) -> None:
        # MUTANT: the death marker is dropped, so the dead worker's open groups
        # stay IN_FLIGHT until a flush notices the death (lookups wait for ever).
        if is_death_marker(outcome):
            return
        super().apply(outcome)


class SaturatedCountedAsCall(LookupCore):
    def _count_call(self, failure: FailureKind | None) -> None:
        # MUTANT: a SATURATED group (no call was started) is counted as a failed backend call.
        super()._count_call(FailureKind.RAISED if failure is FailureKind.SATURATED else failure)


MUTANTS = {
    # A lookup answers None where the model's drain of the marker resolved the key.
    "death-marker-ignored": (MarkerIgnored, ("NothingLeaks", "the manager answered", *DIVERGENCE)),
    "saturated-counted-as-call": (SaturatedCountedAsCall, DIVERGENCE),
}


@pytest.mark.parametrize("name", sorted(MUTANTS))
def test_machine_finds_worker_rule_mutant(name: str) -> None:
    core, expected = MUTANTS[name]
    machine = lookup_machine(manager_class=manager_with(core))
    elapsed, messages = hunt(machine, expected)
    print(f"{name}: caught in {elapsed:.1f} s: {messages[:300]}")
