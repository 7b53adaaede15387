"""The simulated tier that evicts: stale remembered verdicts take the contract's mark_miss path.

Small fleets on short windows, suffixes evicted every few seconds, so that
a remembered "stored" goes stale within its TTL (each test runs in a second
or two); ``bench.fleet.eviction``'s command on a tiny fleet.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest

import bench.fleet.eviction as eviction
from bench.fleet.params import StoreParams, WorkloadParams
from bench.fleet.sim import Scenario, run
from bench.fleet.workload import Prompt, Tier
from kvprobe.statemachine.verdict_cache import VerdictCache

#: Few prefixes, returning often, each losing a suffix every 2 s on average.
EVICTING = WorkloadParams(
    max_blocks=600, serve_s=2.0, arrivals_per_s=2.0, shared_prefixes=4, shared_evictions_per_h=1800.0
)
LONG_TTL = VerdictCache(max_entries=50_000, hit_ttl_s=5.0)


def _run(mode: str, workload: WorkloadParams = EVICTING, **kw: Any) -> dict[str, Any]:
    options: dict[str, Any] = {"engines": 10, "warmup_s": 1.0, "window_s": 4.0, "seed": 3, "verdict_cache": LONG_TTL}
    options |= {"store": StoreParams(head_limit_per_s=1e9), "workload": workload} | kw
    return run(Scenario(mode=mode, **options))


def test_a_suffix_is_evicted_from_the_stored_part_only_and_written_back_once() -> None:
    keys = tuple(bytes([i]) * 8 for i in range(10))
    tier, prefix = Tier(), Prompt(keys, 6)
    tier.keys.update(keys[:6])
    tier.evict_suffix(prefix, random.Random(1))
    held = [tier.holds(k) for k in keys]
    cut = held.index(False)
    assert held == [True] * cut + [False] * (10 - cut) and tier.evicted_blocks == 6 - cut and tier.evictions == 1
    tier.write_back(keys[cut:6])
    tier.write_back(keys[cut:6])  # a second writer finds them there
    assert tier.keys == set(keys[:6]) and tier.rewritten_blocks == 6 - cut
    tier.evict_suffix(Prompt(keys, 0), random.Random(1))  # nothing stored: nothing to lose
    assert tier.evictions == 1


def test_a_stale_remembered_verdict_is_a_failed_load_then_mark_miss_and_never_a_found_block() -> None:
    cached = _run("cached")
    assert cached["tier_evictions"] > 0 and cached["tier_rewritten_blocks"] > 0
    assert cached["stale_requests"] > 0 and cached["stale_blocks_per_request"] > 0
    # The engines told their cores: every stale block was forgotten by the cache (mark_miss).
    assert cached["cache"]["forgotten"] > 0
    # An evicted block is found by nobody; nothing absent from the workload's tier is answered True.
    assert cached["stored_found"] < 1.0 and cached["answers_above_truth"] == 0
    kept = _run("cached", WorkloadParams(max_blocks=600, serve_s=2.0, arrivals_per_s=2.0, shared_prefixes=4))
    assert kept["tier_evictions"] == kept["stale_requests"] == 0 and kept["stored_found"] == 1.0


def test_a_shorter_memory_goes_stale_less() -> None:
    long = _run("cached")
    short = _run("cached", verdict_cache=VerdictCache(max_entries=50_000, hit_ttl_s=0.5))
    assert short["stale_blocks_per_request"] < long["stale_blocks_per_request"]


def test_the_command_writes_its_table(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(eviction, "QUICK_RUN", (2.0, 1.0, 5))
    monkeypatch.setattr(eviction, "QUICK_ENGINES", 5)
    monkeypatch.setattr(eviction, "HIT_TTLS_S", (2.0,))
    monkeypatch.setattr(eviction, "EVICTIONS_PER_H", (0.0, 3600.0))
    out = tmp_path / "eviction.json"
    assert eviction.main(["--quick", "--seeds", "1", "--json", str(out)]) == 0
    record = json.loads(out.read_text())
    table = record["tables"]["eviction"]
    assert [row[:2] for row in table["rows"]] == [["2 s", "never"], ["2 s", "3600 per hour"]]
    assert len(table["columns"]) == 6 and "5 engines" in table["columns"][2]
    assert record["cases"][0]["by_seed"][0]["evictions"] == 0 < record["cases"][1]["by_seed"][0]["evictions"]
    assert record["command"] == "python -m bench.fleet.eviction --quick --seeds 1"


@pytest.mark.parametrize(
    ("argv", "says"),
    [(["--quick", "--update-docs"], "--update-docs with --quick"), (["--seeds", "1", "1"], "seeds must differ")],
)
def test_bad_options_are_refused(argv: list[str], says: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        eviction.main(argv)
    assert exited.value.code == 2 and says in capsys.readouterr().err
