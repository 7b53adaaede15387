"""bench.fleet.rgw_report's arithmetic on made-up outcomes (no store): each figure counts what it says."""

from __future__ import annotations

from typing import Any

import pytest

from bench.fleet.rgw import Setup, engine_plans, main as fleet_rgw_main, measure, stored_prefixes
from bench.fleet.rgw_report import comparison, mode_tables, rounds, schedule_label, seed_figures, tables, targets


def _outcome(stored: int, hits: int, decided: bool = True, after: float = 1.0, inferred: int = 0) -> dict[str, Any]:
    return {"stored": stored, "leading_hits": hits, "decided": decided, "settled_after_s": after, "progress": []} | {
        "inferred": inferred
    }


def _raw(outcomes: list[dict[str, Any]], heads: int, throttled: int, exits: tuple[int, ...] = (0,)) -> dict[str, Any]:
    stats = {"shed": 2, "keys": 7 * len(outcomes)}
    result = {"outcomes": outcomes, "stats": stats, "pacing": {"rate": None, "decreases": 1, "undone": 0}}
    result["pace"] = [[0.0, None], [1.0, 80.0], [2.0, 35.5]]
    engines = [{"exit": x, "stderr_lines": 11 * i, "result": result if i == 0 else None} for i, x in enumerate(exits)]
    proxy = {"heads": heads, "done": {"rate_limited": throttled}, "head_burst": 40.0}
    return {"seed": 1, "requests": len(outcomes), "proxy": proxy, "engines": engines}


def test_found_wrong_late_and_the_head_ratio_count_what_they_say() -> None:
    outcomes = [
        _outcome(10, 10),  # found: ideal 11 HEADs
        _outcome(64, 64),  # found, whole chain stored: ideal 64 (no miss to find)
        _outcome(20, 16, decided=False, after=5.0),  # undecided at its deadline: not found
        _outcome(5, 3),  # decided short (a stored block answered MISS): not found, not wrong
        _outcome(0, 2, after=6.5),  # an absent block answered True, and settled late
        _outcome(30, 30, after=5.5, inferred=25),  # found, 25 keys inferred, decided after its deadline (not late)
    ]
    wide = Setup(chain_window=16, chain_growth=2.0)  # windows end at 16, 48, 112: the rounds counted below
    f = seed_figures(_raw(outcomes, heads=270, throttled=54, exits=(0, -6)), wide)
    ideal = 11 + 64 + 21 + 6 + 1 + 31
    assert f["found"] == pytest.approx(3 / 6) and f["decided"] == pytest.approx(5 / 6)
    assert f["wrong"] == 1 and f["late"] == 1 and f["slowest_s"] == 6.5
    assert f["decided_after_deadline"] == 2  # settled 6.5 and 5.5 s after arriving, both decided
    assert f["head_ratio"] == pytest.approx(270 / ideal) and f["ideal_per_request"] == pytest.approx(ideal / 6)
    assert f["throttled"] == pytest.approx(0.2) and f["answered_per_request"] == pytest.approx(216 / 6)
    assert f["probes_per_request"] == 7 and f["inferred_per_request"] == pytest.approx(25 / 6)
    assert f["chain_mode"] == "exact"  # a raw outcome from before the modes
    assert f["bad_exits"] == 1 and f["loudest"] == 11 and f["shed"] == 2 and f["lowest_pace"] == 35.5
    assert f["undecided_by_rounds"] == {"1": [0, 3], "2": [1, 2], "3": [0, 1]}
    met = {name: ok for name, _, _, ok in targets([f])}
    assert not any(met.values())  # every target is missed by this seed, each for its own reason
    assert set(tables([f], f)) == {"targets", "seeds", "control"}


def test_a_seed_meeting_every_target_is_shown_as_met() -> None:
    f = seed_figures(_raw([_outcome(10, 10), _outcome(40, 40)], heads=60, throttled=0), Setup())
    assert all(ok for *_, ok in targets([f]))


def test_windows_and_plans() -> None:
    assert [rounds(s) for s in (0, 15, 16, 47, 48, 64)] == [1, 1, 2, 2, 3, 3]
    stored = stored_prefixes(160)
    assert stored == stored_prefixes(160) and min(stored) >= 0 and max(stored) <= 64
    plans = engine_plans(Setup(), 1, stored)
    dealt = [p for plan in plans for _, p, _ in plan]
    assert len(plans) == 4 and len(dealt) == len(set(dealt)) > 0  # no prompt twice in a run
    assert all(s == stored[p] for plan in plans for _, p, s in plan)
    assert engine_plans(Setup(), 1, stored) == plans and engine_plans(Setup(), 2, stored) != plans
    with pytest.raises(ValueError, match="too small"):
        engine_plans(Setup(), 1, stored[:10])
    with pytest.raises(ValueError, match="engines"):
        Setup(engines=0)
    with pytest.raises(ValueError, match="head_rate"):
        Setup(head_rate=0.0)


def test_the_modes_are_shown_apart_and_side_by_side() -> None:
    missed = seed_figures(_raw([_outcome(10, 4, decided=False)], heads=100, throttled=40), Setup())
    met = seed_figures(
        {**_raw([_outcome(10, 10, inferred=6)], heads=5, throttled=0), "chain_mode": "inferred"}, Setup()
    )
    assert met["chain_mode"] == "inferred" and met["inferred_per_request"] == 6
    side = comparison({"exact": [missed], "inferred": [met]})
    assert side["columns"][2:] == [
        "exact: median [min\u2013max]", "exact: met by every seed",
        "inferred: median [min\u2013max]", "inferred: met by every seed",
    ]  # fmt: skip
    rows = {row[0]: row for row in side["rows"]}
    assert rows["stored prefixes found"][2:] == [
        "0.0 % [0.0 %\u20130.0 %]",
        "no",
        "100.0 % [100.0 %\u2013100.0 %]",
        "yes",
    ]
    assert rows["HEADs per request (at the proxy)"][2:] == ["100.0 [100.0\u2013100.0]", "", "5.0 [5.0\u20135.0]", ""]
    assert rows["HEADs throttled"][2] == "40.0 % [40.0 %\u201340.0 %]"
    assert len(side["rows"]) == len(targets([met])) + 6
    # Exact mode's tables keep their ids (docs quote them); another mode's are suffixed; one mode has no comparison.
    both = mode_tables({"exact": [missed], "inferred": [met]}, {"inferred": met})
    assert set(both) == {"modes", "targets", "seeds", "targets_inferred", "seeds_inferred", "control_inferred"}
    assert both["targets"] == tables([missed])["targets"]
    assert set(mode_tables({"inferred": [met]})) == {"targets_inferred", "seeds_inferred"}
    with pytest.raises(ValueError, match="'inferred' has no figures"):
        comparison({"exact": [missed], "inferred": []})
    with pytest.raises(ValueError, match="chain_modes must be some of"):
        measure(Setup(), [1], chain_modes=["fast"])  # refused before any store is started
    with pytest.raises(ValueError, match="chain_modes must be some of"):
        measure(Setup(), [1], chain_modes=[])


def test_other_window_schedules_are_named_and_refused_as_the_manager_would() -> None:
    assert (Setup().chain_window, Setup().chain_growth, Setup().pace_scope) == (4, 1.25, "host")  # the tier's
    small = Setup(chain_window=1, chain_growth=1.25, pace_scope="process")
    f = seed_figures(_raw([_outcome(10, 10)], heads=12, throttled=0), small)
    assert f["schedule"] == [1, 1.25, "process"]
    host = Setup(chain_window=16, chain_growth=2.0, pace_scope="host")
    assert seed_figures(_raw([_outcome(10, 10)], 12, 0), host)["schedule"] == [16, 2, "host"]
    # Two engines each reporting a decrease: two paces' decreases, or the host's one pace's, counted once.
    two = _raw([_outcome(10, 10)], 12, 0, exits=(0, 0))
    two["engines"][1]["result"] = two["engines"][0]["result"]
    alone = Setup(pace_scope="process")
    assert seed_figures(two, alone)["decreases"] == 2 and seed_figures(two, host)["decreases"] == 1
    # The windows a schedule sends: 1, 2, 2, 2, 3, 4 keys end at 14 > 10, where windows of 16 send 16.
    assert f["windows_per_request"] == 14 and rounds(10, 1, 1.25) == 6
    side = comparison({schedule_label(16, 2, "host"): [f], schedule_label(1, 1.25, "process"): [f]})
    assert side["columns"][2:4] == [
        "windows 16, \u00d72, host pace: median [min\u2013max]",
        "windows 16, \u00d72, host pace: met by every seed",
    ]
    assert side["columns"][4] == "windows 1, \u00d71.25, process pace: median [min\u2013max]"
    assert schedule_label(4, 1.25, "host") == "windows 4, \u00d71.25, host pace"
    with pytest.raises(ValueError, match="chain_window must be at least 1"):
        measure(Setup(), [1], schedules=[(0, 2.0, "process")])  # refused before any store is started
    with pytest.raises(ValueError, match="chain_window_growth"):
        measure(Setup(), [1], schedules=[(4, 1.0, "process")])
    with pytest.raises(ValueError, match="pace_scope must be one of"):
        measure(Setup(), [1], schedules=[(4, 2.0, "cluster")])


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--schedules", "1"], "a schedule is WINDOW:GROWTH"),
        (["--schedules", "one:2"], "a schedule is WINDOW:GROWTH"),
        (["--schedules", "4:1.25"], "is the engines' own"),
        (
            ["--schedules", "16:2:process", "--chain-window", "16", "--chain-growth", "2", "--pace-scope", "process"],
            "is the engines' own",
        ),
        (["--schedules", "4:2:cluster"], "a schedule is WINDOW:GROWTH[:process|host]"),
        (["--schedules", "0:2"], "chain_window must be at least 1"),
        (["--schedules", "1:2", "--chain-modes", "inferred"], "--chain-modes must include exact"),
    ],
)
def test_bad_schedules_are_refused_by_the_command_line(
    argv: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        fleet_rgw_main(argv)
    assert exited.value.code == 2 and says in capsys.readouterr().err
