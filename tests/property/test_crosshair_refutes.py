"""CrossHair is not vacuous here: it refutes a deliberately broken copy of partition_batch.

The first test checks the real contracts of ``kvprobe.spec`` (given to
CrossHair as the package's folder: given the dotted name, CrossHair looks at
the package's ``__init__`` only, finds nothing to check and still exits 0).
The second shows that the same kind of budget finds a counterexample when one
exists.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).parent


def _crosshair() -> list[str]:
    exe = shutil.which("crosshair") or str(Path(sys.executable).with_name("crosshair"))
    if not Path(exe).exists():
        pytest.skip("crosshair-tool is not installed (it is in the dev extra)")
    return [exe]


@pytest.mark.timeout(300)
@pytest.mark.long
def test_crosshair_confirms_the_spec_contracts() -> None:
    import kvprobe.spec

    folder = Path(kvprobe.spec.__file__).parent
    run = subprocess.run(
        [*_crosshair(), "check", str(folder), *"--analysis_kind PEP316 --report_all --per_condition_timeout 2".split()],
        capture_output=True,
        text=True,
        timeout=290,
    )
    lines = run.stdout.splitlines()
    analysed = [line for line in lines if ": info: " in line]
    refuted = [line for line in lines if ": error: " in line]
    assert run.returncode == 0 and not refuted, (run.returncode, run.stdout, run.stderr)
    assert len(analysed) >= 5, run.stdout


@pytest.mark.timeout(240)
@pytest.mark.long
def test_crosshair_refutes_the_broken_partitioner() -> None:
    run = subprocess.run(
        [*_crosshair(), "check", "broken_partition.py", "--analysis_kind", "PEP316", "--per_condition_timeout", "5"],
        cwd=HERE,
        capture_output=True,
        text=True,
        timeout=230,
    )
    assert run.returncode == 1, (run.returncode, run.stdout, run.stderr)
    # The refuted condition is the generation check: an entry submitted under a generation that is not live.
    refuted = [line for line in run.stdout.splitlines() if ": error: false when calling partition_batch" in line]
    assert refuted, run.stdout
    line_no = int(refuted[0].split(":")[1])
    source = (HERE / "broken_partition.py").read_text().splitlines()
    assert "pending[k][0] == g" in source[line_no - 1]
