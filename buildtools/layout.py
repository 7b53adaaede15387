"""The package's layout: which folder of the checkout is which ``kvprobe`` package.

The repository keeps ``spec/``, ``statemachine/``, ``backends/`` and ``tla/`` at
its top level while their import names are ``kvprobe.spec`` and so on.
setuptools maps them with the ``[tool.setuptools.package-dir]`` table of
``pyproject.toml``; that table is the one declaration, and this module reads
it for the tools that know nothing of setuptools' mapping: mypy (which names
a module after its folder) and mypyc (which compiles a staged copy).
"""

from __future__ import annotations

import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # mypy, and so mypyc, depend on tomli before Python 3.11
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent


class LayoutError(Exception):
    """pyproject.toml's package-dir table does not describe the checkout."""


@dataclass(frozen=True)
class SourceModule:
    """One module of the package: its dotted name and its one real path."""

    name: str
    path: Path


def package_dirs(root: Path = ROOT) -> dict[str, Path]:
    """Each package of ``[tool.setuptools] packages`` and the folder it lives in.

    A package without an entry in the package-dir table lives in the folder
    its dotted name spells, below its nearest mapped parent (as setuptools
    resolves it).

    Raises:
        LayoutError: pyproject.toml lacks the tables, or a folder is missing.
    """
    config = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))
    try:
        table = config["tool"]["setuptools"]
        packages: list[str] = table["packages"]
        mapping: dict[str, str] = table["package-dir"]
    except KeyError as exc:
        raise LayoutError(f"pyproject.toml has no [tool.setuptools] {exc} entry") from exc
    folders: dict[str, Path] = {}
    for package in packages:
        parts = package.split(".")
        for cut in range(len(parts), 0, -1):
            base = ".".join(parts[:cut])
            if base in mapping:
                folders[package] = root.joinpath(mapping[base], *parts[cut:])
                break
        else:
            folders[package] = root.joinpath(*parts)
        if not folders[package].is_dir():
            raise LayoutError(f"package {package} maps to {folders[package]}, which is not a folder")
    return folders


def source_modules(root: Path = ROOT) -> list[SourceModule]:
    """Every Python module of the package, under its dotted name, sorted."""
    modules = []
    for package, folder in package_dirs(root).items():
        for path in sorted(folder.glob("*.py")):
            name = package if path.stem == "__init__" else f"{package}.{path.stem}"
            modules.append(SourceModule(name, path))
    return sorted(modules, key=lambda module: module.name)


def stage(dest: Path, root: Path = ROOT) -> Path:
    """Copy the package into ``dest`` as the tree its import names spell.

    mypyc names a module after its folders, so it compiles this copy
    (``dest/kvprobe/statemachine/core.py``); copies rather than links, so
    that the staged tree is the same on every platform.  Only files whose
    content changed are rewritten, which keeps mypy's incremental cache warm.

    Returns:
        ``dest``, which then holds ``kvprobe/...``.
    """
    for package, folder in package_dirs(root).items():
        target = dest.joinpath(*package.split("."))
        target.mkdir(parents=True, exist_ok=True)
        for path in folder.iterdir():
            if path.is_file() and path.suffix in {".py", ".typed", ""} | {".tla", ".cfg"}:
                copy = target / path.name
                if not copy.exists() or copy.read_bytes() != path.read_bytes():
                    shutil.copy2(path, copy)
    return dest
