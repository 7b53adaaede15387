"""pip builds the compiled core when it can and falls back to pure Python when it cannot.

The wheel tests build from a copy of the checkout's tracked files (what a
fresh clone holds), with pip's build isolation, as a user's `pip install .`
does; they take about a minute together.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from buildtools import toolchain  # noqa: E402

COMPILED = {"kvprobe/statemachine/core", "kvprobe/statemachine/records"}


def test_the_build_mode_variable_takes_only_0_1_or_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    for value, expected in [("", None), ("1", True), ("0", False), (" 1 ", True)]:
        monkeypatch.setenv(toolchain.ENV, value)
        assert toolchain.requested() is expected
    monkeypatch.setenv(toolchain.ENV, "yes")
    with pytest.raises(toolchain.BuildModeError, match="KVPROBE_COMPILE='yes'"):
        toolchain.requested()


def test_a_compiler_pointing_nowhere_is_reported_and_insisting_on_it_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CC", "/nonexistent/cc")
    assert toolchain.missing_compiler() == "no C compiler ('/nonexistent/cc' not found)"
    monkeypatch.setenv(toolchain.ENV, "1")
    with pytest.raises(toolchain.BuildModeError, match="asks for the compiled core, but no C compiler"):
        toolchain.will_compile()
    monkeypatch.setenv(toolchain.ENV, "")
    assert toolchain.will_compile() is False


def test_a_compiler_that_cannot_build_against_python_is_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CC", "false")
    assert "cannot build against Python.h" in (toolchain.missing_compiler() or "")


def _fresh_clone(tmp_path: Path) -> Path:
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    tree = tmp_path / "clone"
    for name in filter(None, tracked.decode().split("\0")):
        source = ROOT / name
        if source.is_file():  # a file deleted in the working tree is not in the clone
            (tree / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, tree / name)
    return tree


def _wheel(tmp_path: Path, **env: str) -> tuple[set[str], str]:
    tree = _fresh_clone(tmp_path)
    environ = {k: v for k, v in os.environ.items() if k != toolchain.ENV} | env
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-v", "--no-deps", "-w", str(tmp_path / "dist"), str(tree)],
        capture_output=True,
        text=True,
        env=environ,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (wheel,) = (tmp_path / "dist").glob("kvprobe-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
    extensions = {n.split(".cpython")[0] for n in names if n.endswith(".so") or n.endswith(".pyd")}
    assert {"kvprobe/spec/lifecycle.py", "kvprobe/tla/KVProbe.tla", "kvprobe/statemachine/core.py"} <= names
    return extensions, done.stdout + done.stderr


# About 40 s of mypyc: make test-long runs it (make test stays under 10 minutes).
@pytest.mark.long
@pytest.mark.skipif(toolchain.missing_compiler() is not None, reason="no C compiler on this machine")
def test_a_wheel_from_a_fresh_clone_carries_the_compiled_core(tmp_path: Path) -> None:
    extensions, _ = _wheel(tmp_path)
    assert COMPILED <= extensions


def test_without_a_compiler_the_wheel_is_pure_and_says_why(tmp_path: Path) -> None:
    extensions, log = _wheel(tmp_path, CC="/nonexistent/cc")
    assert extensions == set()
    assert "kvprobe: installing the pure-Python core: no C compiler ('/nonexistent/cc' not found)" in log
