"""The fleet simulator's ``cached`` mode: kvprobe's verdict cache on each engine's core, on the virtual clock.

Small fleets on short windows, a short hit TTL so the warm-up it asks for
stays short (each test runs in a second or two).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

import bench.fleet.sim as sim
import bench.fleet.targets as targets
from bench.fleet.__main__ import main as fleet_main
from bench.fleet.engine import Fleet
from bench.fleet.modes import CACHE_WARMUP_MARGIN_S, DEFAULT_VERDICT_CACHE, Cached, make_mode
from bench.fleet.params import BackendParams, StoreParams, WorkloadParams
from bench.fleet.sim import CACHE_COUNTERS, Scenario, run
from kvprobe.statemachine.types import InvalidInputError
from kvprobe.statemachine.verdict_cache import VerdictCache, VerdictMemory

#: Few prefixes, returning often: an engine meets each again within the TTL.
WORKLOAD = WorkloadParams(max_blocks=600, serve_s=2.0, arrivals_per_s=2.0, shared_prefixes=4)
TTL = VerdictCache(max_entries=50_000, hit_ttl_s=5.0)


def _run(mode: str, **kw: Any) -> dict[str, Any]:
    options: dict[str, Any] = {
        "engines": 10,
        "warmup_s": 1.0,
        "window_s": 4.0,
        "workload": WORKLOAD,
        "seed": 3,
        "verdict_cache": TTL,
        "store": StoreParams(head_limit_per_s=1e9),
    }
    options.update(kw)
    return run(Scenario(mode=mode, **options))


def test_the_cached_mode_recalls_verdicts_and_sends_fewer_heads_than_the_chain_it_walks() -> None:
    chain, cached = _run("chain"), _run("cached")
    assert chain["cache"] is None and chain["cache_per_request"] is None
    assert cached["cache"]["recalled"] > 0 and cached["cache"]["remembered"] > 0
    assert cached["heads_per_request"] < 0.8 * chain["heads_per_request"]
    # Nothing is evicted from the sim's tier: a remembered "stored" is true, every stored block found.
    assert cached["answers_above_truth"] == 0 and cached["stored_found"] == 1.0
    per_request = cached["cache_per_request"]
    assert set(per_request) == set(CACHE_COUNTERS)
    assert per_request["recalled"] == pytest.approx(cached["cache"]["recalled"] / cached["requests"])


def test_under_throttling_the_cache_answers_nothing_above_the_truth() -> None:
    r = _run("cached", store=StoreParams(head_limit_per_s=2000), backend=BackendParams(paced=False))
    assert r["throttled_fraction"] > 0.2 and r["cache"]["recalled"] > 0 and r["answers_above_truth"] == 0


def test_each_engine_core_holds_its_own_memory_on_the_virtual_clock() -> None:
    now = [0.0]
    mode = make_mode("cached", verdict_cache=TTL)
    core, other = mode.new_core(lambda: now[0]), mode.new_core(lambda: now[0])
    assert isinstance(core.memory, VerdictMemory) and core.memory is not other.memory
    assert core.memory.config == TTL and core.chain_window == 16 and core.chain_window_growth == 2.0
    core.memory.remember(b"k" * 8, 0, True)
    now[0] = 4.9
    assert core.memory.recall(b"k" * 8) is True
    now[0] = 5.0
    assert core.memory.recall(b"k" * 8) is None and core.memory.expired == 1


def test_the_default_cache_remembers_hits_for_a_minute_and_misses_never() -> None:
    mode = make_mode("cached")
    assert isinstance(mode, Cached) and mode.cache == DEFAULT_VERDICT_CACHE
    assert (DEFAULT_VERDICT_CACHE.hit_ttl_s, DEFAULT_VERDICT_CACHE.miss_ttl_s) == (60.0, 0.0)
    # The figure the TTL is chosen by: one request per shared prefix per engine every 64 s.
    w = WorkloadParams()
    assert w.shared_prefixes / (w.arrivals_per_s * w.shared_fraction) == 64.0
    assert make_mode("chain", verdict_cache=TTL).new_core(lambda: 0.0).memory is None
    with pytest.raises(InvalidInputError, match="verdict_cache must be a VerdictCache"):
        make_mode("cached", verdict_cache=60.0)  # type: ignore[arg-type]


def test_a_mode_with_memory_warms_up_past_its_ttl_before_the_tracked_window(monkeypatch: pytest.MonkeyPatch) -> None:
    fleets: list[Fleet] = []

    class Recorded(Fleet):
        def __init__(self, *args: Any) -> None:
            super().__init__(*args)
            fleets.append(self)

    monkeypatch.setattr(sim, "Fleet", Recorded)
    assert make_mode("cached", verdict_cache=TTL).warmup_s == 5.0 + CACHE_WARMUP_MARGIN_S
    cached = _run("cached")
    assert cached["warmup_s"] == 5.0 + CACHE_WARMUP_MARGIN_S
    assert (fleets[-1].track_from, fleets[-1].track_to) == (10.0, 14.0)
    # Requests that arrived during the warm-up were served but are not tracked.
    assert all(r.tracked and r.arrived_step * WORKLOAD.step_s >= 10.0 - WORKLOAD.step_s for r in fleets[-1].answered)
    assert _run("cached", warmup_s=12.0)["warmup_s"] == 12.0  # a longer warm-up given is kept
    assert _run("chain")["warmup_s"] == 1.0 and fleets[-1].track_from == 1.0  # no memory: as given


def test_the_fleet_cli_refuses_a_bad_verdict_cache_by_name(capsys: pytest.CaptureFixture[str]) -> None:
    bad = [
        (["--verdict-cache", "-1", "--modes", "cached"], "--verdict-cache: hit_ttl_s must be 0 or more"),
        (["--verdict-cache", "0", "--modes", "cached"], "--verdict-cache: hit_ttl_s and miss_ttl_s are both 0"),
        (["--verdict-cache", "inf", "--modes", "cached"], "--verdict-cache: hit_ttl_s must be 0 or more and finite"),
        (["--verdict-cache", "30"], "add cached to --modes or --realtime-modes"),
        (["--verdict-cache", "soon", "--modes", "cached"], "argument --verdict-cache: invalid float value"),
        (["--modes", "gallop"], "argument --modes: invalid choice"),
    ]
    for argv, message in bad:
        with pytest.raises(SystemExit) as exit_:
            fleet_main([*argv, "--engines", "1"])
        assert exit_.value.code == 2 and message in capsys.readouterr().err


def test_the_default_fleet_run_keeps_its_modes_and_the_cli_can_add_cached() -> None:
    from bench.fleet.__main__ import DEFAULT_MODES, grid

    default = grid([100], window_s=4.0, warmup_s=3.0, max_sim=25, seed=1)
    assert {sc.mode for sc in default} == set(DEFAULT_MODES) == {"per-key", "chain", "window", "inferred"}
    cache = dataclasses.replace(TTL, hit_ttl_s=30.0)
    added = grid([100], window_s=4.0, warmup_s=3.0, max_sim=25, seed=1, modes=["chain", "cached"], cache=cache)
    assert {sc.mode for sc in added} == {"chain", "cached", "per-key"}  # per-key: the fifo pool's row
    assert all(sc.verdict_cache == cache for sc in added)


def test_targets_quick_writes_its_table_and_figures(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # The quick run, smaller still: 10 engines, one seed, the exact walk and the cached one.
    monkeypatch.setattr(targets, "QUICK_ENGINES", 10)
    monkeypatch.setattr(targets, "CONFIGS", (targets.Config("chain g=2", "chain"), targets.Config("cached", "cached")))
    path = tmp_path / "targets.json"
    assert targets.main(["--quick", "--seeds", "1", "--json", str(path)]) == 0
    record = json.loads(path.read_text())
    for key in ("title", "date", "machine", "command", "source", "wall_s", "seeds", "configurations", "tables"):
        assert key in record, key
    assert {"cpu", "cores", "python", "build", "load"} <= set(record["machine"])
    assert record["seeds"] == [1] and record["command"] == "python -m bench.fleet.targets --quick --seeds 1"
    table = record["tables"]["targets"]
    assert [row[0] for row in table["rows"]] == ["chain g=2", "cached"] and len(table["columns"]) == 4
    chain, cached = (c["by_seed"][0] for c in record["configurations"])
    for figures in (chain, cached):
        assert figures["heads_over_ideal"] > 0 and 0 < figures["found_first_h"] <= 1
        assert figures["split_cost_usd_per_h"] > 0 and figures["answers_above_truth"] == 0
    assert chain["cache_per_request"] is None and cached["cache_per_request"]["recalled"] > 0
    assert cached["warmup_s"] == DEFAULT_VERDICT_CACHE.hit_ttl_s + CACHE_WARMUP_MARGIN_S


def test_targets_refuse_docs_from_a_quick_run_and_repeated_seeds(capsys: pytest.CaptureFixture[str]) -> None:
    bad = ((["--quick", "--update-docs"], "--update-docs with --quick"), (["--seeds", "1", "1"], "seeds must differ"))
    for argv, message in bad:
        with pytest.raises(SystemExit) as exit_:
            targets.main(argv)
        assert exit_.value.code == 2 and message in capsys.readouterr().err
