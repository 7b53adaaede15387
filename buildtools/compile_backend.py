"""The PEP 517 build backend: setuptools, plus mypy when the core is compiled.

``pip install .`` compiles the scheduler core with mypyc whenever a C
compiler is present (see ``toolchain.py`` and ``setup.py``); mypyc ships
with mypy, so only then does the build environment need it.

An editable install (``pip install -e .``) is always pure Python, and made
of links: a compiled module built into the checkout would shadow the ``.py``
beside it, so an edit would silently not be what runs.  setuptools' default
editable install finds a package-dir mapping like ours through an import
hook that mypy cannot follow; its ``strict`` mode instead lays a tree of
links under ``build/`` and puts that tree on ``sys.path``, which mypy
resolves (tests/packaging/test_install_modes.py).  A module added or removed needs the install again
(``make`` does it when a package folder changes).  Every other hook is
setuptools' own.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from setuptools import build_meta as _setuptools
from setuptools.build_meta import (
    build_sdist,
    build_wheel,
    get_requires_for_build_sdist,
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
from buildtools.toolchain import EDITABLE_ENV, will_compile  # noqa: E402


def _compiling() -> bool:
    return will_compile()


Settings = dict[str, str | list[str]]


@contextmanager
def _editable(config_settings: Settings | None) -> Iterator[Settings]:
    """While setup.py runs for an editable install: no compiling, and ``strict`` mode unless another is asked for."""
    settings = dict(config_settings or {})
    if "editable_mode" not in settings and "editable-mode" not in settings:
        settings["editable_mode"] = "strict"
    os.environ[EDITABLE_ENV] = "1"
    try:
        yield settings
    finally:
        os.environ.pop(EDITABLE_ENV, None)


def build_editable(
    wheel_directory: str, config_settings: Settings | None = None, metadata_directory: str | None = None
) -> str:
    """setuptools' editable wheel: pure Python, a tree of links (see the module docstring)."""
    with _editable(config_settings) as settings:
        return _setuptools.build_editable(wheel_directory, settings, metadata_directory)


def prepare_metadata_for_build_editable(metadata_directory: str, config_settings: Settings | None = None) -> str:
    """setuptools' metadata for the editable wheel (setup.py runs, so it must know the install is editable)."""
    with _editable(config_settings) as settings:
        return _setuptools.prepare_metadata_for_build_editable(metadata_directory, settings)


# When compiling, setuptools' own hook cannot be asked: it runs setup.py,
# which imports mypyc, before mypy is installed.  kvprobe declares no
# setup_requires, so setuptools would add nothing.


def get_requires_for_build_wheel(config_settings: dict[str, str | list[str]] | None = None) -> list[str]:
    """setuptools' requirements, plus mypy when the core is compiled."""
    return [MYPYC] if _compiling() else _setuptools.get_requires_for_build_wheel(config_settings)


def get_requires_for_build_editable(config_settings: dict[str, str | list[str]] | None = None) -> list[str]:
    """setuptools' requirements (an editable install is never compiled)."""
    with _editable(config_settings) as settings:
        return _setuptools.get_requires_for_build_editable(settings)
