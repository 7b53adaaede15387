"""Every named mutant (docs/properties.md) is caught by the stateful machine.

Each test runs the shipped machine against a manager built on the mutant and
asserts that Hypothesis *finds* a failing example (none is written by hand):
the evidence that the property suite can fail.  The search is derandomized
so the result does not depend on luck, and bounded by the number of examples
(wall time depends on the machine's load; measured here: under 1 s for most,
about 20 s for stale-result-applied).
"""

from __future__ import annotations

import pytest
from mutant_cores import MUTANTS

from kvprobe.testing.search import hunt
from kvprobe.testing.stateful import lookup_machine

# What the failure must mention: the invariant docs/properties.md says catches
# the mutant, or a divergence from the reference model (observables or trace).
DIVERGENCE = (
    "diverges from the reference model",  # the compared tables, counters or the replayed trace
    "the model says",
    "the model expects",
    "the model holds",
    "phase() per key",
)
EXPECTED = {
    "flush-submits-cleaned": ("EnqueueOnce", *DIVERGENCE),
    "cleanup-drops-in-flight": ("NoDuplicateProbe", *DIVERGENCE),
    "stale-result-applied": ("StaleGenerationDropped", *DIVERGENCE),
    "double-result": ("EnqueueOnce", "ForcedMissSticks", *DIVERGENCE),
    "worker-error-drops-batch": ("NothingLeaks", "EventuallyReclaimed", *DIVERGENCE),
    "orphan-never-reclaimed": ("NothingLeaks", *DIVERGENCE),
    "mark-miss-in-flight-unguarded": ("ForcedMissSticks", "VerdictIffResolved", *DIVERGENCE),
}


def test_every_named_mutant_is_listed() -> None:
    assert set(MUTANTS) == set(EXPECTED)
    assert len(MUTANTS) == 7


#: The searches that take tens of seconds: `make test-long` runs them.  Each
#: mutant is still caught by `make test`, whose tests/tla/test_tla_trace_mutants.py
#: has TLC reject a trace of every named mutant's core.
CAMPAIGNS = {"double-result", "stale-result-applied"}


@pytest.mark.parametrize(
    "name", [pytest.param(n, marks=pytest.mark.long) if n in CAMPAIGNS else n for n in sorted(MUTANTS)]
)
def test_machine_finds_mutant(name: str) -> None:
    manager_class, worker_class = MUTANTS[name]
    machine = lookup_machine(manager_class=manager_class, worker_class=worker_class)
    elapsed, messages = hunt(machine, EXPECTED[name])
    print(f"{name}: caught in {elapsed:.1f} s: {messages[:300]}")
