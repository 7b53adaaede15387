"""bench/ is organised by question, and bench/README.md is its index.

Every command the index names is a module that exists; every benchmark
module is named by the index; no benchmark sits flat in bench/ (only the
shared pieces do); and the moved modules find what they read relative to
the repository.
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

from bench.checks import conform_power
from bench.fleet import rgw

BENCH = Path(__file__).resolve().parents[2] / "bench"
INDEX = BENCH / "README.md"
#: The shared pieces and the suite's runners, the only modules flat in bench/.
SHARED = {"common", "commits", "docdata", "plots", "run_all", "series", "trees"}


def _commands() -> set[str]:
    return set(re.findall(r"python -m (bench(?:\.\w+)+)", INDEX.read_text()))


def test_every_command_of_the_index_is_a_module() -> None:
    commands = _commands()
    assert {"bench.run_all", "bench.hotpath.cost", "bench.chains", "bench.fleet.rgw"} <= commands
    missing = sorted(c for c in commands if importlib.util.find_spec(c) is None)
    assert missing == [], f"bench/README.md names modules that do not exist: {missing}"


def test_every_benchmark_module_is_in_the_index() -> None:
    text = INDEX.read_text()
    unlisted = []
    for path in sorted(BENCH.glob("*/*.py")):
        if path.stem in ("__init__", "__main__") or path.parent.name == "fleet":
            continue  # bench/fleet's modules are the parts of its commands
        dotted = f"bench.{path.parent.name}.{path.stem}"
        if dotted not in text and f"`{path.name}`" not in text:
            unlisted.append(dotted)
    assert unlisted == [], f"add to bench/README.md: {unlisted}"


def test_only_shared_pieces_sit_flat_in_bench() -> None:
    flat = {p.stem for p in BENCH.glob("*.py")} - {"__init__"}
    assert flat == SHARED, f"a benchmark belongs in a sub-package by question: {sorted(flat - SHARED)}"
    for name in SHARED:
        assert f"`{name}.py`" in INDEX.read_text() or f"bench.{name}" in INDEX.read_text(), name


def test_moved_modules_resolve_the_repository() -> None:
    assert (conform_power._TIERS_DIR / "lying_tiers.py").is_file()
    assert (rgw.REPO_ROOT / "bench" / "fleet" / "rgw_engine.py").is_file()
