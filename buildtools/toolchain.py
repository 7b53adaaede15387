"""Whether this machine can build the compiled core, and which build was asked for.

``KVPROBE_COMPILE`` chooses: ``1`` compiles and fails loudly if it cannot
(asking for the fast build and silently getting the slow one would hide the
difference the build exists for); ``0`` installs pure Python; unset (the
default) compiles when a C compiler that can build against this Python's
headers is present, and otherwise installs pure Python with one line saying
why.  The build backend and setup.py ask the same questions here.
"""

from __future__ import annotations

import os
import shutil
import sysconfig
import tempfile
from pathlib import Path

ENV = "KVPROBE_COMPILE"
#: Set by the build backend while it builds an editable install, which is always pure Python.
EDITABLE_ENV = "KVPROBE_EDITABLE_BUILD"


class BuildModeError(ValueError):
    """``KVPROBE_COMPILE`` holds something other than 0 or 1."""


def requested() -> bool | None:
    """True (must compile), False (must not) or None (compile when possible).

    Raises:
        BuildModeError: the variable is set to anything but ``0``, ``1`` or empty.
    """
    value = os.environ.get(ENV, "").strip()
    if value == "":
        return None
    if value in {"0", "1"}:
        return value == "1"
    raise BuildModeError(
        f"{ENV}={value!r}: use 1 (compiled core), 0 (pure Python) or leave it unset (compiled if possible)"
    )


def missing_compiler() -> str | None:
    """Why no C extension can be built here (one line), or None if one can.

    Compiles a file that includes ``Python.h`` with the compiler this Python
    was built with (``$CC`` overrides it, as distutils does), so a missing
    compiler, a ``CC`` pointing nowhere and missing headers are all caught.
    """
    compiler = (os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc").split()
    if shutil.which(compiler[0]) is None:
        return f"no C compiler ({compiler[0]!r} not found)"
    include = sysconfig.get_paths()["include"]
    if not (Path(include) / "Python.h").is_file():
        return f"no Python headers ({include}/Python.h missing; install python3-dev)"
    import subprocess

    with tempfile.TemporaryDirectory() as tmp:
        source = Path(tmp) / "probe.c"
        source.write_text("#include <Python.h>\nint kvprobe_probe(void) { return Py_IsInitialized(); }\n")
        command = [*compiler, "-c", str(source), "-I", include, "-o", str(Path(tmp) / "probe.o")]
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=60)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return f"the C compiler {compiler[0]!r} did not run ({exc})"
    if done.returncode != 0:
        first = (done.stderr.strip().splitlines() or ["no message"])[0]
        return f"the C compiler {compiler[0]!r} cannot build against Python.h ({first})"
    return None


def will_compile() -> bool:
    """Whether this build compiles the core (see the module docstring).

    Raises:
        BuildModeError: bad ``KVPROBE_COMPILE``, or it is 1 and no compiler works.
    """
    wanted = requested()
    if os.environ.get(EDITABLE_ENV) == "1":
        if wanted:
            raise BuildModeError(
                f"{ENV}=1 asks for the compiled core, but an editable install is pure Python "
                "(its compiled modules would shadow edits): build a wheel, `pip install .`"
            )
        return False
    if wanted is False:
        return False
    why = missing_compiler()
    if why is None:
        return True
    if wanted:
        raise BuildModeError(f"{ENV}=1 asks for the compiled core, but {why}")
    print(f"kvprobe: installing the pure-Python core: {why} (set {ENV}=0 to silence this)")
    return False
