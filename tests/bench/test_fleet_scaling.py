"""The fleet simulator's scaling, its bill and its writes (``bench/fleet/sim.py``).

Above ``max_sim_engines`` a run simulates fewer engines against a store
scaled down to match.  Here a fleet of 16 engines, simulated whole, is
compared with the same fleet simulated by 4 engines, at three total loads
(a store limit far below S3's puts the loads where 16 engines reach them),
under five seeds.  The tolerance, on the medians over the seeds:

* throttled fraction and stored blocks found: within 0.10 and 0.15;
* HEADs per second (scaled back) and HEADs per request: within 20 %.

A negative control shows the tolerance can fail: 4 engines against the
unscaled store (a scaling that forgets the store) fall outside it.
"""

from __future__ import annotations

import statistics
from typing import Any

import pytest

from bench.fleet.params import HEAD_DOLLARS_PER_HOUR, PUT_PRICE_PER_1000, StoreParams, WorkloadParams
from bench.fleet.report import cost_by_formula
from bench.fleet.sim import Scenario, run

SEEDS = (1, 2, 3, 4, 5)
WORKLOAD = WorkloadParams(max_blocks=600, serve_s=2.0, arrivals_per_s=2.0)  # ~320 HEAD/s per per-key engine
ENGINES, SIMULATED = 16, 4
#: Store limits putting 16 per-key engines under the limit, 1.5x above it and 4x above it.
LIMITS = (10_000.0, 3_500.0, 1_300.0)
TOLERANCE = {"throttled_fraction": 0.10, "stored_found": 0.15}
RELATIVE = {"heads_per_s": 0.20, "heads_per_request": 0.20}


def _medians(limit: float, *, engines: int = ENGINES, sim: int = ENGINES) -> dict[str, float]:
    runs = [
        run(
            Scenario(
                engines=engines,
                max_sim_engines=sim,
                warmup_s=1.0,
                window_s=3.0,
                workload=WORKLOAD,
                store=StoreParams(head_limit_per_s=limit),
                seed=seed,
            )
        )
        for seed in SEEDS
    ]
    return {name: statistics.median(r[name] for r in runs) for name in (*TOLERANCE, *RELATIVE)}


def _disagreements(whole: dict[str, float], scaled: dict[str, float]) -> list[str]:
    out = [f"{k}: {whole[k]:.3f} vs {scaled[k]:.3f}" for k, tol in TOLERANCE.items() if abs(whole[k] - scaled[k]) > tol]
    out += [
        f"{k}: {whole[k]:.0f} vs {scaled[k]:.0f}" for k, tol in RELATIVE.items() if abs(scaled[k] / whole[k] - 1) > tol
    ]
    return out


@pytest.fixture(scope="module")
def whole() -> dict[float, dict[str, float]]:
    return {limit: _medians(limit) for limit in LIMITS}


@pytest.mark.parametrize("limit", LIMITS)
def test_a_scaled_run_agrees_with_the_whole_fleet_at_the_same_total_load(
    whole: dict[float, dict[str, float]], limit: float
) -> None:
    scaled = _medians(limit, sim=SIMULATED)
    assert _disagreements(whole[limit], scaled) == [], (whole[limit], scaled)


def test_the_loads_span_no_throttling_to_heavy_throttling(whole: dict[float, dict[str, float]]) -> None:
    throttled = [whole[limit]["throttled_fraction"] for limit in LIMITS]
    assert throttled[0] < 0.02 and 0.2 < throttled[1] < 0.6 and throttled[2] > 0.6, throttled


@pytest.mark.parametrize("limit", LIMITS[1:])
def test_a_scaling_that_forgets_the_store_falls_outside_the_tolerance(
    whole: dict[float, dict[str, float]], limit: float
) -> None:
    # 4 engines against the whole store, figures scaled back as if they were 16.
    forgot = _medians(limit, engines=SIMULATED, sim=SIMULATED)
    forgot["heads_per_s"] *= ENGINES / SIMULATED
    assert _disagreements(whole[limit], forgot) != []


def _one(**kw: Any) -> dict[str, Any]:
    options: dict[str, Any] = {"engines": 8, "warmup_s": 1.0, "window_s": 3.0, "workload": WORKLOAD, "seed": 3}
    return run(Scenario(**{**options, **kw}))


def test_the_cost_formula_constant_is_the_head_price_by_the_hour() -> None:
    assert HEAD_DOLLARS_PER_HOUR == pytest.approx(0.00144)


@pytest.mark.parametrize(
    ("limit", "sim"), [(1e9, 8), (1e9, 2), (1_000.0, 8), (1_000.0, 2)], ids=["idle", "idle-scaled", "hot", "hot-scaled"]
)
def test_the_simulated_bill_is_the_formula_over_billed_heads(limit: float, sim: int) -> None:
    r = _one(store=StoreParams(head_limit_per_s=limit), max_sim_engines=sim)
    # A 503 is not billed: billed HEADs are the received ones less the throttled ones.
    assert r["billed_heads_per_request"] == pytest.approx(r["heads_per_request"] * (1 - r["throttled_fraction"]))
    by_formula = cost_by_formula(r["engines"], r["requests_per_s_per_engine"], r["billed_heads_per_request"])
    assert r["cost_per_hour_usd"] == pytest.approx(by_formula, rel=1e-9)
    if limit < 1e6:
        assert r["throttled_fraction"] > 0.3 and r["cost_per_hour_usd"] < r["heads_per_s"] * HEAD_DOLLARS_PER_HOUR


def test_the_formula_at_the_nominal_request_rate_predicts_the_simulated_bill() -> None:
    # What an operator knows is the request rate it plans for, not the one a run drew.
    ratios = []
    for seed in SEEDS:
        r = _one(store=StoreParams(head_limit_per_s=1e9), window_s=6.0, seed=seed)
        predicted = cost_by_formula(r["engines"], WORKLOAD.arrivals_per_s, r["billed_heads_per_request"])
        ratios.append(predicted / r["cost_per_hour_usd"])
    assert abs(statistics.median(ratios) - 1) < 0.10, ratios


def test_every_computed_block_is_written_and_a_block_lost_to_throttling_is_written_again() -> None:
    calm = _one(store=StoreParams(head_limit_per_s=1e9))
    storm = _one(store=StoreParams(head_limit_per_s=1_000.0))
    for r in (calm, storm):
        hits = r["blocks_per_request"] * r["tier_hit_rate"] * r["stored_found"]
        assert r["puts_per_request"] == pytest.approx(r["blocks_per_request"] - hits)
        assert r["puts_per_s"] == pytest.approx(r["engines"] * r["requests_per_s_per_engine"] * r["puts_per_request"])
        assert r["put_cost_per_hour_usd"] == pytest.approx(r["puts_per_s"] * 3.6 * PUT_PRICE_PER_1000)
    assert calm["stored_found"] == 1.0 and storm["stored_found"] < 0.5
    # Same seed, same prompts: the storm's lost blocks are computed and written again.
    assert storm["puts_per_request"] > 1.2 * calm["puts_per_request"]


def test_puts_per_partition_divide_the_fleets_puts_among_the_partitions() -> None:
    one = _one(store=StoreParams(head_limit_per_s=1e9), partitions=1, max_sim_engines=2)
    eight = _one(store=StoreParams(head_limit_per_s=1e9), partitions=8, max_sim_engines=2)
    assert one["puts_per_s"] > 0 and one["puts_per_partition_per_s"] == pytest.approx(one["puts_per_s"])
    assert eight["puts_per_partition_per_s"] == pytest.approx(eight["puts_per_s"] / 8)
