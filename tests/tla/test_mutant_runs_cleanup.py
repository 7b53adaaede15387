"""The shared TLC runs leave nothing in the temp dir: not at collection, not after a run."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]


def _leftovers(tmp: Path) -> list[str]:
    return sorted(p.name for p in tmp.iterdir() if p.name.startswith("kvprobe-mutant-"))


def test_collecting_the_tla_tests_leaves_no_mutant_folder(tmp_path: Path) -> None:
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "--collect-only",
            "-q",
            str(HERE / "test_tla_cache.py"),
        ],
        cwd=ROOT,
        env=os.environ | {"TMPDIR": str(tmp)},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "test_each_cache_mutant_is_caught_by_its_clause" in done.stdout  # it did import mutant_runs
    assert _leftovers(tmp) == []


def test_a_session_that_wrote_configs_removes_them_at_exit(tmp_path: Path) -> None:
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    script = "import mutant_runs; folder = mutant_runs.run_folder(); (folder / 'x.cfg').write_text('x'); print(folder)"
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=HERE,
        env=os.environ | {"TMPDIR": str(tmp), "PYTHONPATH": str(HERE)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert Path(done.stdout.strip()).parent == tmp  # the folder was made there, and is gone
    assert _leftovers(tmp) == []
