"""docs/modules.md's layers hold: every import of every module is one its folder may make.

The rules are read from the doc's table, so the doc and the code cannot
drift apart silently; the doc's list of known exceptions must be exactly the
imports that break them.
"""

from __future__ import annotations

import ast
import os
import re
from pathlib import Path

from doc_facts import ROOT

DOC = (ROOT / "docs" / "modules.md").read_text()

#: Checkout folder -> the import name its modules install under.
PACKAGES = {
    "spec": "kvprobe.spec",
    "statemachine": "kvprobe.statemachine",
    "backends": "kvprobe.backends",
    "src/kvprobe": "kvprobe",
    "bench": "bench",
}

#: What the pure core must not reach: the drivers, the backends, and anything doing I/O or threads.
CORE = "kvprobe.statemachine.core"
NOT_IN_CORE = ("kvprobe.backends", "kvprobe.statemachine.manager", "kvprobe.statemachine.workers")
NOT_IN_CORE += ("kvprobe.statemachine.trace", "kvprobe.statemachine.cpu_gate")
IO_MODULES = {"threading", "os", "time", "socket", "subprocess", "multiprocessing", "asyncio", "concurrent"}


def modules() -> dict[str, Path]:
    """Import name -> file, for every module of the checkout's real folders (links are not followed)."""
    found = {}
    for folder, package in PACKAGES.items():
        for dirpath, dirnames, filenames in os.walk(ROOT / folder):
            dirnames[:] = [d for d in dirnames if not (Path(dirpath) / d).is_symlink() and d != "__pycache__"]
            for name in filenames:
                if name.endswith(".py"):
                    parts = (Path(dirpath) / name).relative_to(ROOT / folder).with_suffix("").parts
                    dotted = ".".join((package, *parts)).removesuffix(".__init__")
                    found[dotted] = Path(dirpath) / name
    return found


def imports(module: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The modules ``module`` imports (any depth of the file, relative imports resolved)."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{anchor}.{base}".rstrip(".")
            found.add(base)
            # `from pkg import sub` imports the submodule pkg.sub too.
            found |= {f"{base}.{alias.name}" for alias in node.names if f"{base}.{alias.name}" in known}
    return found


def rules() -> dict[str, tuple[set[str], bool]]:
    """Folder -> (import names it may use, whether it may import the root package), from the doc's table."""
    table = {}
    for line in DOC.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[0].startswith("`") and cells[0] != "`folder`":
            folder = re.findall(r"`([^`]+)`", cells[0])[0].rstrip("/")
            allowed = {name for name in re.findall(r"`([^`]+)`", cells[2]) if name.split(".")[0] in PACKAGES.values()}
            table[folder] = (allowed, "root package" in cells[2])
    return table


def folder_of(path: Path, table: dict[str, tuple[set[str], bool]]) -> str:
    relative = path.relative_to(ROOT).as_posix()
    return max((f for f in table if relative.startswith(f + "/")), key=len)


def test_the_table_covers_every_folder_with_code() -> None:
    table = rules()
    assert set(PACKAGES) <= set(table)
    assert {"src/kvprobe/testing", "src/kvprobe/integrations"} <= set(table)
    for path in modules().values():
        folder_of(path, table)  # raises ValueError for a module no row covers


def violations() -> set[tuple[str, str]]:
    """(file, imported module) for every import of kvprobe or bench a module's folder may not make."""
    table, known = rules(), modules()
    found = set()
    for module, path in known.items():
        allowed, root = table[folder_of(path, table)]
        for imported in imports(module, path, known):
            if imported.split(".")[0] not in ("kvprobe", "bench"):
                continue
            if imported == "kvprobe" and root:
                continue
            if not any(imported == name or imported.startswith(name + ".") for name in allowed):
                found.add((path.relative_to(ROOT).as_posix(), imported))
            elif is_private_to_another_package(module, imported):
                found.add((path.relative_to(ROOT).as_posix(), imported))
    return found


def is_private_to_another_package(module: str, imported: str) -> bool:
    """Whether ``imported`` is a ``_``-prefixed module of a package ``module`` is not part of."""
    parts = imported.split(".")
    for depth, part in enumerate(parts):
        if part.startswith("_") and not part.startswith("__"):
            owner = ".".join(parts[:depth])
            return not module.startswith(owner + ".")
    return False


def test_imports_follow_the_layers() -> None:
    documented = set(re.findall(r"^- `([^`]+)` imports `([^`]+)`", DOC, flags=re.M))
    assert violations() == documented


def test_the_pure_core_reaches_no_driver_backend_or_io() -> None:
    known = modules()
    seen, todo = set(), [CORE]
    while todo:
        module = todo.pop()
        if module in seen or module not in known:
            continue
        seen.add(module)
        todo += sorted(imports(module, known[module], known))
    reached = {m for m in seen if m.startswith("kvprobe")}
    assert CORE in reached
    assert not [m for m in reached if m.startswith(NOT_IN_CORE)], reached
    for module in reached:
        io = {m for m in imports(module, known[module], known) if m.split(".")[0] in IO_MODULES}
        assert not io, f"{module} imports {io}"


def test_a_private_module_is_private_to_its_own_package() -> None:
    # A `_` module is free to change under its own package; another one importing it breaks that.
    assert is_private_to_another_package("kvprobe.statemachine.cpu_gate", "kvprobe.backends._host_pace")
    assert is_private_to_another_package("bench.fleet.engine", "kvprobe.backends._pacing")
    assert not is_private_to_another_package("kvprobe.backends.process", "kvprobe.backends._pacing")
    assert not is_private_to_another_package("kvprobe.statemachine.core", "kvprobe.backends.timeouts")


def test_the_checker_sees_an_import_across_the_layers(tmp_path: Path) -> None:
    # The resolver must see absolute, relative and from-package imports, or the layer test checks nothing.
    known = {"kvprobe.spec.model": tmp_path / "model.py", "kvprobe.statemachine.core": tmp_path / "core.py"}
    source = tmp_path / "model.py"
    source.write_text("from ..statemachine import core\nimport kvprobe.backends.fs\nfrom . import lifecycle\n")
    assert imports("kvprobe.spec.model", source, known) == {
        "kvprobe.statemachine",
        "kvprobe.statemachine.core",
        "kvprobe.backends.fs",
        "kvprobe.spec",
    }
