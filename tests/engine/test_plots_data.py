"""bench.run_all saves what it measured; bench.plots draws from that file (no timing is asserted).

Small trees and few steps: these check the shape of the data (a time series
that ends after the worker's last verdict, delays of at least one step per
verdict), that ``run_all``'s results file carries the command, date, load
and raw series, and that ``plots`` draws from it, so ``python -m
bench.run_all`` followed by ``python -m bench.plots`` keeps working.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("prometheus_client", reason="the metrics extra is not installed")
pytest.importorskip("matplotlib", reason="the plots extra is not installed")

from bench import plots, run_all
from bench.common import Row, rows_from_output
from bench.plots import _binned
from bench.series import Series, delay_samples, rate_series
from bench.trees import block_tree
from kvprobe.backends.fs import FsBackend


def test_rate_series_covers_the_busy_window_and_idle_has_none() -> None:
    with block_tree(256 + 400) as (root, keys):
        busy = rate_series(FsBackend(root), keys, 2, "busy")
        idle = rate_series(FsBackend(root), keys, 2, "idle", idle_s=0.05)
    assert busy.busy_until is not None and busy.stamps[-1] >= busy.busy_until
    assert busy.stamps == sorted(busy.stamps)
    assert idle.busy_until is None and idle.stamps[-1] >= 0.05


def test_binned_rates_count_every_full_bin() -> None:
    series = Series("s", stamps=[0.001, 0.002, 0.011, 0.025], per_stamp=10)
    xs, ys = _binned(series, 0.01)
    assert xs == [5.0, 15.0]  # bin centres in ms; the partial last bin is dropped
    assert ys == [2000.0, 1000.0]  # lookups per second


def test_delay_samples_are_verdicts_at_least_one_step_late() -> None:
    with block_tree(600) as (root, keys):
        delays = delay_samples(FsBackend(root), keys, steps=4, arrivals=2, keys_per_request=32, forward_ms=2)
    assert delays
    assert all(steps >= 1 and seconds > 0 and count >= 1 for steps, seconds, count in delays)
    assert sum(count for _, _, count in delays) <= 4 * 2 * 32


def small_figure_benchmarks() -> dict[str, Any]:
    """Stand-ins for run_all's three figure benchmarks: real measurements, small, in the same shape."""

    def scheduler_rate(quick: bool) -> tuple[list[Row], Any]:
        with block_tree(256 + 400) as (root, keys):
            runs = [
                rate_series(FsBackend(root), keys, 2, "idle", idle_s=0.05),
                rate_series(FsBackend(root), keys, 2, "FsBackend"),
            ]
        series = [{"label": s.label, "stamps": s.stamps, "busy_until": s.busy_until} for s in runs]
        return [Row("scheduler_rate", "m", "v")], {"n_keys": 400, "groups": 2, "per_stamp": 256, "series": series}

    def lookup_delay(quick: bool) -> tuple[list[Row], Any]:
        with block_tree(600) as (root, keys):
            obs = delay_samples(FsBackend(root), keys, steps=3, arrivals=2, keys_per_request=16, forward_ms=2)
        raw = {"steps": 3, "tree_files": 600, "arrivals_per_step": 2, "keys_per_request": 16, "forward_ms": 2.0}
        return [], {**raw, "samples": {"FsBackend": [list(o) for o in obs]}}

    def tlc_cost(quick: bool) -> tuple[list[Row], Any]:
        config = {
            "config": "default",
            "outcome": "ok",
            "distinct": 900,
            "wall_s": 3.0,
            "points": [[0.5, 1], [3.0, 900]],
        }
        return [], {"configs": [config], "hypothesis": {}}

    return {"scheduler_rate": scheduler_rate, "lookup_delay": lookup_delay, "tlc_cost": tlc_cost}


def test_run_all_saves_command_date_load_and_raw_series(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(run_all, "BENCHMARKS", small_figure_benchmarks())
    out = tmp_path / "results.json"
    assert run_all.main(["--quick", "--out", str(out)]) == 0
    record = json.loads(out.read_text())
    assert record["command"] == f"python -m bench.run_all --quick --out {out}"
    assert record["quick"] is True and record["date"]
    assert len(record["machine"]["load_average_start"]) == 3
    assert set(record["benchmarks"]) == {"scheduler_rate", "lookup_delay", "tlc_cost"}
    rate = record["benchmarks"]["scheduler_rate"]
    assert rate["rows"] == [{"bench": "scheduler_rate", "metric": "m", "value": "v", "detail": ""}]
    assert [s["label"] for s in rate["raw"]["series"]] == ["idle", "FsBackend"]
    assert rate["raw"]["series"][1]["busy_until"] is not None


def test_plots_draws_every_figure_from_the_run_all_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(run_all, "BENCHMARKS", small_figure_benchmarks())
    results = tmp_path / "results.json"
    run_all.main(["--out", str(results)])
    img = tmp_path / "img"
    assert plots.main(["--from", str(results), "--out", str(img)]) == 0
    for name in ("starvation.png", "lookup_delay.png", "tlc_states.png"):
        assert (img / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_plots_says_which_benchmark_is_missing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    results = tmp_path / "results.json"
    results.write_text(json.dumps({"command": "c", "benchmarks": {"hotpath": {"rows": [], "raw": None}}}))
    assert plots.main(["--from", str(results), "--out", str(tmp_path), "--only", "tlc"]) == 1
    assert "no tlc_cost data" in capsys.readouterr().out
    assert not (tmp_path / "tlc_states.png").exists()


def test_plots_without_a_results_file_says_to_run_run_all(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert plots.main(["--from", str(tmp_path / "absent.json"), "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "python -m bench.run_all" in err
    assert list(tmp_path.iterdir()) == []


def test_rows_from_a_benchmarks_printed_tables() -> None:
    text = "intro\n\n| worker | steps | wall time |\n|---|---:|---:|\n| seq | 3 | 2100 ms |\n| conc | 1 | 90 ms |\n"
    assert rows_from_output("groups", text, 0) == [
        Row("groups", "seq", "steps: 3; wall time: 2100 ms"),
        Row("groups", "conc", "steps: 1; wall time: 90 ms"),
    ]
    chaos = "| | |\n|---|---|\n| wrong verdicts | 2 |\nPASS: fds flat\nFAIL: wrong verdicts 0\n"
    rows = rows_from_output("chaos", chaos, 1)
    assert rows[0] == Row("chaos", "wrong verdicts", "2")
    assert rows[1] == Row("chaos", "own checks", "FAIL", "exit 1: wrong verdicts 0")
