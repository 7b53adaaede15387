"""The PEP 517 build backend: setuptools, plus mypy when the core is compiled.

``pip install .`` compiles the scheduler core with mypyc whenever a C
compiler is present (see ``toolchain.py`` and ``setup.py``); mypyc ships
with mypy, so only then does the build environment need it.  Every other
hook is setuptools' own.
"""

from __future__ import annotations

import sys
from pathlib import Path

from setuptools import build_meta as _setuptools
from setuptools.build_meta import (
    build_editable,
    build_sdist,
    build_wheel,
    get_requires_for_build_sdist,
    prepare_metadata_for_build_editable,
    prepare_metadata_for_build_wheel,
)

__all__ = [
    "build_editable",
    "build_sdist",
    "build_wheel",
    "get_requires_for_build_editable",
    "get_requires_for_build_sdist",
    "get_requires_for_build_wheel",
    "prepare_metadata_for_build_editable",
    "prepare_metadata_for_build_wheel",
]

# The mypy whose mypyc built and tested the compiled core.
MYPYC = "mypy>=1.10"


# pip puts this folder, not the checkout, on sys.path.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from buildtools.toolchain import will_compile  # noqa: E402


def _compiling() -> bool:
    return will_compile()


# When compiling, setuptools' own hook cannot be asked: it runs setup.py,
# which imports mypyc, before mypy is installed.  kvprobe declares no
# setup_requires, so setuptools would add nothing.


def get_requires_for_build_wheel(config_settings: dict[str, str | list[str]] | None = None) -> list[str]:
    """setuptools' requirements, plus mypy when the core is compiled."""
    return [MYPYC] if _compiling() else _setuptools.get_requires_for_build_wheel(config_settings)


def get_requires_for_build_editable(config_settings: dict[str, str | list[str]] | None = None) -> list[str]:
    """setuptools' requirements, plus mypy when the core is compiled."""
    return [MYPYC] if _compiling() else _setuptools.get_requires_for_build_editable(config_settings)
