"""Build hook for the compiled core; everything else is in pyproject.toml.

``pip install .`` compiles the scheduler core (the hot-path modules of
``kvprobe.statemachine`` that ``statemachine/compiled_core.py`` lists) with
mypyc, from the same typed source, whenever a C compiler can build against
this Python (buildtools/toolchain.py decides; ``KVPROBE_COMPILE=0`` asks for
pure Python, ``KVPROBE_COMPILE=1`` insists on the compiled build and fails
loudly without a compiler).  The compiled modules take precedence over the
``.py`` files installed beside them; ``kvprobe --version`` and
``kvprobe.build_info()`` tell which build is loaded.
"""

from __future__ import annotations

import hashlib
import runpy
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

sys.path.insert(0, str(Path(__file__).resolve().parent))
from buildtools.layout import stage
from buildtools.toolchain import requested, will_compile

# The modules on the scheduler's hot path, by import name: declared once, in
# the package (statemachine/compiled_core.py), read here as a plain file.
COMPILED_MODULES = list(
    runpy.run_path(str(Path(__file__).resolve().parent / "statemachine" / "compiled_core.py"))["COMPILED_MODULES"]
)


def ext_modules() -> list[Extension]:
    if not will_compile():
        return []
    from mypyc.build import mypycify

    # mypyc names a module after its folders: it compiles a copy of the
    # package staged under the names the modules import each other by.  Each
    # staged copy records the digest of the source it was compiled from, so
    # that a compiled module older than its .py is reported, not trusted.
    staged = stage(Path("build") / "mypyc-src")
    paths = []
    for name in COMPILED_MODULES:
        path = staged.joinpath(*name.split(".")).with_suffix(".py")
        source = path.read_bytes()
        digest = hashlib.sha256(source).hexdigest()
        path.write_bytes(source + f'\nCOMPILED_FROM_SHA256 = "{digest}"\n'.encode())
        paths.append(str(path))
    # The group's shared runtime library goes inside the package (a dotted
    # group name): at the top level it is importable only from the checkout's
    # root, and a script run from elsewhere (examples/) failed to import it.
    return list(mypycify(paths, opt_level="3", group_name="kvprobe.statemachine._compiled"))


class BuildCompiledCore(build_ext):
    """build_ext that, unless the compiled core was insisted on, falls back to pure Python.

    A compiler that passed the probe can still fail on the generated C (an
    old compiler, a broken toolchain); then the install goes on without the
    extensions, saying so in one line, rather than failing a user's install.
    """

    def run(self) -> None:
        try:
            super().run()
        except Exception as exc:
            if requested():
                raise
            for ext in self.extensions:
                Path(self.get_ext_fullpath(ext.name)).unlink(missing_ok=True)
            self.extensions = []
            print(f"kvprobe: the compiled core did not build ({exc}); installing the pure-Python core")


setup(ext_modules=ext_modules(), cmdclass={"build_ext": BuildCompiledCore})
