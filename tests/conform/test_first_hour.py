"""``kvprobe conform`` as a user meets it in the first hour.

The factory's module is found in the current directory (as ``python -m``
finds it), nothing is left in that directory, ``--seed N`` prints the same
report in every process whatever ``PYTHONHASHSEED`` is, and counts are
written in words that agree with them ("1 step").

The subprocesses start the CLI as the ``kvprobe`` script does: from a file
in another directory, so the current directory is not on ``sys.path`` by
itself (``python -m`` would put it there and hide the problem).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from lying_tiers import RemovedStillFound

from kvprobe.conform import main as conform_main
from kvprobe.testing.stateful import failure_report, memory_factory, run_conformance

HERE = Path(__file__).resolve().parent

TIER_MODULE = """\
from kvprobe.backends import InMemoryBackend


def factory():
    backend = InMemoryBackend()
    return backend, backend.store, backend.remove
"""


def _script(tmp_path: Path) -> Path:
    """A stand-in for the installed ``kvprobe`` script, in a directory of its own."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "kvprobe"
    script.write_text("import sys\nfrom kvprobe.cli import main\nsys.exit(main())\n")
    return script


def _user_directory(tmp_path: Path) -> Path:
    """The user's directory: their tier module and the lying tiers, nothing else."""
    cwd = tmp_path / "work"
    cwd.mkdir()
    (cwd / "mytier.py").write_text(TIER_MODULE)
    shutil.copy(HERE / "lying_tiers.py", cwd / "lying_tiers.py")
    return cwd


def _kvprobe(script: Path, cwd: Path, *args: str, hash_seed: str = "0") -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONHASHSEED": hash_seed}
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # bytecode would be written unless conform prevents it
    return subprocess.run(
        [sys.executable, str(script), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600
    )


def _listing(directory: Path) -> list[str]:
    return sorted(str(p.relative_to(directory)) for p in directory.rglob("*"))


def test_a_factory_in_the_current_directory_is_found_and_nothing_is_left_there(tmp_path: Path) -> None:
    script, cwd = _script(tmp_path), _user_directory(tmp_path)
    before = _listing(cwd)
    ran = _kvprobe(script, cwd, "conform", "mytier:factory", "--examples", "5", "--derandomize")
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "PASS: 5 examples" in ran.stdout
    failed = _kvprobe(script, cwd, "conform", "lying_tiers:AlwaysTrue", "--seed", "2")
    assert failed.returncode == 1, failed.stdout + failed.stderr
    assert _listing(cwd) == before  # no .hypothesis/, no __pycache__/


def test_a_module_found_nowhere_is_named_with_the_directory_searched(tmp_path: Path) -> None:
    script, cwd = _script(tmp_path), _user_directory(tmp_path)
    ran = _kvprobe(script, cwd, "conform", "nosuchtier:factory")
    assert ran.returncode == 2
    lines = ran.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in ran.stderr, ran.stderr
    assert "no module named 'nosuchtier' in the current directory" in lines[0]
    assert str(cwd) in lines[0]


def test_a_module_whose_own_import_fails_names_both(tmp_path: Path) -> None:
    script, cwd = _script(tmp_path), _user_directory(tmp_path)
    (cwd / "brokentier.py").write_text("import not_installed_dependency\n")
    ran = _kvprobe(script, cwd, "conform", "brokentier:factory")
    assert ran.returncode == 2
    assert "importing 'brokentier' failed" in ran.stderr
    assert "not_installed_dependency" in ran.stderr


def _report(ran: subprocess.CompletedProcess[str]) -> str:
    assert ran.returncode == 1, ran.stdout + ran.stderr
    return re.sub(r"FAIL after [0-9.]+ s", "FAIL after N s", ran.stdout)


@pytest.mark.parametrize(
    ("tier", "options"),
    [
        # The failing run as found: its first step stores three blocks, printed in
        # hash order before (stored={k1, k3, k2} in one process, {k3, k2, k1} in another).
        ("lying_tiers:NeighbourVerdict", ["--seed", "1", "--no-shrink"]),
        # Shrunk: the shrinking ends where a count of runs says, not a clock.
        ("lying_tiers:AlwaysTrue", ["--seed", "2"]),
    ],
)
def test_a_seed_prints_the_same_report_whatever_the_hash_seed(tmp_path: Path, tier: str, options: list[str]) -> None:
    script, cwd = _script(tmp_path), _user_directory(tmp_path)
    first = _report(_kvprobe(script, cwd, "conform", tier, *options, hash_seed="1"))
    second = _report(_kvprobe(script, cwd, "conform", tier, *options, hash_seed="2"))
    assert first == second
    assert f"Reproduce: kvprobe conform {tier} {' '.join(options)}" in first


def test_the_shrinking_ends_after_a_count_of_runs() -> None:
    results = [run_conformance(RemovedStillFound, seed=2, shrink_runs=30) for _ in range(2)]
    assert results[0].failure == results[1].failure and results[0].runs == results[1].runs
    assert results[0].failure.endswith("(shrinking stopped after 30 runs: a smaller failing run may exist)")


def test_a_run_in_process_writes_nothing_to_the_current_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert run_conformance(memory_factory, examples=3, derandomize=True).passed
    assert _listing(tmp_path) == []


def test_one_of_a_kind_is_written_in_the_singular(capsys: pytest.CaptureFixture[str]) -> None:
    assert conform_main(["kvprobe.testing.stateful:memory_factory", "--examples", "1", "--steps", "1"]) == 0
    assert "PASS: 1 example of up to 1 step in" in capsys.readouterr().out
    one = failure_report(AssertionError("broken"), ["state.initial_blocks(stored=[])"])
    assert "The run (1 step; keys" in one
    # Three steps, the second changed nothing (effects start after the initialize step).
    steps = ["state.initial_blocks(stored=[])", "state.Cleanup(req='req-a')", "state.Flush(fail=None)"]
    idle = failure_report(AssertionError("broken"), steps, effects=[False, True])
    assert "The run (3 steps; 1 step that changed nothing left out; keys" in idle
