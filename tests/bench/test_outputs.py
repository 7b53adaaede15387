"""Benchmarks write their results under ``bench/results/``; files under ``docs/`` only with ``--update-docs``.

No timing is asserted: the runs here are the shortest each runner has.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench import run_all
from bench.common import DOCS_DIR, RESULTS_DIR, Row
from bench.docdata import load, render

ROOT = Path(__file__).resolve().parents[2]


def _tracked(root: Path) -> list[str]:
    listed = subprocess.run(["git", "ls-files", "bench", "docs"], cwd=root, capture_output=True, text=True, check=False)
    if listed.returncode != 0 or not listed.stdout:
        pytest.skip("not a git checkout: the tracked files are unknown")
    return listed.stdout.split()


def _digests(root: Path, files: list[str]) -> dict[str, str]:
    return {f: hashlib.sha256((root / f).read_bytes()).hexdigest() for f in files if (root / f).is_file()}


def test_quick_runs_change_no_tracked_file_and_write_under_bench_results(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib", reason="bench.fleet draws its plot with matplotlib")
    files = _tracked(ROOT)
    copy = tmp_path / "checkout"
    for name in files:
        (copy / name).parent.mkdir(parents=True, exist_ok=True)
        (copy / name).write_bytes((ROOT / name).read_bytes())
    before = _digests(copy, files)
    env = {**os.environ, "PYTHONPATH": str(copy), "MPLBACKEND": "Agg"}
    for command in (["bench.fleet", "--quick", "--engines", "10"], ["bench.run_all", "--quick", "--only", "hotpath"]):
        subprocess.run([sys.executable, "-m", *command], cwd=copy, env=env, check=True, capture_output=True)
    assert _digests(copy, files) == before
    written = sorted(
        str(p.relative_to(copy)) for p in copy.rglob("*") if p.is_file() and str(p.relative_to(copy)) not in files
    )
    written = [w for w in written if "__pycache__" not in w]
    assert "bench/results/fleet.json" in written and "bench/results/fleet_store_load.png" in written
    assert any(w.startswith("bench/results/run_all-") for w in written)
    assert all(w.startswith("bench/results/") for w in written), written


def test_the_default_outputs_are_ignored_by_git() -> None:
    from bench import plots
    from bench.fleet import __main__ as fleet

    _tracked(ROOT)
    for path in (fleet.JSON, fleet.PLOT, plots.DEFAULT_OUT / "starvation.png", RESULTS_DIR / "run_all-x.json"):
        ignored = subprocess.run(["git", "check-ignore", "-q", str(path)], cwd=ROOT, check=False)
        assert ignored.returncode == 0, f"{path} is not ignored by git"


def test_update_docs_is_refused_for_a_quick_run(capsys: pytest.CaptureFixture[str]) -> None:
    from bench.fleet import __main__ as fleet

    for main in (fleet.main, run_all.main):
        with pytest.raises(SystemExit) as exited:
            main(["--quick", "--update-docs"])
        assert exited.value.code == 2
        assert "too short for the docs to quote" in capsys.readouterr().err


def test_run_all_update_docs_writes_a_table_the_docs_can_quote(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(run_all, "BENCHMARKS", {"x": lambda quick: ([Row("x", "ratio", "0.50x", "d")], None)})
    monkeypatch.setattr(run_all, "DATA_DIR", tmp_path / "data")
    assert run_all.main(["--update-docs", "--out", str(tmp_path / "run.json")]) == 0
    [written] = (tmp_path / "data").glob("run_all-*.json")
    data = load(written.stem, tmp_path / "data")
    assert data["command"] == f"python -m bench.run_all --out {tmp_path / 'run.json'}"
    assert render(data, "results")[-1] == "| x | ratio | 0.50x | d |"
    assert not (DOCS_DIR / "data" / written.name).exists()


def _tlc_record(path: Path) -> Path:
    config = {"config": "default", "outcome": "ok", "distinct": 900, "wall_s": 3.0, "points": [[0.5, 1], [3.0, 900]]}
    record = {
        "command": "python -m bench.run_all --only tlc_cost",
        "date": "2026-12-04T18:00:00+00:00",
        "quick": False,
        "machine": {"cores": 2, "cpu": "C", "python": "3.11.7", "build": "pure", "load_average_start": [1.0, 1, 1]},
        "benchmarks": {"tlc_cost": {"rows": [], "raw": {"configs": [config], "hypothesis": {}}}},
    }
    path.write_text(json.dumps(record))
    return path


def test_plots_update_docs_writes_each_picture_beside_the_data_it_is_drawn_from(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("matplotlib", reason="the plots extra is not installed")
    from bench import plots

    monkeypatch.setattr(plots, "DOCS_OUT", tmp_path / "img")
    monkeypatch.setattr(plots, "DATA_DIR", tmp_path / "data")
    assert plots.main(["--from", str(_tlc_record(tmp_path / "r.json")), "--only", "tlc", "--update-docs"]) == 0
    assert (tmp_path / "img" / "tlc_states.png").read_bytes()[:4] == b"\x89PNG"
    data = load("tlc_states", tmp_path / "data")
    assert data["figure"] == "img/tlc_states.png" and data["machine"]["cpu"] == "C"
    # The data file alone redraws the picture.
    again = tmp_path / "again"
    assert plots.main(["--from", str(tmp_path / "data" / "tlc_states.json"), "--only", "tlc", "--out", str(again)]) == 0
    assert (again / "tlc_states.png").is_file()


def test_plots_draws_a_table_of_docs_data_as_bars_and_refuses_cells_without_a_spread(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib", reason="the plots extra is not installed")
    from bench import plots

    source = DOCS_DIR / "data" / "starvation-2026-12-04.json"
    assert plots.main(["--from", str(source), "--out", str(tmp_path)]) == 0
    assert (tmp_path / "starvation.png").read_bytes()[:4] == b"\x89PNG"
    assert plots._spread("**0.93** (0.85\u20130.97)") == (0.93, 0.85, 0.97)
    with pytest.raises(ValueError, match="not 'median \\(min-max\\)'"):
        plots._spread("0.93")
