"""The pace's named properties hold for ``PaceCore`` over runs Hypothesis draws (bounds: pace_properties.py)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st
from pace_properties import check_fair_share, check_noise_keeps_capacity, check_recovery_within_bound

from kvprobe.backends._pace_core import PaceCore

# Whole runs of tens of virtual seconds: fewer examples than the profile's.
RUNS = settings(settings.default, max_examples=12)


@RUNS
@given(target=st.floats(20.0, 5500.0), heads=st.sampled_from([1, 4, 16]))
def test_recovery_within_bound(target: float, heads: int) -> None:
    check_recovery_within_bound(PaceCore, target, heads)


@RUNS
@given(loss=st.floats(0.0, 0.20), seed=st.integers(0, 2**16), heads=st.sampled_from([1, 4]))
def test_noise_keeps_capacity(loss: float, seed: int, heads: int) -> None:
    check_noise_keeps_capacity(PaceCore, loss, seed, heads)


# Long: 30+ s of whole runs for a property known not to hold yet (strict
# xfail); `make test-long` still fails the day it starts to hold unflagged.
@pytest.mark.long
@pytest.mark.xfail(
    strict=True,
    reason="FairShare does not hold yet: paces sharing a capped bucket read the others' 503s as noise or as "
    "a decrease that did not help (n=5, cap 400, seed 181: 6.4x the cap together; the pace before issue 39 "
    "broke it too: n=4, seed 181, 16.6x)",
)
@RUNS
@given(n=st.integers(2, 6), cap=st.sampled_from([200.0, 400.0, 1000.0]), seed=st.integers(0, 2**16))
def test_fair_share(n: int, cap: float, seed: int) -> None:
    check_fair_share(PaceCore, n, cap, seed)
