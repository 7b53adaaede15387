"""TLC's state printer without its layout pass, for state-graph dumps: the same graph at a sixth of the CPU.

TLC writes every state of a ``-dump dot`` graph through its pretty printer
(``tlc2.pprint.PrettyPrint``), which parses each value's text again and
breaks it into lines 80 characters wide.  On default.cfg's full graph
(210,981 states, 1.4 million edges) that layout is most of the run: 410 CPU
s with it, 69 without (one worker, Java 17, AMD EPYC, 2026-12-07).  It
changes whitespace only: both dumps, read back by
:func:`kvprobe.tlc_values.read_state_graph`, give the same states and edges.

:func:`plain_printer` compiles a class of that name whose methods return
the text unchanged (``javac``, once per JDK, into kvprobe's cache folder,
:func:`kvprobe.tlc_classes.cache_dir`) and returns the folder to put before
TLC's jar on the classpath.  :func:`run_tlc <kvprobe.tlc.run_tlc>` does so
only when asked (``plain_values=True``): a counterexample a person reads
keeps TLC's layout.  Without a ``javac`` the run keeps TLC's printer, and
is only slower.  ``KVPROBE_TLC_PLAIN_PRINTER=0`` turns it off.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from kvprobe.tlc_classes import cache_dir

__all__ = ["PRINTER_SOURCE", "plain_printer"]

#: The class that shadows TLC 2.15's ``tlc2.pprint.PrettyPrint`` (the same two public methods).
PRINTER_SOURCE = """\
package tlc2.pprint;

/** TLC's value printer without its layout: the text as TLC built it (kvprobe's graph dumps). */
public final class PrettyPrint {
    private PrettyPrint() {}

    public static String mypp(String value, int width) {
        return value;
    }

    public static String mypp(String value, int width, String padding) {
        return value;
    }
}
"""


def _javac(java: str) -> str | None:
    """The ``javac`` beside ``java`` (the same JDK), else the one on ``PATH``; ``None`` if there is none."""
    beside = Path(java).resolve().parent / "javac"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    return shutil.which("javac")


def plain_printer(java: str) -> Path | None:
    """The classpath folder holding the plain printer, compiled for ``java``'s JDK; ``None`` when unavailable.

    Unavailable: turned off (``KVPROBE_TLC_PLAIN_PRINTER=0``), no ``javac``,
    a compile that fails, or a cache folder that cannot be written.  Never
    raises for those: the caller then runs TLC with its own printer.
    """
    if os.environ.get("KVPROBE_TLC_PLAIN_PRINTER", "1") == "0":
        return None
    javac = _javac(java)
    if javac is None:
        return None
    compiler = Path(javac).resolve()
    # Another JDK, or one upgraded in place, compiles a class of its own.
    identity = f"{PRINTER_SOURCE}\0{compiler}\0{compiler.stat().st_mtime_ns}"
    folder = cache_dir() / f"tlc-plain-printer-{hashlib.sha256(identity.encode()).hexdigest()[:16]}"
    if (folder / "tlc2" / "pprint" / "PrettyPrint.class").is_file():
        return folder
    try:
        cache_dir().mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix="tlc-plain-printer-", dir=cache_dir()) as tmp:
            source = Path(tmp) / "src" / "PrettyPrint.java"
            source.parent.mkdir()
            source.write_text(PRINTER_SOURCE)
            built = Path(tmp) / "classes"
            done = subprocess.run(
                [javac, "-nowarn", "-d", str(built), str(source)], capture_output=True, text=True, timeout=120
            )
            if done.returncode != 0:
                return None
            # Into place whole: a concurrent first run sees no half-written folder.
            try:
                os.replace(built, folder)
            except OSError:
                if not folder.is_dir():  # another run's folder won the race: use it
                    return None
    except (OSError, subprocess.SubprocessError):
        return None
    return folder
