"""The fleet report: seeds folded into spreads, a new prefix followed in real time, the tables the docs quote."""

from __future__ import annotations

import json
import random
import re
import statistics
from typing import Any

import pytest

from bench.common import DOCS_DIR
from bench.fleet import realtime
from bench.fleet.modes import MODES, Cached, Chain, PerKey, Window, make_mode
from bench.fleet.params import HEAD_DOLLARS_PER_HOUR, StoreParams, WorkloadParams
from bench.fleet.report import tables
from bench.fleet.sim import Scenario, run
from bench.fleet.spread import FIGURES, SCENARIO_KEYS, cell, fold, percent
from bench.fleet.store import S3Model

FLEET_JSON = DOCS_DIR / "data" / "fleet.json"


def _fake(seed: int, **figures: float) -> dict[str, Any]:
    base: dict[str, Any] = {key: 0 for key in SCENARIO_KEYS} | {"mode": "per-key", "store": "new"}
    return base | {name: 0.0 for name in FIGURES} | {"seed": seed, "wall_s": 1.0} | figures


# --- folding seeds -------------------------------------------------------------------


def test_fold_keeps_each_seeds_figure_and_their_median() -> None:
    runs = [_fake(s, throttled_fraction=f) for s, f in ((1, 0.2), (2, 0.9), (3, 0.4))]
    row = fold(runs)
    assert row["seeds"] == [1, 2, 3] and row["by_seed"]["throttled_fraction"] == [0.2, 0.9, 0.4]
    assert row["throttled_fraction"] == 0.4 and row["wall_s"] == 3.0


def test_fold_refuses_no_runs_mixed_scenarios_and_a_seed_twice() -> None:
    with pytest.raises(ValueError, match="at least one run"):
        fold([])
    with pytest.raises(ValueError, match="mixes scenarios"):
        fold([_fake(1), _fake(2, engines=5)])
    with pytest.raises(ValueError, match="a seed twice"):
        fold([_fake(1), _fake(1)])


def test_a_cell_shows_the_median_and_the_range_of_its_values() -> None:
    assert cell(0.5, [0.25, 0.5, 0.75], percent) == "50.0% [25.0\u201375.0]"
    assert cell(0.5, [0.5], percent) == "50.0%" and cell(0.5, None, percent) == "50.0%"


# --- a new prefix in real time ---------------------------------------------------------


def _rounds(*found: float, hot_last: int = 0) -> list[dict[str, Any]]:
    out = [{"partitions_at_start": 2**i, "stored_found": f, "throttled_fraction": 0.0, "hot_partitions": 2**i}
           for i, f in enumerate(found)]  # fmt: skip
    out[-1]["hot_partitions"] = hot_last
    return out


def test_each_round_weighs_its_half_hour_and_the_settled_layout_lasts() -> None:
    rounds = _rounds(0.0, 0.2, 0.4, 1.0)  # settles after three rounds: 1.5 h
    assert realtime.found_in_first(rounds, 1.0, 0.5) == pytest.approx(0.1)
    assert realtime.found_in_first(rounds, 2.0, 0.5) == pytest.approx(0.4)
    assert realtime.found_in_first(rounds, 10.0, 0.5) == pytest.approx((0.0 + 0.1 + 0.2 + 8.5) / 10)
    s = realtime.summary(rounds, 0.5, 2.0)
    assert s["settled_h"] == 1.5 and s["found_before_settled"] == pytest.approx(0.2)
    assert s["found_settled"] == 1.0 and s["partitions"] == [1, 2, 4, 8]


def test_a_prefix_that_never_settles_has_no_settled_figures() -> None:
    s = realtime.summary(_rounds(0.0, 0.1, hot_last=2), 0.5, 2.0)
    assert s["settled_h"] is None and s["found_settled"] is None
    assert s["found_before_settled"] == pytest.approx(0.05)
    with pytest.raises(ValueError, match="positive hours"):
        realtime.found_in_first([], 1.0, 0.5)


def test_the_next_round_splits_the_hot_partitions_only() -> None:
    hot_by_layout = {1: 1, 2: 1, 3: 0}  # one of two partitions hot: three partitions next

    def runner(sc: Scenario) -> dict[str, Any]:
        return {"partitions_at_start": sc.partitions, "hot_partitions": hot_by_layout[sc.partitions]}

    rounds = realtime.follow(Scenario(engines=5), runner)
    assert [r["partitions_at_start"] for r in rounds] == [1, 2, 3]
    assert len(realtime.follow(Scenario(engines=5), lambda sc: {"hot_partitions": 1}, max_rounds=4)) == 4


def test_a_partition_throttled_through_the_window_is_hot_and_one_with_a_quiet_second_is_not() -> None:
    def store(gap_at: float | None) -> S3Model:
        model = S3Model(StoreParams(head_limit_per_s=100.0), random.Random(1), 2.0, 10.0)
        for i in range(2400):  # 200 HEADs a second for 12 s, at twice the limit, with an optional 2 s pause
            t = i / 200
            if gap_at is None or not gap_at <= t < gap_at + 2.0:
                model.head(0.5, t)
        model.finish()
        return model

    assert store(None).hot == 1
    assert store(5.0).hot == 0


def test_a_small_fleet_settles_after_its_rounds_and_finds_its_blocks_once_split() -> None:
    workload = WorkloadParams(max_blocks=600, serve_s=2.0, arrivals_per_s=2.0)
    base = Scenario(engines=8, warmup_s=1.0, window_s=3.0, workload=workload, store=StoreParams(head_limit_per_s=400.0))
    rounds = realtime.follow(base, run)
    s = realtime.summary(rounds, 0.5, 2.0)
    assert len(rounds) >= 3 and s["settled_h"] == 0.5 * (len(rounds) - 1)
    assert s["partitions"] == sorted(s["partitions"]) and s["partitions"][0] == 1
    assert rounds[0]["throttled_fraction"] > 0.5 and rounds[-1]["hot_partitions"] == 0
    assert s["found_before_settled"] < 0.6 < s["found_settled"]


# --- the modes as strategies ---------------------------------------------------------


def test_modes_are_made_by_name_and_bad_names_are_refused() -> None:
    assert {name: type(make_mode(name)) for name in MODES} == {
        "per-key": PerKey,
        "chain": Chain,
        "window": Window,
        "inferred": Chain,
        "cached": Cached,
    }
    assert {name: make_mode(name).name for name in MODES} == {name: name for name in MODES}
    with pytest.raises(ValueError, match="mode must be one of"):
        make_mode("gallop")
    with pytest.raises(ValueError, match="window0 must be >= 1"):
        make_mode("window", window0=0)
    with pytest.raises(ValueError, match="mode must be one of"):
        run(Scenario(engines=1, mode="gallop"))


def test_a_mode_registered_from_outside_drives_the_engines(monkeypatch: pytest.MonkeyPatch) -> None:
    # How the library's own chain walks come in: a mode object, registered by name, nothing else changed.
    asked: list[str] = []

    class Counting(Chain):
        name = "counting"

        def ask(self, core: Any, req: Any) -> int | None:
            asked.append(req.ctx.req_id)
            return super().ask(core, req)

    monkeypatch.setitem(MODES, "counting", lambda lazy, window0: Counting())
    workload = WorkloadParams(max_blocks=200, arrivals_per_s=2.0, serve_s=1.0)
    options: dict[str, Any] = {"engines": 2, "warmup_s": 1.0, "window_s": 2.0, "workload": workload}
    counted, chain = run(Scenario(mode="counting", **options)), run(Scenario(mode="chain", **options))
    assert asked and counted["heads_sent"] == chain["heads_sent"] and counted["requests"] == chain["requests"]


# --- the data the docs quote ---------------------------------------------------------


def _docs_record() -> dict[str, Any]:
    record: dict[str, Any] = json.loads(FLEET_JSON.read_text())
    return record


def test_the_docs_tables_are_rebuilt_from_the_seeds_figures() -> None:
    record = _docs_record()
    assert record["tables"] == tables(record)
    for r in record["runs"]:
        assert len(r["seeds"]) >= 5
        for name in FIGURES:
            assert r[name] == pytest.approx(statistics.median(r["by_seed"][name])), (r["engines"], r["mode"], name)


def test_the_docs_cover_fleets_between_10_and_100_engines_and_each_realtime_row_has_every_seed() -> None:
    record = _docs_record()
    engines = {r["engines"] for r in record["runs"]}
    assert len({e for e in engines if 10 < e < 100}) >= 2, engines
    assert record["realtime"] and all(len(e["by_seed"]) == len(record["seeds"]) >= 5 for e in record["realtime"])


def test_fleet_md_states_the_cost_formula_with_the_simulators_constant() -> None:
    text = (DOCS_DIR / "fleet.md").read_text()
    formula = re.search(r"\$/h = engines \u00d7 requests/s \u00d7 HEADs/request \u00d7 ([\d.]+)", text)
    assert formula is not None and float(formula.group(1)) == pytest.approx(HEAD_DOLLARS_PER_HOUR)


def test_the_grid_has_distinct_scenarios_each_following_at_least_50_requests() -> None:
    from bench.fleet.__main__ import ENGINES, grid

    scenarios = grid(ENGINES, window_s=4.0, warmup_s=3.0, max_sim=25, seed=7)
    assert len(set(scenarios)) == len(scenarios) and {sc.seed for sc in scenarios} == {7}
    rate = WorkloadParams().arrivals_per_s
    assert all(sc.window_s * sc.engines * rate >= 50 for sc in scenarios)
