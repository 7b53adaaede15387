"""The pace's rules stay pure, below their driver: ``_pace_core`` reaches no clock, lock, I/O or driver."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import kvprobe.backends._pace_core as pace_core

BACKENDS = Path(pace_core.__file__).resolve().parent
IO_MODULES = {"threading", "os", "time", "socket", "subprocess", "multiprocessing", "asyncio", "concurrent", "weakref"}
DRIVERS = {"kvprobe.backends._pacing", "kvprobe.backends._host_pace"}


def imported_by(path: Path) -> set[str]:
    """Every module a file imports, at any depth of the file (absolute imports; the backends use no others)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"{path.name}: a relative import the walk would not follow"
            found.add(node.module or "")
    return found


def reached_from(module: str) -> set[str]:
    """The kvprobe.backends modules ``module`` reaches, following imports, and every module they import."""
    seen: set[str] = set()
    todo = [module]
    every: set[str] = set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        path = BACKENDS / (name.rsplit(".", 1)[1] + ".py")
        found = imported_by(path)
        every |= found
        todo += [
            m
            for m in found
            if m.startswith("kvprobe.backends.") and (BACKENDS / (m.rsplit(".", 1)[1] + ".py")).exists()
        ]
    return every


def test_the_rules_reach_no_clock_lock_io_or_driver() -> None:
    reached = reached_from("kvprobe.backends._pace_core")
    assert not {m for m in reached if m.split(".")[0] in IO_MODULES}, reached
    assert not reached & DRIVERS, reached


def test_the_driver_imports_the_rules() -> None:
    assert "kvprobe.backends._pace_core" in imported_by(BACKENDS / "_pacing.py")


@pytest.mark.parametrize("culprit", ["import time", "from kvprobe.backends._pacing import Pacer"])
def test_the_walk_sees_a_forbidden_import(tmp_path: Path, culprit: str) -> None:
    # The check above must be able to fail: a file importing the clock or the driver is seen.
    source = tmp_path / "mod.py"
    source.write_text(f"from __future__ import annotations\n{culprit}\n")
    found = imported_by(source)
    assert found & IO_MODULES or found & DRIVERS
