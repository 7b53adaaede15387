"""bench.vllm.compare: its arithmetic (anywhere) and a small run of the three ways (in vLLM's venv, on Ceph RGW).

The small run is the bench's whole path at a size ``make test-vllm`` can
afford: two engine processes per way, uncapped, a few requests each.  It
checks what holds at any size: every request settles, no absent block is
answered stored, every process exits 0, and with the store never throttling
every stored prefix is found; and, counted from the raw outcomes, both
kvprobe ways send exactly the HEADs of the object schedule's window walk
(4 keys, growing 1.25 times), fewer than vLLM's own class.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from bench.fleet.rgw_engine import CHAIN
from bench.vllm.compare import figures, pressure, table
from bench.vllm.engine import MODES
from kvprobe.backends.nixl_obj import NixlObjBackend
from kvprobe.statemachine.windows import window_end


def _raw(mode: str, outcomes: list[dict[str, Any]], heads: int, limited: int, exits: list[int]) -> dict[str, Any]:
    engines = [{"exit": code, "result": {"outcomes": outcomes if i == 0 else []}} for i, code in enumerate(exits)]
    proxy = {"heads": heads, "done": {"rate_limited": limited}}
    return {"seed": 3, "mode": mode, "proxy": proxy, "engines": engines, "requests": len(outcomes) + 1}


def test_figures_count_found_heads_throttled_undecided_and_wrong() -> None:
    outcomes = [
        {"stored": 10, "leading_hits": 10, "decided": True},  # found; ideal 11
        {"stored": 64, "leading_hits": 64, "decided": True},  # found; ideal 64 (no miss past the chain)
        {"stored": 5, "leading_hits": 2, "decided": False},  # undecided; ideal 6
        {"stored": 0, "leading_hits": 1, "decided": True},  # wrong; ideal 1
    ]
    row = figures(_raw("switch", outcomes, heads=164, limited=41, exits=[0, -6]))
    assert row["found"] == 0.5
    assert (row["ideal"], row["head_ratio"]) == (82, 2.0)
    assert row["throttled"] == 0.25
    assert row["undecided"] == 2  # one undecided at its deadline, one never settled
    assert (row["wrong"], row["exits"]) == (1, [0, -6])


def test_the_table_puts_the_modes_side_by_side() -> None:
    one = [{"stored": 3, "leading_hits": 3, "decided": True}]
    rows = [figures(_raw(mode, one, heads=4 * (i + 1), limited=0, exits=[0])) for i, mode in enumerate(MODES)]
    lines = table(rows).splitlines()
    assert len(lines) == 2 + len(MODES)
    assert [line.split("|")[3].strip() for line in lines[2:]] == ["1.00x", "2.00x", "3.00x"]
    assert lines[2].startswith("| vLLM's obj tier | 100% |")
    assert lines[0].startswith("|  | found")  # one run per mode: no median to name
    two_seeds = table([*rows, *rows])
    assert two_seeds.startswith("| median of 2 runs | found")


def test_pressure_puts_the_demand_against_the_cap_and_names_where_walks_stopped() -> None:
    outcomes = [
        {"stored": 39, "leading_hits": 39, "decided": True, "scans": 9},  # ideal 40
        {"stored": 64, "leading_hits": 64, "decided": True, "scans": 11},  # ideal 64
        {"stored": 30, "leading_hits": 16, "decided": False, "scans": 160},  # ideal 31
        {"stored": 40, "leading_hits": 16, "decided": False, "scans": 160},  # ideal 41
        {"stored": 50, "leading_hits": 24, "decided": False, "scans": 160},  # ideal 51
    ]
    raw = _raw("kvprobe", outcomes, heads=600, limited=0, exits=[0, 0])
    raw["engines"][0]["result"] |= {"elapsed_s": 3.0, "step_overruns": 2, "pacing": {"rate": 300.0, "w_max": 310.0}}
    raw["engines"][1]["result"] |= {"elapsed_s": 4.0, "step_overruns": 1, "pacing": {"rate": None, "w_max": None}}
    seen = pressure(raw, duration_s=1.0, head_rate=454.0)
    assert seen["demand"] == 227 / 454  # the ideal HEADs of one second of arrivals, over the cap
    assert seen["sent"] == 150.0  # 600 HEADs over the longest engine's 4 s
    assert (seen["pace"], seen["pace_w_max"]) == (300.0, 310.0)  # the unpaced engine has no rate to count
    assert (seen["overruns"], seen["scans"]) == (3, 10)
    assert seen["stuck_at"] == {16: 2, 24: 1}


def test_a_small_comparison_runs_every_way(tmp_path: Path) -> None:
    try:
        import vllm  # noqa: F401
    except ImportError:
        if os.environ.get("KVPROBE_REQUIRE_VLLM") == "1":
            raise
        pytest.skip("needs vLLM 0.33: tests/vllm_release/run.sh")
    from kvprobe.backends._nixl_import import nixl_unavailable
    from kvprobe.testing.rgw import rgw_missing, skip_or_fail

    skip_or_fail(rgw_missing() or nixl_unavailable())
    from bench.vllm import compare

    out = tmp_path / "compare.json"
    argv = ["--engines", "2", "--rate", "1", "--duration", "3", "--head-rate", "1000000", "--pool", "30"]
    assert compare.main([*argv, "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    rows = data["figures"]
    assert [r["mode"] for r in rows] == list(MODES)
    for row in rows:
        assert row["settled"] == row["requests"] > 0, row
        assert (row["wrong"], row["undecided"], row["found"]) == (0, 0, 1.0), row
        assert row["exits"] == [0, 0], row
        assert row["heads"] >= row["ideal"], row  # the proxy saw at least every HEAD the verdicts needed
    by_mode = {r["mode"]: r for r in rows}
    first, growth = NixlObjBackend.chain_schedule
    for mode in ("switch", "kvprobe"):
        raw = next(r for r in data["raw"] if r["mode"] == mode)
        stored = [o["stored"] for e in raw["engines"] for o in e["result"]["outcomes"]]
        assert by_mode[mode]["heads"] == sum(min(CHAIN, window_end(first, s, growth)) for s in stored), mode
        assert by_mode[mode]["heads"] < by_mode["vllm"]["heads"], by_mode
