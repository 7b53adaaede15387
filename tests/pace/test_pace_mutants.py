"""Every named mutant of the pace's rules (pace_mutants.py) is caught by the property that names it.

The stateful machine's rules (RateBound, NoEarlyShed, HoldHonoured,
RateFloor, DecreaseLowers, UndoRestores, LoadDecreases, UndoBelowLoad,
SizedCut) must be *found* by Hypothesis (none written by hand); the
whole-run properties (RecoveryWithinBound, SendsRecoverWithinBound,
NoiseAtCapacity, NoiseKeepsCapacity, NoiseKeepsDemand, FleetWithinCap,
NearCap) are searched
the same way over their parameters.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, Phase, given, settings, strategies as st
from hypothesis.stateful import run_state_machine_as_test
from pace_machine import pace_machine
from pace_mutants import MUTANTS
from pace_properties import (
    DEMAND_RUNS,
    check_fleet_within_cap,
    check_near_cap,
    check_noise_at_capacity,
    check_noise_keeps_capacity,
    check_noise_keeps_demand,
    check_recovery_within_bound,
    check_sends_recover_within_bound,
)

from kvprobe.backends._pace_core import PaceCore
from kvprobe.testing.search import failure_messages

# Hypothesis searches (about 20 s here, more in CI beside TLC): make test-long runs it.
pytestmark = pytest.mark.long

# The budget for a machine search.  Found, a search stops: a mutant caught
# early costs what it did.  Missed, it must have looked hard: with random
# seeds decrease-from-regrown-rate is found within 10 s (5 of 5), with the
# fixed seed after about 26 s, and one CI run missed it in 600 examples.
# No shrinking: the test asks which property failed, which the first
# failing example already says.  Beside three spinning processes, shrinking
# no-noise's example ran into Hypothesis's five-minute cap (its warning
# printed); CI spent 377 s on one mutant.  Unshrunk, the whole file takes
# about 20 s here.
SEARCH = settings(
    phases=[Phase.explicit, Phase.generate],
    max_examples=2000,
    stateful_step_count=30,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=list(HealthCheck),
)
WHOLE_RUNS = settings(SEARCH, max_examples=20)


def _search(core_class: type[PaceCore], prop: str) -> None:
    if prop == "RecoveryWithinBound":

        @WHOLE_RUNS
        @given(target=st.floats(20.0, 5500.0), heads=st.sampled_from([1, 4, 16]))
        def recovery(target: float, heads: int) -> None:
            check_recovery_within_bound(core_class, target, heads)

        recovery()
    elif prop == "SendsRecoverWithinBound":

        @WHOLE_RUNS
        @given(chunk=st.sampled_from([1, 4, 16]), keys=st.integers(20, 150), seed=st.integers(0, 2**16))
        def sends(chunk: int, keys: int, seed: int) -> None:
            check_sends_recover_within_bound(core_class, chunk, keys, seed)

        sends()
    elif prop == "NoiseAtCapacity":

        @WHOLE_RUNS
        @given(rate=st.floats(600.0, 1000.0), loss=st.floats(0.0, 0.10), seed=st.integers(0, 2**16))
        def at_capacity(rate: float, loss: float, seed: int) -> None:
            check_noise_at_capacity(core_class, rate, loss, seed)

        at_capacity()
    elif prop == "NoiseKeepsCapacity":

        @WHOLE_RUNS
        @given(loss=st.floats(0.0, 0.20), seed=st.integers(0, 2**16), heads=st.sampled_from([1, 4]))
        def noise(loss: float, seed: int, heads: int) -> None:
            check_noise_keeps_capacity(core_class, loss, seed, heads)

        noise()
    elif prop == "NoiseKeepsDemand":
        # Its mutants miss in a few runs of a hundred: 100 examples (about 10 s each).
        @settings(WHOLE_RUNS, max_examples=100)
        @given(**DEMAND_RUNS)
        def demand(loss: float, seed: int, heads: int, in_flight: int, rtt_s: float) -> None:
            check_noise_keeps_demand(core_class, loss, seed, heads, in_flight, rtt_s)

        demand()
    elif prop == "FleetWithinCap":
        # An overrun shows in a few runs of a hundred: as many as the property's own test.
        @settings(WHOLE_RUNS, max_examples=80)
        @given(n=st.integers(2, 6), cap=st.sampled_from([200.0, 400.0, 1000.0]), seed=st.integers(0, 2**16))
        def fleet(n: int, cap: float, seed: int) -> None:
            check_fleet_within_cap(core_class, n, cap, seed)

        fleet()
    elif prop == "NearCap":

        @WHOLE_RUNS
        @given(demand=st.floats(1.02, 1.10), seed=st.integers(0, 2**16))
        def near_cap(demand: float, seed: int) -> None:
            check_near_cap(core_class, demand, seed)

        near_cap()
    else:
        run_state_machine_as_test(pace_machine(core_class), settings=SEARCH)


def test_every_named_mutant_is_listed() -> None:
    assert len(MUTANTS) == 20


@pytest.mark.parametrize("name", sorted(MUTANTS))
def test_mutant_is_caught_by_its_property(name: str) -> None:
    core_class, prop = MUTANTS[name]
    try:
        _search(core_class, prop)
    except Exception as exc:  # one failure, or Hypothesis's group of several
        messages = failure_messages(exc)
    else:
        raise AssertionError(f"{name}: the search found nothing")
    assert prop in messages, messages[:600]
    print(f"{name}: caught by {prop}")
