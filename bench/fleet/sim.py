"""The discrete-event loop: E engines and one S3 model on a virtual clock (no sleeping, no I/O).

Scaling.  Simulating 1,000 engines one HEAD at a time costs minutes per
virtual second in Python, so above ``max_sim_engines`` the run simulates
``S = max_sim_engines`` engines against a store whose per-partition limit
(and burst) is ``S / E`` of S3's: each simulated engine meets the share of
the store it would have among E engines.  Store figures (HEADs/s, peak per
partition, cost, PUTs/s) are scaled back by ``E / S``; fractions, HEADs and
PUTs per request and delays are read as simulated.  S engines' summed load
is burstier than E engines' (relative spread ~ 1/sqrt(engines)), which can
only add throttling.  ``tests/bench/test_fleet_scaling.py`` checks that a
scaled run agrees with the unscaled one at the same total load, and the
full report's scaling table shows it at 100 engines.
Virtual time is short (``warmup_s`` + ``window_s``): requests arriving in
the window are followed until answered (arrivals go on meanwhile), and the
store's load is measured over the window.  A mode with memory (``cached``:
a verdict cache) warms up at least its ``warmup_s`` (the hit TTL plus a
margin), whatever ``Scenario.warmup_s`` says: requests arriving during the
warm-up are served but not tracked, so the window sees the cache in steady
state.  The figures' ``warmup_s`` is the warm-up run; ``cache`` sums the
engines' verdict-memory counters over the window (None without memory) and
``cache_per_request`` divides them by the tracked requests.
"""

from __future__ import annotations

import dataclasses
import heapq
import itertools
import math
import random
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from bench.fleet.engine import Engine, Fleet
from bench.fleet.modes import LookupMode, make_mode
from bench.fleet.params import (
    HEAD_DOLLARS_PER_HOUR,
    PUT_PRICE_PER_1000,
    BackendParams,
    StoreParams,
    WorkloadParams,
)
from bench.fleet.store import S3Model
from bench.fleet.workload import Tier, Workload
from kvprobe.statemachine.verdict_cache import VerdictCache
from kvprobe.statemachine.windows import DEFAULT_CHAIN_WINDOW

__all__ = ["CACHE_COUNTERS", "Scenario", "run"]

#: The verdict-memory counters the figures report (``VerdictMemory``).
CACHE_COUNTERS = ("recalled", "remembered", "expired", "evicted", "forgotten")


@dataclass(frozen=True)
class Scenario:
    """One run: the fleet's size, the scheduler's mode, the backend's retries, the store's start."""

    engines: int
    mode: str = "per-key"
    #: How the report names the store's start (``new`` prefix, ``split`` prefix).
    store_label: str = "new"
    retry: bool = True
    partitions: int = 1
    seed: int = 1
    warmup_s: float = 5.0
    window_s: float = 20.0
    max_sim_engines: int = 100
    window0: int = 32
    #: How the ``chain`` modes' windows grow (``chain_window_growth``) and their first window (``chain_window``).
    chain_growth: float = 2.0
    chain_window: int = DEFAULT_CHAIN_WINDOW
    lazy: bool = True
    #: The ``cached`` mode's verdict cache (None: ``DEFAULT_VERDICT_CACHE``;
    #: the other modes ignore it).
    verdict_cache: VerdictCache | None = None
    #: The backend's pool serves concurrent groups in turn (False: FIFO).
    fair: bool = True
    #: Run on after the tracked requests are answered until nothing is left
    #: (every request cleaned up, every call finished): for the conservation tests.
    drain: bool = False
    store: StoreParams = field(default_factory=StoreParams)
    workload: WorkloadParams = field(default_factory=WorkloadParams)
    backend: BackendParams = field(default_factory=BackendParams)


def _percentile(values: list[int], q: float) -> float:
    if not values:
        return math.nan
    ordered = sorted(values)
    return float(ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))])


def run(sc: Scenario) -> dict[str, Any]:
    """Simulate ``sc``; return its figures (see the module docstring for what is scaled)."""
    if sc.engines < 1:
        raise ValueError(f"engines must be >= 1, got {sc.engines}")
    sim_engines = min(sc.engines, sc.max_sim_engines)
    scale = sc.engines / sim_engines
    store_params = dataclasses.replace(
        sc.store, partitions=sc.partitions, head_limit_per_s=sc.store.head_limit_per_s / scale
    )
    backend = sc.backend if sc.retry else dataclasses.replace(sc.backend, retry=None)
    rng = random.Random(sc.seed)
    warmup = max(sc.warmup_s, _mode(sc).warmup_s)
    track_from, track_to = warmup, warmup + sc.window_s
    store = S3Model(store_params, random.Random(rng.random()), track_from, track_to)
    tier = Tier()
    shared = Workload.shared_prefixes(sc.workload, tier, random.Random(rng.random()))

    events: list[tuple[float, int, Callable[..., None], tuple[Any, ...]]] = []
    seq = itertools.count()

    def schedule(at: float, callback: Callable[..., None], *args: Any) -> None:
        heapq.heappush(events, (at, next(seq), callback, args))

    fleet = Fleet(schedule, store, tier, track_from, track_to)
    engines = []
    for i in range(sim_engines):
        erng = random.Random(rng.random())
        workload = Workload(sc.workload, shared, tier, random.Random(erng.random()))
        mode = _mode(sc)
        engine = Engine(i, fleet, mode, workload, sc.workload, backend, erng, lazy=sc.lazy, fair=sc.fair)
        engines.append(engine)
        engine.start()

    # Evictions (none by default: drawn from their own generator, after
    # every other draw, so that runs without them are the runs they were).
    evictions_per_s = sc.workload.shared_evictions_per_h * len(shared) / 3600.0
    if evictions_per_s > 0:
        evicting = random.Random(rng.random())

        def evict(at: float) -> None:
            tier.evict_suffix(shared[evicting.randrange(len(shared))], evicting)
            schedule(at + evicting.expovariate(evictions_per_s), evict)

        schedule(evicting.expovariate(evictions_per_s), evict)

    # The engines' cache counters when the window opens and closes (the
    # close is read after the loop if the run stops first: nothing ran past
    # it).  Only with memory: other modes' runs keep their events unchanged.
    remembers = any(e.core.memory is not None for e in engines)
    marks: list[dict[str, int]] = []
    if remembers:
        schedule(track_from, lambda at: marks.append(_cache_counts(engines)))
        schedule(track_to, lambda at: marks.append(_cache_counts(engines)))
    started = time.perf_counter()
    handled = 0
    hard_stop = track_to + 120.0
    while events:
        at, _, callback, args = heapq.heappop(events)
        if at >= track_to and fleet.tracked_open == 0 and not sc.drain:
            break
        if at > hard_stop:
            if fleet.tracked_open:
                raise RuntimeError(f"{fleet.tracked_open} tracked requests still unanswered {hard_stop} s in")
            break
        fleet.now = at
        callback(at, *args)
        handled += 1
    store.finish()
    wall = time.perf_counter() - started
    while len(marks) < 2:
        marks.append(_cache_counts(engines))
    figures = _figures(sc, fleet, store, engines, sim_engines, scale, handled, wall)
    figures["warmup_s"] = warmup
    cache = {name: marks[1][name] - marks[0][name] for name in CACHE_COUNTERS} if remembers else None
    figures["cache"] = cache
    requests = figures["requests"]
    figures["cache_per_request"] = (
        None if cache is None else {name: value / requests if requests else math.nan for name, value in cache.items()}
    )
    return figures


def _mode(sc: Scenario) -> LookupMode:
    return make_mode(
        sc.mode,
        lazy=sc.lazy,
        window0=sc.window0,
        chain_growth=sc.chain_growth,
        chain_window=sc.chain_window,
        verdict_cache=sc.verdict_cache,
    )


def _cache_counts(engines: list[Engine]) -> dict[str, int]:
    """The engines' verdict-memory counters, summed (0 for engines without memory)."""
    memories = [e.core.memory for e in engines if e.core.memory is not None]
    return {name: sum(getattr(m, name) for m in memories) for name in CACHE_COUNTERS}


def _figures(
    sc: Scenario,
    fleet: Fleet,
    store: S3Model,
    engines: list[Engine],
    sim_engines: int,
    scale: float,
    handled: int,
    wall: float,
) -> dict[str, Any]:
    answered = fleet.answered
    delays = [r.answered_step - r.arrived_step for r in answered]
    stored = sum(r.prompt.stored for r in answered)
    hits = sum(r.leading_hits for r in answered)
    blocks = sum(len(r.prompt.keys) for r in answered)
    # The fewest HEADs that decide a request exactly: its stored prefix and the first block after it.
    ideal = sum(r.prompt.stored + (r.prompt.stored < len(r.prompt.keys)) for r in answered)
    billed = store.measured - store.measured_throttled
    per_engine_rate = len(answered) / sc.window_s / sim_engines
    puts_per_request = (blocks - hits) / len(answered) * sc.workload.puts_per_computed_block if answered else math.nan
    puts_per_s = puts_per_request * per_engine_rate * sc.engines
    heads_per_s = store.measured / sc.window_s * scale
    wrong = sum(r.leading_hits > r.prompt.stored for r in answered)
    return {
        "engines": sc.engines,
        "mode": sc.mode,
        "retry": sc.retry,
        "fair": sc.fair,
        "store": sc.store_label,
        "partitions_at_start": sc.partitions,
        "partitions_at_end": len(store.parts),
        "seed": sc.seed,
        "window_s": sc.window_s,
        "sim_engines": sim_engines,
        "store_scale": scale,
        "requests": len(answered),
        "heads_per_s": heads_per_s,
        "peak_per_partition_per_s": store.peak_per_partition * scale,
        "throttled_fraction": store.measured_throttled / store.measured if store.measured else 0.0,
        "heads_per_request": store.measured / len(answered) if answered else math.nan,
        "billed_heads_per_request": billed / len(answered) if answered else math.nan,
        "ideal_heads_per_request": ideal / len(answered) if answered else math.nan,
        "blocks_per_request": blocks / len(answered) if answered else math.nan,
        "requests_per_s_per_engine": per_engine_rate,
        "probes_per_request": statistics.fmean(r.probes for r in answered) if answered else math.nan,
        "cost_per_hour_usd": billed / sc.window_s * scale * HEAD_DOLLARS_PER_HOUR,
        "puts_per_request": puts_per_request,
        "puts_per_s": puts_per_s,
        "puts_per_partition_per_s": puts_per_s / len(store.parts),
        "put_cost_per_hour_usd": puts_per_s * 3600 * PUT_PRICE_PER_1000 / 1000,
        "delay_p50_steps": _percentile(delays, 0.50),
        "delay_p99_steps": _percentile(delays, 0.99),
        "tier_hit_rate": stored / blocks if blocks else math.nan,
        "stored_blocks_lost": 1 - hits / stored if stored else 0.0,
        "stored_found": hits / stored if stored else 1.0,
        "answers_above_truth": wrong,
        "stale_blocks_per_request": sum(r.stale for r in answered) / len(answered) if answered else math.nan,
        "stale_requests": sum(r.stale > 0 for r in answered) / len(answered) if answered else math.nan,
        "tier_evictions": fleet.tier.evictions,
        "tier_evicted_blocks": fleet.tier.evicted_blocks,
        "tier_rewritten_blocks": fleet.tier.rewritten_blocks,
        "backend": dict(sorted(fleet.counts.items())),
        "calls": fleet.calls,
        "keys_called": fleet.keys_called,
        "heads_sent": fleet.heads_sent,
        "store_arrivals": store.arrivals,
        "splits": len(store.splits),
        "hot_partitions": store.hot,
        "split_times_s": store.splits,
        "throttled_by_second": {sec: t / n for sec, (n, t) in sorted(store.series.items()) if n},
        "states_left": sum(len(e.core.states) for e in engines),
        "requests_waiting": sum(len(e.waiting) for e in engines),
        "engine_steps": sum(e.steps for e in engines),
        "events": handled,
        "wall_s": wall,
    }
