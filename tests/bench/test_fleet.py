"""The fleet simulator (``bench.fleet``): its conservation laws, its store, its schedulers, its retries.

Small fleets on short virtual windows (the whole file runs in seconds).  A
store limit far below S3's puts a few engines above it, so throttling,
retries and their limits show up without simulating a thousand engines.
"""

from __future__ import annotations

import dataclasses
import random
from typing import Any

import pytest

from bench.fleet.params import BackendParams, StoreParams, WorkloadParams
from bench.fleet.sim import Scenario, run
from bench.fleet.store import S3Model, key_position

SMALL = WorkloadParams(max_blocks=600, serve_s=2.0)


def _run(**kw: Any) -> dict[str, Any]:
    options: dict[str, Any] = {
        "engines": 6,
        "warmup_s": 1.0,
        "window_s": 3.0,
        "workload": dataclasses.replace(SMALL, arrivals_per_s=2.0),
        "seed": 5,
    }
    options.update(kw)
    return run(Scenario(**options))


def _limit(per_s: float) -> StoreParams:
    return StoreParams(head_limit_per_s=per_s)


@pytest.mark.parametrize("mode", ["per-key", "chain", "window", "cached"])
@pytest.mark.parametrize("retry", [True, False])
def test_conservation_every_lookup_answered_every_head_counted_nothing_left(mode: str, retry: bool) -> None:
    r = _run(mode=mode, retry=retry, store=_limit(1000), drain=True)
    assert r["requests"] > 20
    assert r["throttled_fraction"] > 0.05, "the store limit should have throttled this fleet"
    backend = r["backend"]
    # Every call the flushes started finished with one verdict per key.
    assert backend["calls"] == r["calls"] and backend["keys"] == r["keys_called"]
    # Every HEAD the backends sent reached the store, and only those.
    assert r["heads_sent"] == r["store_arrivals"]
    # Every request was answered and cleaned up; the cores hold nothing.
    assert r["requests_waiting"] == 0 and r["states_left"] == 0
    # A verdict never claims more than the tier holds.
    assert r["answers_above_truth"] == 0


@pytest.mark.parametrize("mode", ["per-key", "chain", "window", "cached"])
def test_without_throttling_every_stored_block_is_found(mode: str) -> None:
    r = _run(mode=mode, store=_limit(1e9))
    assert r["throttled_fraction"] == 0.0
    assert r["stored_blocks_lost"] == 0.0 and r["stored_found"] == 1.0 and r["tier_hit_rate"] > 0.1


def test_store_throttles_only_above_the_partition_limit() -> None:
    params = StoreParams(head_limit_per_s=1000.0, burst_s=0.1)
    rng = random.Random(1)
    for rate, expect_throttling in ((800.0, False), (2000.0, True)):
        store = S3Model(params, random.Random(2), 0.0, 10.0)
        t = 0.0
        for _ in range(int(rate * 10)):
            t += rng.expovariate(rate) if rate < 1000 else 1 / rate
            store.head(rng.random(), t)
        store.finish()
        if expect_throttling:
            # Twice the limit: about half the HEADs are answered 503.
            assert 0.4 < store.measured_throttled / store.measured < 0.6
            assert store.peak_per_partition > params.head_limit_per_s
        else:
            assert store.measured_throttled == 0, rate


def test_an_idle_partition_absorbs_a_burst_of_its_bucket_depth_and_no_more() -> None:
    # 0.1 s of a 1,000/s limit: after any idle time, 100 HEADs at one instant pass, the rest are 503.
    store = S3Model(StoreParams(head_limit_per_s=1000.0, burst_s=0.1), random.Random(2), 0.0, 100.0)
    answers = [store.head(0.5, 30.0)[0] for _ in range(300)]
    assert answers.count(False) == 100 and answers[:100] == [False] * 100


def test_fleet_throttles_only_above_the_partition_limit() -> None:
    below = _run(store=_limit(200_000))
    above = _run(store=_limit(1_000))
    assert below["peak_per_partition_per_s"] < 200_000 and below["throttled_fraction"] == 0.0
    assert above["throttled_fraction"] > 0.3


def test_more_partitions_take_the_same_load_without_throttling() -> None:
    one = _run(store=_limit(1000), partitions=1)
    many = _run(store=_limit(1000), partitions=16)
    assert one["throttled_fraction"] > 0.05 and many["throttled_fraction"] == 0.0
    assert many["peak_per_partition_per_s"] < one["peak_per_partition_per_s"]


def test_sustained_throttling_splits_a_partition_and_a_quiet_one_never_splits() -> None:
    hot = S3Model(StoreParams(head_limit_per_s=1000.0, split_after_s=2.0), random.Random(1), 0.0, 100.0)
    quiet = S3Model(StoreParams(head_limit_per_s=1000.0, split_after_s=2.0), random.Random(1), 0.0, 100.0)
    rng = random.Random(3)
    for i in range(20_000):  # 4,000 HEADs/s for 5 s, and 500/s for 40 s
        hot.head(rng.random(), i / 4000)
        quiet.head(rng.random(), i / 500)
    assert len(hot.splits) >= 1 and all(t >= 2.0 for t in hot.splits)
    assert quiet.splits == [] and len(quiet.parts) == 1


def test_key_position_orders_keys_as_the_store_does() -> None:
    assert key_position(b"\x00" * 8) == 0.0
    assert key_position(b"\x80" + b"\x00" * 7) == 0.5
    assert key_position(b"\x01") < key_position(b"\x02") < 1.0


def test_lookup_chain_issues_no_more_heads_than_per_key_lookups() -> None:
    # A workload where chains meet known misses: one shared prefix, half stored,
    # asked by every request on every engine.
    shared = dataclasses.replace(
        SMALL,
        arrivals_per_s=4.0,
        shared_fraction=1.0,
        shared_prefixes=1,
        shared_len=(400, 400),
        shared_stored=(0.5, 0.5),
    )
    for workload, strictly in ((dataclasses.replace(SMALL, arrivals_per_s=2.0), False), (shared, True)):
        per_key = _run(mode="per-key", workload=workload, store=_limit(1e9))
        chain = _run(mode="chain", workload=workload, store=_limit(1e9))
        assert chain["requests"] == per_key["requests"]
        assert chain["heads_sent"] <= per_key["heads_sent"]
        if strictly:
            assert chain["heads_sent"] < 0.8 * per_key["heads_sent"], (chain["heads_sent"], per_key["heads_sent"])
        # Both find every stored block (no throttling here).
        assert chain["stored_blocks_lost"] == per_key["stored_blocks_lost"] == 0.0


def test_chain_mode_walks_in_the_managers_windows() -> None:
    # The manager's lookup_chain probes in windows (16, 32, ...), so on the
    # default workload, where most of a prompt is not stored, it sends far
    # fewer HEADs than a lookup per block; a core walking the whole chain
    # at once (the bare core's default) sent as many.
    workload = dataclasses.replace(SMALL, arrivals_per_s=2.0)
    per_key = _run(mode="per-key", workload=workload, store=_limit(1e9))
    chain = _run(mode="chain", workload=workload, store=_limit(1e9))
    assert chain["requests"] == per_key["requests"]
    assert chain["stored_blocks_lost"] == per_key["stored_blocks_lost"] == 0.0
    assert chain["heads_sent"] < 0.85 * per_key["heads_sent"], (chain["heads_sent"], per_key["heads_sent"])
    assert chain["heads_per_request"] <= 1.3 * chain["ideal_heads_per_request"]


@pytest.mark.parametrize("mode", ["per-key", "chain"])
def test_the_backends_pace_sends_fewer_throttled_heads_and_loses_no_answer(mode: str) -> None:
    # Mild overload (the store's limit below the fleet's demand): the pace
    # (backends/_pacing.PaceCore on the virtual clock) sends fewer HEADs
    # into a throttled store and never makes a verdict wrong.
    store = _limit(2000 if mode == "per-key" else 1000)
    unpaced = _run(mode=mode, store=store)
    paced = _run(mode=mode, store=store, backend=BackendParams(paced=True))
    assert paced["requests"] == unpaced["requests"]
    assert paced["answers_above_truth"] == unpaced["answers_above_truth"] == 0
    assert unpaced["throttled_fraction"] > 0.2
    assert paced["throttled_fraction"] < 0.75 * unpaced["throttled_fraction"]
    assert paced["heads_per_request"] < unpaced["heads_per_request"]
    assert paced["stored_found"] >= unpaced["stored_found"]


def test_the_inferred_walk_sends_a_few_heads_per_request_and_finds_the_stored_prefixes() -> None:
    # chain_mode="inferred": O(log n) HEADs per request, far below the exact
    # ideal (hits plus the first miss), so a store the exact walk overloads
    # stays below its limit.
    workload = dataclasses.replace(SMALL, arrivals_per_s=2.0)
    for store in (_limit(1e9), _limit(800)):
        exact = _run(mode="chain", workload=workload, store=store, backend=BackendParams(paced=True))
        inferred = _run(mode="inferred", workload=workload, store=store, backend=BackendParams(paced=True))
        assert inferred["requests"] == exact["requests"]
        assert inferred["answers_above_truth"] == 0  # this workload's tier is prefix-closed
        assert inferred["heads_per_request"] < 0.2 * inferred["ideal_heads_per_request"], inferred["heads_per_request"]
        assert inferred["throttled_fraction"] == 0.0 and inferred["stored_found"] == 1.0
    assert exact["throttled_fraction"] > 0.1 and exact["stored_found"] < 1.0  # the exact walk under the 800/s limit


def test_retries_turn_throttled_heads_into_hits_when_the_deadline_allows() -> None:
    # Mild overload: some HEADs are throttled, backoff finds room before the 5 s deadline.
    with_retry = _run(retry=True, store=_limit(2000))
    without = _run(retry=False, store=_limit(2000))
    assert with_retry["backend"]["failed_throttled"] > 0 and with_retry["backend"]["retried_keys"] > 0
    assert without["backend"].get("retried_keys", 0) == 0
    assert without["stored_blocks_lost"] > 0.05
    assert with_retry["stored_blocks_lost"] <= 0.01 < without["stored_blocks_lost"]
    # With no time left for a retry the same overload loses blocks even with retries.
    short = _run(retry=True, store=_limit(2000), backend=BackendParams(deadline_s=0.05))
    assert short["stored_blocks_lost"] > with_retry["stored_blocks_lost"]


def test_a_fair_pool_answers_short_prompts_sooner_than_a_fifo_one() -> None:
    # Long prompts, no throttling: with the pool first come first served a
    # short prompt waits behind every chunk of the long ones before it.
    workload = WorkloadParams(arrivals_per_s=1.0, serve_s=2.0)
    fair = _run(engines=4, window_s=6.0, workload=workload, store=_limit(1e9), fair=True)
    fifo = _run(engines=4, window_s=6.0, workload=workload, store=_limit(1e9), fair=False)
    assert fair["requests"] == fifo["requests"] > 20
    # About the same HEADs in another order (answer times move cleanups, so probes are reused a little differently).
    assert abs(fair["heads_sent"] - fifo["heads_sent"]) <= 0.02 * fifo["heads_sent"]
    assert fair["delay_p50_steps"] < 0.5 * fifo["delay_p50_steps"], (fair["delay_p50_steps"], fifo["delay_p50_steps"])


def test_deterministic_under_a_seed() -> None:
    def figures(r: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in r.items() if k != "wall_s"}

    a = _run(store=_limit(1000), seed=11)
    b = _run(store=_limit(1000), seed=11)
    c = _run(store=_limit(1000), seed=12)
    assert figures(a) == figures(b)
    assert figures(a) != figures(c)


@pytest.mark.parametrize("mode", ["per-key", "chain", "window"])
def test_lazy_asking_is_exact(mode: str) -> None:
    # Re-asking through the core at every step gives the same run as reading
    # the states the core listed (the core's "asking again changes nothing").
    keep = ("heads_sent", "requests", "delay_p50_steps", "delay_p99_steps", "stored_blocks_lost", "backend")
    lazy = _run(mode=mode, store=_limit(1000), lazy=True)
    eager = _run(mode=mode, store=_limit(1000), lazy=False)
    assert {k: lazy[k] for k in keep} == {k: eager[k] for k in keep}


def test_window_sends_fewer_heads_than_per_key_and_finds_the_same_hits() -> None:
    # Growing windows stop at a prompt's first unstored block instead of probing all of it.
    per_key = _run(mode="per-key", store=_limit(1e9))
    window = _run(mode="window", store=_limit(1e9))
    assert window["requests"] == per_key["requests"]
    assert window["stored_blocks_lost"] == per_key["stored_blocks_lost"] == 0.0
    assert window["heads_sent"] < 0.9 * per_key["heads_sent"], (window["heads_sent"], per_key["heads_sent"])


def test_a_new_prefix_under_overload_splits_until_throttling_stops() -> None:
    from bench.fleet.__main__ import split_dynamics

    d = split_dynamics(100, max_sim=10, seed=1, window_s=20.0)
    by_second = d["throttled_by_second"]
    assert by_second[1] > 0.3, by_second  # a new prefix under 100 engines: throttled at once
    assert d["partitions_at_end"] >= 4 and d["splits"] == d["partitions_at_end"] - 1
    # Throttling stopped (under 2 % a second) and stayed stopped for the run's last seconds.
    assert max(by_second) - d["settled_s"] >= 3, by_second
    assert all(f < 0.02 for s, f in by_second.items() if s >= d["settled_s"])
