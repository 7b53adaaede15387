"""The benches' window growth options: the fleet simulation's chain modes and the RGW fleet's exact mode.

``bench.fleet --chain-growth G`` and ``bench.fleet.rgw --chain-window F
--chain-growth G`` hand a schedule to the walks they measure; what they
count from it (windows per request, rounds to decide) follows that schedule.
"""

from __future__ import annotations

import pytest
from test_fleet_rgw_figures import _outcome, _raw

from bench.fleet.__main__ import main as fleet_main
from bench.fleet.modes import Chain, make_mode
from bench.fleet.rgw import Setup
from bench.fleet.rgw_report import rounds, seed_figures
from kvprobe.statemachine import InvalidInputError, InvalidValueError


@pytest.mark.parametrize("name", ["chain", "inferred"])
def test_the_chain_modes_walk_with_the_growth_given(name: str) -> None:
    mode = make_mode(name, chain_growth=1.5)
    assert isinstance(mode, Chain) and mode.new_core(lambda: 0.0).chain_window_growth == 1.5
    default = make_mode(name)
    assert isinstance(default, Chain) and default.new_core(lambda: 0.0).chain_window_growth == 2.0


@pytest.mark.parametrize("name", ["chain", "cached", "inferred"])
def test_the_chain_modes_start_with_the_window_given(name: str) -> None:
    mode = make_mode(name, chain_window=4, chain_growth=1.25)
    assert isinstance(mode, Chain)
    core = mode.new_core(lambda: 0.0)
    assert (core.chain_window, core.chain_window_growth) == (4, 1.25)
    default = make_mode(name)
    assert isinstance(default, Chain) and default.new_core(lambda: 0.0).chain_window == 16
    with pytest.raises(InvalidValueError, match="chain_window must be at least 1"):
        make_mode(name, chain_window=0)


def test_a_scenario_hands_its_first_window_to_the_walk() -> None:
    from bench.fleet.sim import Scenario, _mode

    walk = _mode(Scenario(engines=1, mode="chain", chain_window=4, chain_growth=1.25))
    assert isinstance(walk, Chain) and (walk.first_window, walk.growth) == (4, 1.25)


def test_a_bad_growth_is_refused_for_every_mode() -> None:
    with pytest.raises(InvalidValueError, match="chain_window_growth"):
        make_mode("per-key", chain_growth=1.0)
    with pytest.raises(InvalidInputError, match="chain_window_growth"):
        make_mode("chain", chain_growth=True)
    with pytest.raises(SystemExit):
        fleet_main(["--chain-growth", "0.5", "--engines", "1"])


def test_rgw_rounds_follow_the_schedule() -> None:
    # First window 16, growth 1.5: windows end at 16, 40, 76 (the chain's 64 blocks end in the third).
    assert [rounds(s, 16, 1.5) for s in (0, 15, 16, 39, 40, 64)] == [1, 1, 2, 2, 3, 3]
    assert [rounds(s, 4, 2.0) for s in (0, 3, 4, 11, 12, 64)] == [1, 1, 2, 2, 3, 5]


def test_rgw_figures_count_windows_by_the_setup_schedule() -> None:
    outcomes = [_outcome(20, 20), _outcome(50, 50, decided=False)]
    doubling = seed_figures(_raw(outcomes, heads=120, throttled=0), Setup(chain_window=16, chain_growth=2.0))
    grown = seed_figures(_raw(outcomes, heads=120, throttled=0), Setup(chain_window=16, chain_growth=1.5))
    assert doubling["windows_per_request"] == (48 + 64) / 2  # window ends 48 and 112 (the chain's end: 64)
    assert grown["windows_per_request"] == (40 + 64) / 2  # window ends 40 and 76
    assert doubling["undecided_by_rounds"] == {"2": [0, 1], "3": [1, 1]}
    assert grown["undecided_by_rounds"] == {"2": [0, 1], "3": [1, 1]}


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"chain_growth": 1.0}, "chain_window_growth"),
        ({"chain_growth": float("nan")}, "chain_window_growth"),
        ({"chain_window": 0}, "chain_window"),
    ],
)
def test_rgw_setup_refuses_a_schedule_the_manager_would(options: dict[str, float], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Setup(**options)  # type: ignore[arg-type]
