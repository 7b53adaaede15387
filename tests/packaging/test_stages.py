"""make test's stage driver: side-by-side pytest runs reported as one, failing if any stage fails."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from buildtools.stages import summary_counts  # noqa: E402

SUITE = """
import pytest

@pytest.mark.slow
def test_slow_passes():
    pass

def test_fast_passes():
    pass

def test_fast_fails():
    assert FAIL == 0
"""


def _stages(tmp_path: Path, fail: int, *markers: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "test_sample.py").write_text(f"FAIL = {fail}\n" + SUITE)
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    slow: a slow one\n")
    command = [sys.executable, "-m", "buildtools.stages", *markers, "--", "-q", "-p", "no:cacheprovider", str(tmp_path)]
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_ADDOPTS"} | {"PYTHONPATH": str(ROOT)}
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=120, env=env)


def test_the_stages_counts_add_up_and_a_clean_run_exits_0(tmp_path: Path) -> None:
    done = _stages(tmp_path, 0, "slow", "not slow")
    assert done.returncode == 0, done.stdout
    assert done.stdout.strip().splitlines()[-1] == "3 passed, 0 failed, 0 skipped"


def test_a_failure_in_either_stage_fails_the_run_and_is_counted(tmp_path: Path) -> None:
    done = _stages(tmp_path, 1, "slow", "not slow")
    assert done.returncode == 1, done.stdout
    assert done.stdout.strip().splitlines()[-1] == "2 passed, 1 failed, 0 skipped"
    assert "assert 1 == 0" in done.stdout  # the failing stage's log is printed whole


def test_a_stage_that_selects_nothing_fails_the_run(tmp_path: Path) -> None:
    done = _stages(tmp_path, 0, "slow", "nosuchmarker")
    assert done.returncode == 5, done.stdout


def test_summary_counts_reads_pytests_closing_line() -> None:
    log = "x\n=== 3 failed, 1379 passed, 14 skipped, 21 deselected, 2 errors in 1874.29s (0:31:14) ===\n"
    assert summary_counts(log) == {"failed": 3, "passed": 1379, "skipped": 14, "deselected": 21, "error": 2}
    assert summary_counts("no summary here\n") == {}
