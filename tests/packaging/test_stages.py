"""make test's stage driver: side-by-side pytest runs reported as one, failing if any stage fails."""

from __future__ import annotations

import itertools
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from buildtools.stages import stage_arguments, summary_counts  # noqa: E402

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
    (tmp_path / "more").mkdir(exist_ok=True)
    (tmp_path / "more" / "test_more.py").write_text("def test_more_passes():\n    pass\n")
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    slow: a slow one\n")
    command = [sys.executable, "-m", "buildtools.stages", *markers, "--", "-q", "-p", "no:cacheprovider"]
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_ADDOPTS"} | {"PYTHONPATH": str(ROOT)}
    # From the sample's folder, as make test runs from the checkout: a stage's paths are relative to it.
    return subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=120, env=env)


def test_the_stages_counts_add_up_and_a_clean_run_exits_0(tmp_path: Path) -> None:
    done = _stages(tmp_path, 0, "slow", "not slow")
    assert done.returncode == 0, done.stdout
    assert done.stdout.strip().splitlines()[-1] == "4 passed, 0 failed, 0 skipped"


def test_each_stage_says_the_cpu_its_pytest_and_their_children_used(tmp_path: Path) -> None:
    # A test that spends 1.2 s of CPU in a child process: the stage counts it (wait4 on the pytest).
    (tmp_path / "spin").mkdir()
    (tmp_path / "spin" / "test_spin.py").write_text(
        "import subprocess, sys\n"
        "def test_a_child_spins():\n"
        "    spin = 'import time\\nwhile time.process_time() < 1.2: pass'\n"
        "    subprocess.run([sys.executable, '-c', spin], check=True)\n"
    )
    done = _stages(tmp_path, 0, "not slow@more", "not slow@spin")
    assert done.returncode == 0, done.stdout
    cpu = [float(s) for s in re.findall(r"^===== stage \d: .*: exit 0, (\d+) CPU s =====$", done.stdout, flags=re.M)]
    assert len(cpu) == 2, done.stdout
    assert cpu[1] >= 1, done.stdout  # the child's 1.2 s, and pytest's own


def test_a_stage_cut_by_folder_and_its_complement_run_each_test_once(tmp_path: Path) -> None:
    done = _stages(tmp_path, 0, "slow", "not slow@more", "not slow@!more")
    assert done.returncode == 0, done.stdout
    assert done.stdout.strip().splitlines()[-1] == "4 passed, 0 failed, 0 skipped"


def test_a_stage_cut_by_one_test_and_its_complement_run_each_test_once(tmp_path: Path) -> None:
    # A test id (path::name) left out is deselected: --ignore takes only paths.
    one = "test_sample.py::test_fast_passes"
    done = _stages(tmp_path, 0, "slow", f"not slow@{one}", f"not slow@!{one}")
    assert done.returncode == 0, done.stdout
    assert done.stdout.strip().splitlines()[-1] == "4 passed, 0 failed, 0 skipped"
    assert stage_arguments(f"a@!{one},!more") == ["-m", "a", f"--deselect={one}", "--ignore=more"]


def test_a_stage_mixing_kept_and_left_out_paths_is_refused(tmp_path: Path) -> None:
    done = _stages(tmp_path, 0, "slow", "not slow@more,!test_sample.py")
    assert done.returncode == 2 and "mixes paths" in done.stderr, done.stderr
    assert stage_arguments("a@x, y") == ["-m", "a", "x", "y"]
    assert stage_arguments("a@!x,!y") == ["-m", "a", "--ignore=x", "--ignore=y"]


def make_test_stages(target: str) -> list[str]:
    """The stages the Makefile's ``target`` hands to buildtools.stages."""
    makefile = (ROOT / "Makefile").read_text()
    recipe = re.search(rf"^{target}:.*\n((?:\t.*\n)+)", makefile, flags=re.M)
    assert recipe is not None, target
    lines = recipe.group(1).replace("\\\n", " ").splitlines()  # a line continued with a backslash is one
    line = next(line for line in lines if "$(STAGES)" in line)
    words = shlex.split(line.split("$(STAGES)", 1)[1])
    return words[2:] if words[:1] == ["--first-ahead"] else words


def test_the_makefiles_stages_cut_each_expression_without_a_gap() -> None:
    # Per marker expression: one stage with no paths, or stages with paths plus
    # exactly one that leaves all of those paths out.  Anything else drops tests.
    for target in ("test", "test-long-stages"):
        by_expression: dict[str, list[list[str]]] = {}
        for stage in make_test_stages(target):
            marker, _, where = stage.partition("@")
            by_expression.setdefault(marker.strip(), []).append([p.strip() for p in where.split(",") if p.strip()])
        for marker, cuts in by_expression.items():
            if len(cuts) == 1:
                assert cuts == [[]], (target, marker, cuts)
                continue
            kept = [path for cut in cuts for path in cut if not path.startswith("!")]
            complements = [cut for cut in cuts if cut and all(path.startswith("!") for path in cut)]
            assert len(complements) == 1, (target, marker, cuts)
            assert sorted(path[1:] for path in complements[0]) == sorted(kept), (target, marker, cuts)
            assert len(kept) == len(set(kept)), (target, marker, cuts)
            for path in kept:
                assert (ROOT / path.split("::")[0]).exists(), path


def test_a_failure_in_either_stage_fails_the_run_and_is_counted(tmp_path: Path) -> None:
    done = _stages(tmp_path, 1, "slow", "not slow")
    assert done.returncode == 1, done.stdout
    assert done.stdout.strip().splitlines()[-1] == "3 passed, 1 failed, 0 skipped"
    assert "assert 1 == 0" in done.stdout  # the failing stage's log is printed whole


def test_a_stage_that_selects_nothing_fails_the_run(tmp_path: Path) -> None:
    done = _stages(tmp_path, 0, "slow", "nosuchmarker")
    assert done.returncode == 5, done.stdout


def test_summary_counts_reads_pytests_closing_line() -> None:
    log = "x\n=== 3 failed, 1379 passed, 14 skipped, 21 deselected, 2 errors in 1874.29s (0:31:14) ===\n"
    assert summary_counts(log) == {"failed": 3, "passed": 1379, "skipped": 14, "deselected": 21, "error": 2}
    assert summary_counts("no summary here\n") == {}


def make_test_serial(target: str) -> list[str]:
    """The marker expressions of the Makefile's ``target`` runs alone after its stages (``pytest -m "EXPR"``)."""
    makefile = (ROOT / "Makefile").read_text()
    recipe = re.search(rf"^{target}:.*\n((?:\t.*\n)+)", makefile, flags=re.M)
    assert recipe is not None, target
    return re.findall(r'-m pytest [^\n]*-m "([^"]+)"', recipe.group(1))


def test_make_test_and_test_long_select_each_test_exactly_once() -> None:
    # Over every combination of the three markers the stages select by, one
    # expression of the two targets is true: no test is left out of CI's
    # suite and none runs twice (deep_replay has its own CI command).
    # test-long is its stages, then its quiet tests alone (two targets).
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"^test-long: test-long-stages test-long-quiet$", makefile, flags=re.M)
    staged = ("test", "test-long-stages")
    expressions = {stage.partition("@")[0].strip() for t in staged for stage in make_test_stages(t)}
    expressions |= {e for t in ("test", "test-long-quiet") for e in make_test_serial(t)}
    assert "not long and not tlc and quiet" in expressions  # the quiet ones run alone after make test's stages
    for long, tlc, quiet in itertools.product((False, True), repeat=3):
        chosen = [e for e in expressions if eval(e, {"__builtins__": {}}, {"long": long, "tlc": tlc, "quiet": quiet})]
        assert len(chosen) == 1, (long, tlc, quiet, chosen)


def test_first_ahead_runs_every_stage_but_the_first_at_a_higher_niceness(tmp_path: Path) -> None:
    # Each test records its process's niceness; the stage after the first runs 7 higher.
    (tmp_path / "nice").mkdir()
    (tmp_path / "nice" / "test_nice.py").write_text(
        "import os, pathlib\n"
        "def test_records_its_niceness():\n"
        "    pathlib.Path(os.environ['NICE_OUT'], f'{os.getpid()}').write_text(str(os.nice(0)))\n"
    )
    (tmp_path / "out").mkdir()
    os.environ["NICE_OUT"] = str(tmp_path / "out")
    try:
        done = _stages(tmp_path, 0, "--first-ahead", "7", "not slow@nice", "not slow@more,nice")
    finally:
        del os.environ["NICE_OUT"]
    assert done.returncode == 0, done.stdout
    base = os.nice(0)
    assert sorted(int(p.read_text()) for p in (tmp_path / "out").iterdir()) == [base, base + 7]


def test_first_ahead_needs_a_niceness(tmp_path: Path) -> None:
    for bad in (["--first-ahead"], ["--first-ahead", "x", "slow"], ["--first-ahead", "0", "slow"]):
        done = _stages(tmp_path, 0, *bad)
        assert done.returncode == 2, (bad, done.stdout)
        assert "usage" in done.stderr, bad
