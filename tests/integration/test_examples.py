"""The runnable examples run: each scheduler loop finishes with nothing held.

Only the examples that need no network server are run here (the object store
example starts its own moto server and is covered by the S3 integration tests).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.mark.parametrize("script", ["fs_tier.py", "process_tier.py"])
def test_example_scheduler_loop_finishes_clean(script: str, tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, script, str(tmp_path / "tier")],
        cwd=EXAMPLES,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.count("scheduled") == 8, done.stdout
    assert "states held: 0;" in done.stdout
    assert "backend_errors=0" in done.stdout and "hits=0," not in done.stdout
