"""Build hook for the optional compiled core; everything else is in pyproject.toml.

``pip install .`` (the default) installs pure Python.  ``KVPROBE_COMPILE=1
pip install .`` also compiles the scheduler core (``kvprobe.statemachine.core``
and ``.records``) with mypyc, from the same typed source; the compiled
modules take precedence over the ``.py`` files installed beside them, and
``kvprobe.statemachine.core.COMPILED`` tells which build is loaded.  It needs
a C compiler and the Python headers, and fails loudly without them: asking
for the compiled build and silently getting the pure one would hide the
difference the build exists for.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from setuptools import Extension, setup

# The modules on the scheduler's hot path, by import name.
COMPILED_MODULES = ["kvprobe.statemachine.core", "kvprobe.statemachine.records"]


def ext_modules() -> list[Extension]:
    if os.environ.get("KVPROBE_COMPILE") != "1":
        return []
    from mypyc.build import mypycify

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from buildtools.layout import stage

    # mypyc names a module after its folders: it compiles a copy of the
    # package staged under the names the modules import each other by.
    staged = stage(Path("build") / "mypyc-src")
    paths = [str(staged.joinpath(*name.split(".")).with_suffix(".py")) for name in COMPILED_MODULES]
    # The group's shared runtime library goes inside the package (a dotted
    # group name): at the top level it is importable only from the checkout's
    # root, and a script run from elsewhere (examples/) failed to import it.
    return list(mypycify(paths, opt_level="3", group_name="kvprobe.statemachine._compiled"))


setup(ext_modules=ext_modules())
