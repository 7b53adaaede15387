"""A filesystem tier: one file per block under a root directory.

``FsBackend`` answers lookups with a pure-Python ``os.stat`` loop (a stat
costs about 1-2 µs on a local filesystem, plus a few µs of Python per key,
and the loop holds the GIL while it runs;
:class:`~kvprobe.backends.nixl_posix.NixlPosixBackend` stats in C++ instead).
The file layout is :func:`kvprobe.backends.layout.relative_name`, shared with
the NIXL backends.

The writers (``store``/``remove``) exist so tests, demos and the conformance
kit can set the ground truth; ``store`` writes atomically (temporary file in
the same directory, then ``os.replace``) so a concurrent lookup never sees a
half-written block as a different verdict than the final one.
"""

from __future__ import annotations

import os
import stat
import tempfile
from collections.abc import Sequence

from kvprobe.backends.base import Key
from kvprobe.backends.layout import relative_name

__all__ = ["FileTree", "FsBackend", "file_root", "remove_file", "store_file"]

# A missing path or a missing shard directory: the block is simply not there.
_ABSENT_ERRNOS = (FileNotFoundError, NotADirectoryError)


def file_root(root: str | os.PathLike[str]) -> str:
    """``root`` as an absolute path with symlinks resolved.

    Raises:
        TypeError: ``root`` is not a string or path.
        ValueError: ``root`` is empty.
        NotADirectoryError: ``root`` exists and is not a directory.
    """
    if not isinstance(root, (str, os.PathLike)):
        raise TypeError(f"root must be a str or os.PathLike, got {type(root).__name__}")
    raw = os.fspath(root)
    if not raw:
        # realpath("") is the current directory: a tier must be named, never implied.
        raise ValueError("root must name a directory, got an empty path")
    resolved = os.path.realpath(raw)
    if os.path.exists(resolved) and not os.path.isdir(resolved):
        raise NotADirectoryError(f"root {resolved!r} is not a directory")
    return resolved


def store_file(path: str, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically, creating parent directories.

    Raises:
        TypeError: ``data`` is not bytes-like.
        OSError: the directory or file cannot be written; no partial block is
            left at ``path`` (a temporary file is removed on failure).
    """
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise TypeError(f"data must be bytes, got {type(data).__name__}")
    directory = os.path.dirname(path)
    os.makedirs(directory, exist_ok=True)
    # The temporary name starts with "." so it can never equal a block name
    # (layout names are hex, "empty" or "sha256-...").
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".tmp-")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def remove_file(path: str) -> None:
    """Delete the file at ``path``; no error if it is already gone.

    Empty shard directories are left in place: removing them would race with
    a concurrent ``store`` into the same shard.

    Raises:
        OSError: the file exists but cannot be removed.
    """
    try:
        os.unlink(path)
    except _ABSENT_ERRNOS:
        pass


class FileTree:
    """One file per block under ``root``: the layout and writers both file tiers share.

    Args:
        root: the tier's directory.  It need not exist yet (``store`` creates
            what it needs; lookups in a missing root answer False).

    Raises:
        TypeError: ``root`` is not a string or path.
        NotADirectoryError: ``root`` exists and is not a directory.
    """

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = file_root(root)
        # Plain concatenation: os.path.join costs more than the stat on a hot loop.
        self._base = self.root if self.root.endswith(os.sep) else self.root + os.sep

    def locate(self, key: Key) -> str:
        """The absolute path of ``key``'s block file; always inside ``root``.

        Raises:
            TypeError: ``key`` is not ``bytes``.
        """
        return self._base + relative_name(key)

    def store(self, key: Key, data: bytes = b"") -> None:
        """Write ``key``'s block atomically (see :func:`store_file`).

        Raises:
            TypeError: ``key`` or ``data`` is not bytes.
            OSError: the file could not be written; nothing is left at its path.
        """
        store_file(self.locate(key), data)

    def remove(self, key: Key) -> None:
        """Delete ``key``'s block; no error if it is not stored.

        Raises:
            TypeError: ``key`` is not ``bytes``.
            OSError: the file exists but cannot be removed.
        """
        remove_file(self.locate(key))


class FsBackend(FileTree):
    """Blocks as files under ``root``; lookups are a Python ``os.stat`` loop.

    A key is stored when a *regular file* exists at ``locate(key)`` (a
    directory there does not count; NIXL POSIX applies the same rule).
    Construction takes ``root`` and raises as :class:`FileTree` does.
    """

    def batch_lookup(self, keys: Sequence[Key], req_context: object) -> list[bool]:
        """One verdict per key, in order: True iff a regular file is at ``locate(key)``.

        Raises:
            TypeError: a key is not ``bytes`` (checked for all keys before any
                stat).
            OSError: a stat failed for another reason than a missing path
                (e.g. permission denied, I/O error); the manager turns this
                into MISS for the whole group.
        """
        del req_context
        paths = [self.locate(k) for k in keys]
        verdicts: list[bool] = []
        append = verdicts.append
        for path in paths:
            try:
                mode = os.stat(path).st_mode
            except _ABSENT_ERRNOS:
                append(False)
            else:
                append(stat.S_ISREG(mode))
        return verdicts

    def close(self) -> None:
        """Nothing to release; present so every real backend can be closed alike."""

    def __enter__(self) -> FsBackend:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"FsBackend({self.root!r})"
