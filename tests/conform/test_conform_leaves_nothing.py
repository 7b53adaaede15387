"""A conformance run leaves nothing alive in the process that ran it.

Test suites (and ``bench/``) run ``kvprobe conform`` in-process, many times.
Hypothesis keeps every state machine class it runs for the life of the
process, and each conformance run makes one: whatever that class reaches
(its factory, and through it the engine that shrank the failure, with every
run's choices and the failures' tracebacks and frames) used to stay alive,
over a million objects after ``tests/conform``, which made every later
``gc.collect()`` take about a second.  Here weak references say what
survives: the tiers a run made and the machine class it built must be gone
once the run has returned.
"""

from __future__ import annotations

import gc
import weakref

import pytest
from lying_tiers import AlwaysTrue

from kvprobe.conform import main as conform_main
from kvprobe.testing.stateful import run_conformance
from kvprobe.testing.stateful.machine import LookupMachineBase


class _Tracked:
    """A factory of lying tiers that keeps a weak reference to each tier it makes."""

    def __init__(self) -> None:
        self.made: list[weakref.ref[AlwaysTrue]] = []

    def __call__(self) -> AlwaysTrue:
        tier = AlwaysTrue()
        self.made.append(weakref.ref(tier))
        return tier


@pytest.mark.parametrize("worker", ["manual", "thread"])
def test_a_failed_run_keeps_none_of_its_tiers(worker: str) -> None:
    # The failing runs' tracebacks reach the machine, and through it the tier,
    # of every run the shrinking kept: a kept failure shows as a live tier.
    factory = _Tracked()
    result = run_conformance(factory, derandomize=True, worker=worker)
    assert not result.passed and "TierAnswersTruthfully" in result.failure
    assert len(factory.made) > 2  # the first call, the failing run, and the shrinking's runs
    gc.collect()
    alive = [ref for ref in factory.made if ref() is not None]
    assert alive == [], f"{len(alive)} of the {len(factory.made)} tiers the run made are still alive"


def test_conform_leaves_no_machine_class_behind(capsys: pytest.CaptureFixture[str]) -> None:
    # The machine class holds the run's factory and options; Hypothesis's
    # per-class tables must not keep it once the run is over.
    before = weakref.WeakSet(LookupMachineBase.__subclasses__())
    for _ in range(2):
        assert conform_main(["lying_tiers:AlwaysTrue", "--derandomize"]) == 1
    assert "TierAnswersTruthfully" in capsys.readouterr().out
    gc.collect()
    left = [machine.__name__ for machine in LookupMachineBase.__subclasses__() if machine not in before]
    assert left == []
