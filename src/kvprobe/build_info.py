"""Which build of the scheduler core is loaded: compiled (mypyc) or pure Python.

``pip install .`` compiles the hot-path modules of ``kvprobe.statemachine``
when it can (see docs/performance.md); the compiled module is then imported
in place of the ``.py`` beside it.  Each compiled module records the digest
of the source it was built from, so a compiled module whose ``.py`` beside it
differs (one left in a source tree by an older checkout's in-place build, or
an edit to an installed copy) is reported as stale instead of being silently
run in its old form.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.machinery
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

__all__ = ["BuildInfo", "build_info"]

_PACKAGE = "kvprobe.statemachine"


@dataclass(frozen=True)
class BuildInfo:
    """The loaded core's build.

    Attributes:
        kind: ``"compiled"`` if any module of the core is a mypyc extension.
        compiled: the dotted names of the compiled modules.
        stale: those whose ``.py`` beside them differs from the source they
            were compiled from (an edit after an in-place build).
    """

    kind: Literal["compiled", "pure"]
    compiled: tuple[str, ...]
    stale: tuple[str, ...]

    def describe(self) -> str:
        """One line for ``kvprobe --version`` and logs."""
        if self.kind == "pure":
            return "pure-Python core"
        line = f"compiled core ({len(self.compiled)} modules, mypyc)"
        if self.stale:
            line += f"; STALE: {', '.join(self.stale)} changed since the build (reinstall: make compiled)"
        return line


def build_info() -> BuildInfo:
    """Inspect the installed ``kvprobe.statemachine`` modules (imports them)."""
    package = importlib.import_module(_PACKAGE)
    compiled: list[str] = []
    stale: list[str] = []
    for folder in map(Path, package.__path__):
        for path in sorted(folder.iterdir()):
            suffix = next((s for s in importlib.machinery.EXTENSION_SUFFIXES if path.name.endswith(s)), None)
            if suffix is None or "__mypyc" in path.name:
                continue
            name = f"{_PACKAGE}.{path.name[: -len(suffix)]}"
            digest = getattr(importlib.import_module(name), "COMPILED_FROM_SHA256", None)
            if not isinstance(digest, str):
                continue
            compiled.append(name)
            source = path.with_name(name.rpartition(".")[2] + ".py")
            if source.is_file() and hashlib.sha256(source.read_bytes()).hexdigest() != digest:
                stale.append(name)
    return BuildInfo("compiled" if compiled else "pure", tuple(compiled), tuple(stale))
