"""TLC's classes kept in a shared archive (Java's AppCDS), so that each TLC run starts sooner.

A JVM spends most of a small TLC run loading and verifying TLC's classes:
about 1.1 CPU s for a run of a few states, 0.7 with the classes mapped from
an archive (Java 17, AMD EPYC, 2026-12-07).  The test suite starts TLC a few
hundred times, so :func:`run_tlc <kvprobe.tlc.run_tlc>` asks for one.

The first run without an archive writes one at its exit
(``-XX:ArchiveClassesAtExit``) into a file of its own, moved into place
once the run has ended, so concurrent first runs never map a half-written
file; later runs map it (``-XX:SharedArchiveFile``).  The archive's name
holds the java and jar paths and times and the jar's size (the JVM
checks the jar): a reinstalled jar or another java gets an archive of its
own.  A
JVM that cannot use an archive runs without it, silently (its ``cds``
warnings are turned off: TLC's output is read message by message), so the
archive changes how fast TLC starts, never what it reports.
``KVPROBE_TLC_CLASS_ARCHIVE=0`` turns it off; ``KVPROBE_CACHE_DIR`` moves it
(default ``$XDG_CACHE_HOME/kvprobe`` or ``~/.cache/kvprobe``).
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

__all__ = ["ClassArchive", "class_archive"]

#: The JVM's own warnings about an archive it cannot use (for example one a
#: different java wrote): quiet, because the run goes on without it.
QUIET_CDS = ["-Xlog:cds=off", "-Xlog:cds+dynamic=off"]


@dataclass(frozen=True)
class ClassArchive:
    """Where the archive of TLC's classes is (or will be), and the Java options of one run."""

    path: Path
    #: The file a run without an archive writes at its exit; ``None`` when the archive exists.
    dump_to: Path | None

    def java_options(self) -> list[str]:
        """The options that map the archive, or write it at the run's exit."""
        if self.dump_to is None:
            return [f"-XX:SharedArchiveFile={self.path}", *QUIET_CDS]
        return [f"-XX:ArchiveClassesAtExit={self.dump_to}", *QUIET_CDS]

    def keep(self) -> None:
        """After the run: move a written archive into place (no error if none was written)."""
        if self.dump_to is None:
            return
        try:
            if self.dump_to.stat().st_size > 0:
                os.replace(self.dump_to, self.path)
        except OSError:
            pass  # none written (Java refused): the next run tries again
        finally:
            self.dump_to.unlink(missing_ok=True)


def cache_dir() -> Path:
    """kvprobe's cache folder: ``KVPROBE_CACHE_DIR``, else ``$XDG_CACHE_HOME/kvprobe`` or ``~/.cache/kvprobe``."""
    if explicit := os.environ.get("KVPROBE_CACHE_DIR"):
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "kvprobe"


def class_archive(java: str, jar: Path) -> ClassArchive | None:
    """The archive of TLC's classes for this ``java`` and ``jar``, or ``None`` (turned off, or no cache folder).

    Never raises: a folder that cannot be made means runs without an archive.
    """
    if os.environ.get("KVPROBE_TLC_CLASS_ARCHIVE", "1") == "0":
        return None
    java_path = Path(java).resolve()
    jar_stat = jar.stat()
    # A JDK upgraded in place rewrites its launcher: a new time, a new archive.
    java_stamp = f"{java_path}\0{java_path.stat().st_mtime_ns}"
    identity = f"{java_stamp}\0{jar.resolve()}\0{jar_stat.st_size}\0{jar_stat.st_mtime_ns}"
    name = f"tlc-classes-{hashlib.sha256(identity.encode()).hexdigest()[:16]}.jsa"
    folder = cache_dir()
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError:
        return None
    path = folder / name
    if path.is_file():
        return ClassArchive(path, None)
    return ClassArchive(path, folder / f"{name}.{os.getpid()}.{os.urandom(4).hex()}.tmp")
