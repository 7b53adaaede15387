"""One real path per module: the checkout holds no links, and the tools' view of the package is setuptools'."""

from __future__ import annotations

import importlib
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from buildtools.layout import package_dirs, source_modules, stage  # noqa: E402

#: Modules that import vLLM (kvprobe's own tiers for it): imported here only where vLLM is.
VLLM_TIER_MODULES = {"kvprobe.integrations.vllm.tiers.fs", "kvprobe.integrations.vllm.tiers.obj"}


def test_the_checkout_holds_no_symlinks() -> None:
    staged = subprocess.run(["git", "ls-files", "-s"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert [line for line in staged.splitlines() if line.startswith("120000")] == []


def test_each_module_the_tools_see_is_the_file_python_imports() -> None:
    import kvprobe

    if not Path(kvprobe.__file__ or "").resolve().is_relative_to(ROOT / "src"):
        # make test-compiled runs from a venv with a wheel installed: its modules are copies,
        # checked by test_install_modes.py.
        pytest.skip("kvprobe is installed from a wheel, not linked to this checkout")
    modules = source_modules()
    assert {"kvprobe.spec.lifecycle", "kvprobe.statemachine.core", "kvprobe.backends.fs", "kvprobe.cli"} <= {
        m.name for m in modules
    }
    for module in modules:
        if module.name.startswith("kvprobe.backends.nixl"):
            continue  # needs the nixl extra; its path is checked through the package below
        if module.name in VLLM_TIER_MODULES and importlib.util.find_spec("vllm") is None:
            continue  # subclass vLLM's tiers; tests/vllm_release/run.sh imports them in vLLM's venv
        loaded = importlib.import_module(module.name)
        assert Path(loaded.__file__ or "").resolve() == module.path.resolve()
    assert package_dirs()["kvprobe.backends"] == ROOT / "backends"


def test_the_staged_tree_spells_the_import_names(tmp_path: Path) -> None:
    staged = stage(tmp_path)
    assert (staged / "kvprobe" / "spec" / "lifecycle.py").read_bytes() == (ROOT / "spec" / "lifecycle.py").read_bytes()
    assert (staged / "kvprobe" / "tla" / "KVProbe.tla").is_file()
    assert not any(path.is_symlink() for path in staged.rglob("*"))


def test_kvprobe_version_says_which_core_is_loaded() -> None:
    from kvprobe.build_info import build_info
    from kvprobe.statemachine.core import COMPILED

    info = build_info()
    assert info.kind == ("compiled" if COMPILED else "pure")
    assert ("kvprobe.statemachine.core" in info.compiled) is COMPILED
    assert info.stale == ()
    done = subprocess.run(
        [sys.executable, "-m", "kvprobe.cli", "--version"], capture_output=True, text=True, check=True
    )
    assert done.stdout.strip().endswith(f"({info.describe()})")
    assert info.describe().startswith("compiled core" if COMPILED else "pure-Python core")


def test_the_public_names_resolve_and_the_type_checkers_list_is_the_same() -> None:
    import ast

    import kvprobe

    names = set(kvprobe.__all__) - {"__version__"}
    tree = ast.parse((ROOT / "src" / "kvprobe" / "__init__.py").read_text())
    typed = {
        alias.asname
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("kvprobe.")
        for alias in node.names
    }
    assert typed == names
    for name in sorted(names):
        if name.startswith("Nixl") or name in {"BucketNotFoundError", "ObjStoreUnavailableError"}:
            continue  # need the nixl extra to import
        value = getattr(kvprobe, name)
        assert value is getattr(importlib.import_module(kvprobe._EXPORTS[name]), name)
