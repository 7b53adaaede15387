"""Every named mutant (docs/properties.md) is caught by the stateful machine.

Each test runs the shipped machine against a manager built on the mutant and
asserts that Hypothesis *finds* a failing example (none is written by hand):
the evidence that the property suite can fail.  The search is derandomized
so the result does not depend on luck, and bounded by the number of examples
(wall time depends on the machine's load; measured here: under 1 s for most,
about 20 s for stale-result-applied).
"""

from __future__ import annotations

import time

import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis.errors import HypothesisException
from hypothesis.stateful import run_state_machine_as_test
from mutant_cores import MUTANTS

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

SEARCH = settings(
    max_examples=2000,
    stateful_step_count=40,
    deadline=None,
    database=None,
    derandomize=True,
    suppress_health_check=list(HealthCheck),
    # Finding is the point here; shrinking (which can take minutes) is left to
    # the property suite and to `kvprobe conform`.
    phases=(Phase.explicit, Phase.generate),
    print_blob=False,
)


def _leaves(exc: BaseException) -> list[BaseException]:
    subs = getattr(exc, "exceptions", None)  # an ExceptionGroup (Python >= 3.11) of distinct failures
    if isinstance(subs, tuple):
        return [leaf for sub in subs for leaf in _leaves(sub)]
    return [exc]


def test_every_named_mutant_is_listed() -> None:
    assert set(MUTANTS) == set(EXPECTED)
    assert len(MUTANTS) == 7


@pytest.mark.parametrize("name", sorted(MUTANTS))
def test_machine_finds_mutant(name: str) -> None:
    manager_class, worker_class = MUTANTS[name]
    machine = lookup_machine(manager_class=manager_class, worker_class=worker_class)
    start = time.monotonic()
    with pytest.raises(Exception) as found:
        run_state_machine_as_test(machine, settings=SEARCH)
    elapsed = time.monotonic() - start
    leaves = _leaves(found.value)
    assert not any(isinstance(e, HypothesisException) for e in leaves), f"Hypothesis itself failed: {found.value!r}"
    messages = " | ".join(f"{type(e).__name__}: {e}" for e in leaves)
    assert any(word in messages for word in EXPECTED[name]), f"{name} caught for an unexpected reason: {messages}"
    print(f"{name}: caught in {elapsed:.1f} s: {messages[:300]}")
