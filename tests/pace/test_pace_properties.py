"""The pace's named properties hold for ``PaceCore`` over runs Hypothesis draws (bounds: pace_properties.py)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st
from pace_properties import (
    DEMAND_RUNS,
    check_fair_share,
    check_fleet_within_cap,
    check_near_cap,
    check_noise_at_capacity,
    check_noise_keeps_capacity,
    check_noise_keeps_demand,
    check_recovery_within_bound,
    check_sends_recover_within_bound,
)

from kvprobe.backends._pace_core import PaceCore

# Whole runs of tens of virtual seconds: fewer examples than the profile's.
RUNS = settings(settings.default, max_examples=12)


@RUNS
@given(target=st.floats(20.0, 5500.0), heads=st.sampled_from([1, 4, 16]))
def test_recovery_within_bound(target: float, heads: int) -> None:
    check_recovery_within_bound(PaceCore, target, heads)


# Before a refusal counted as demand: queries of 16 HEADs at the floor
# reached 1,000 HEAD/s after 54 s (bound 48.4 s), on the virtual clock and on
# Ceph RGW alike.
@RUNS
@given(chunk=st.sampled_from([1, 4, 16]), keys=st.integers(20, 150), seed=st.integers(0, 2**16))
def test_sends_recover_within_bound(chunk: int, keys: int, seed: int) -> None:
    check_sends_recover_within_bound(PaceCore, chunk, keys, seed)


@pytest.mark.parametrize("seed", [0, 1])
def test_sends_recover_within_bound_where_they_missed_before(seed: int) -> None:
    check_sends_recover_within_bound(PaceCore, 16, 100, seed)


@RUNS
@given(loss=st.floats(0.0, 0.20), seed=st.integers(0, 2**16), heads=st.sampled_from([1, 4]))
def test_noise_keeps_capacity(loss: float, seed: int, heads: int) -> None:
    check_noise_keeps_capacity(PaceCore, loss, seed, heads)


# Counterexamples of 200 further draws (2026-12-07): at 0.4-1.3 % random
# 503s the first rare failures cut the pace by 30 % from unpaced, three
# times, none undone, and CUBIC took about 18 s back (0.79-0.85 of the
# store's rate).  Strict xfails until a chain pooled its windows without a
# failure (one such window had ended it) and held its rate meanwhile.
@pytest.mark.parametrize(("loss", "seed", "heads"), [(0.0039, 0, 4), (0.0128, 28189, 1)])
def test_noise_keeps_capacity_where_it_missed_before(loss: float, seed: int, heads: int) -> None:
    check_noise_keeps_capacity(PaceCore, loss, seed, heads)


# 1 of the same 200 draws misses since (at 4.7 %, near NOISE_MARGIN, the
# windows the noise hides stop the growth at the undo's rate: 0.61 of the
# store's rate; 0.77 before they did, 1.0 before chains pooled).  Strict, so the day it holds the test
# says so.
@pytest.mark.xfail(strict=True, reason="NoiseKeepsCapacity misses in 1 of 200 drawn runs (docs/pace.md)")
def test_noise_keeps_capacity_where_it_misses() -> None:
    check_noise_keeps_capacity(PaceCore, 0.0465, 43239, 1)


# A client bound by its own concurrency (on Ceph RGW: a busy machine's
# engine) at a store failing a few percent of HEADs at random: before the
# rules above, 20 of 200 drawn runs sent under 90 % of their unpaced rate
# (0.40 the least); since, 5 of 200.
@settings(RUNS, max_examples=30)
@given(**DEMAND_RUNS)
def test_noise_keeps_demand(loss: float, seed: int, heads: int, in_flight: int, rtt_s: float) -> None:
    check_noise_keeps_demand(PaceCore, loss, seed, heads, in_flight, rtt_s)


@pytest.mark.parametrize(
    ("loss", "seed", "heads", "in_flight", "rtt_s"), [(0.0417, 39341, 4, 8, 0.0854), (0.0638, 51049, 2, 4, 0.0411)]
)
def test_noise_keeps_demand_where_it_missed_before(
    loss: float, seed: int, heads: int, in_flight: int, rtt_s: float
) -> None:
    check_noise_keeps_demand(PaceCore, loss, seed, heads, in_flight, rtt_s)


# Where it misses still (0.42 and 0.56): a cut of 30 % from unpaced on one
# or two failed queries, chained by the next windows' few failures.  Sized
# by the share that failed instead, these held, but six engines sharing a
# capped bucket, each seeing a few percent fail, then sent 0.8-0.9 of their
# unpaced throttled HEADs (tests/bench/test_fleet.py asks under 0.75).
# Strict, so the day they hold the test says so.
@pytest.mark.xfail(strict=True, reason="NoiseKeepsDemand misses where one failed query cuts 30 % (docs/pace.md)")
@pytest.mark.parametrize(
    ("loss", "seed", "heads", "in_flight", "rtt_s"), [(0.0303, 42645, 4, 4, 0.0485), (0.0149, 828, 2, 4, 0.0149)]
)
def test_noise_keeps_demand_where_it_misses(loss: float, seed: int, heads: int, in_flight: int, rtt_s: float) -> None:
    check_noise_keeps_demand(PaceCore, loss, seed, heads, in_flight, rtt_s)


# Before a chain of decreases begun unpaced was undone when its loss stayed,
# 26 of 300 such runs kept more than 5 points under unpaced; since, none of
# 700 (the widest gap 3.6 points).
@RUNS
@given(rate=st.floats(600.0, 1000.0), loss=st.floats(0.0, 0.10), seed=st.integers(0, 2**16))
def test_noise_at_capacity(rate: float, loss: float, seed: int) -> None:
    check_noise_at_capacity(PaceCore, rate, loss, seed)


# Before decreases were sized by the share that failed, 34 of 40 such runs
# (demand 1.02-1.10 times the cap, 10 seeds) served under 95 % of the cap.
@RUNS
@given(demand=st.floats(1.02, 1.10), seed=st.integers(0, 2**16))
def test_near_cap(demand: float, seed: int) -> None:
    check_near_cap(PaceCore, demand, seed)


# 3 of 200 further draws (the same sweep) serve 0.756-0.792 of the cap after
# 6 or 7 decreases.  Strict, as above.
@pytest.mark.xfail(strict=True, reason="NearCap misses in 5 of 200 drawn runs (docs/pace.md)")
@pytest.mark.parametrize(("demand", "seed"), [(1.049472443332768, 5302), (1.0391066547630412, 64646)])
def test_near_cap_where_it_misses(demand: float, seed: int) -> None:
    check_near_cap(PaceCore, demand, seed)


# An overrun shows in a few runs of a hundred (6 of 150 before LOAD_SHARE),
# so more of them; about 20 s.
@settings(settings.default, max_examples=80)
@given(n=st.integers(2, 6), cap=st.sampled_from([200.0, 400.0, 1000.0]), seed=st.integers(0, 2**16))
def test_fleet_within_cap(n: int, cap: float, seed: int) -> None:
    check_fleet_within_cap(PaceCore, n, cap, seed)


# Runs that missed FairShare's per-pace band or its total before: decreases
# sized by the share that failed, then noise forgotten once the windows
# since fail more than it beyond chance (each pace within the band now).
@pytest.mark.parametrize(("n", "cap", "seed"), [(6, 200.0, 7932), (3, 1000.0, 23770), (5, 200.0, 49906)])
def test_fair_share_where_it_missed_before(n: int, cap: float, seed: int) -> None:
    check_fair_share(PaceCore, n, cap, seed)


# Where it misses still (5 of 200 drawn fleets): 2827 sends 1.23 times the
# cap together; 25567 holds one pace at 0.31 of its share (small cuts each
# held for windows that last four times as long at its rate); 26462 lets
# one pace ratchet up to 2.04 on noise learnt at a lower rate.  Strict, so
# the day they hold the test says so.
@pytest.mark.xfail(strict=True, reason="FairShare's fleet band misses in 5 of 200 drawn fleets (docs/pace.md)")
@pytest.mark.parametrize(("n", "cap", "seed"), [(5, 400.0, 2827), (5, 1000.0, 25567), (6, 1000.0, 26462)])
def test_fair_share(n: int, cap: float, seed: int) -> None:
    check_fair_share(PaceCore, n, cap, seed)
