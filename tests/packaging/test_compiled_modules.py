"""The compiled core covers the modules the hot path calls, whichever options are on, and the docs count them.

The compiled modules are declared once, in the package
(``kvprobe.statemachine.compiled_core``), and ``setup.py`` reads that file.  The
build itself is checked by ``test_build_modes.py`` (a wheel) and by
``make test-compiled`` (the suite against a compiled wheel in ``.venv-compiled``, where the last
test here runs rather than skips).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from kvprobe.build_info import build_info
from kvprobe.statemachine.compiled_core import COMPILED_MODULES, is_compiled_module

ROOT = Path(__file__).resolve().parents[2]

#: The modules the core calls per lookup or per chain walk only with an option on.
OPTION_MODULES = {
    "kvprobe.statemachine.inferred": "chain_mode='inferred'",
    "kvprobe.statemachine.verdict_cache": "verdict_cache",
}


def compiled_modules() -> list[str]:
    """The compiled core's modules, as the package declares them (statemachine/compiled_core.py)."""
    return list(COMPILED_MODULES)


def test_setup_reads_the_packages_declaration_and_lists_none_of_its_own() -> None:
    tree = ast.parse((ROOT / "setup.py").read_text())
    literal_lists = [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.List | ast.Tuple)
        and any(isinstance(e, ast.Constant) and str(e.value).startswith("kvprobe.statemachine.") for e in node.elts)
    ]
    assert literal_lists == [], "setup.py lists compiled modules itself: read statemachine/compiled_core.py"
    assert 'statemachine" / "compiled_core.py"' in (ROOT / "setup.py").read_text()


def test_every_declared_module_is_a_module_of_the_package() -> None:
    for name in COMPILED_MODULES:
        assert (ROOT / "statemachine" / f"{name.rpartition('.')[2]}.py").is_file(), name
    assert is_compiled_module("kvprobe.statemachine.core")
    assert not is_compiled_module("kvprobe.statemachine.manager")  # a driver


def runtime_imports(source: Path) -> set[str]:
    """The ``kvprobe.statemachine`` modules ``source`` imports when it runs (not for type checking only)."""
    imported = set()
    for node in ast.parse(source.read_text()).body:
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("kvprobe.statemachine."):
            imported.add(str(node.module))
    return imported


def test_the_modules_the_core_calls_with_an_option_on_are_compiled_with_it() -> None:
    compiled = set(compiled_modules())
    # LookupCore is three layers (probe_table <- handoff <- core), and chain walks the chains.
    hot_path = {f"kvprobe.statemachine.{name}" for name in ("probe_table", "handoff", "core", "chain")}
    assert hot_path <= compiled
    called: set[str] = set()
    for module in hot_path:
        called |= runtime_imports(ROOT / "statemachine" / f"{module.rpartition('.')[2]}.py")
    for module, option in OPTION_MODULES.items():
        assert module in called, f"the core no longer imports {module} ({option}): update OPTION_MODULES"
        assert module in compiled, f"{module} runs on the hot path with {option} but is not in COMPILED_MODULES"


def test_the_docs_count_the_compiled_modules() -> None:
    modules_md = (ROOT / "docs" / "modules.md").read_text()
    # The bullet on `pip install .` only: the page names these modules elsewhere too.
    text = modules_md[modules_md.index("- `pip install .`") : modules_md.index("`pure-Python core`")]
    counts = re.findall(r"compiled core \((\d+) modules, mypyc\)", text)
    assert counts, "docs/modules.md does not show `kvprobe --version`'s compiled line"
    assert set(counts) == {str(len(compiled_modules()))}
    for module in compiled_modules():
        assert f"{module.rpartition('.')[2]}.py`" in text, f"docs/modules.md does not name {module}"


def test_an_in_place_build_holds_every_listed_module() -> None:
    info = build_info()
    if info.kind == "pure":
        pytest.skip("the pure-Python core is loaded: `make test-compiled` runs this against the compiled one")
    assert sorted(info.compiled) == sorted(compiled_modules())
    assert info.describe().startswith(f"compiled core ({len(compiled_modules())} modules, mypyc)")
