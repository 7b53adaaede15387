"""Filesystem faults on the real file backends: FsBackend and NixlPosixBackend.

What each backend can see differs, and the tests say so: ``FsBackend`` raises
for a stat error other than "not there" (the manager counts a backend error
and answers MISS), while NIXL POSIX answers ``None`` ("missing") for any path
it cannot stat, so through it an unreadable root or a path too long is
indistinguishable from an empty tier: the verdict is still a MISS, but no
error is counted.  Either way every waiting request gets its verdict.

Permission denied as root: CI runs as root, for whom ``chmod 000`` denies
nothing (CAP_DAC_OVERRIDE).  :class:`Unprivileged` makes the denial real: it
switches the *calling thread's* filesystem uid to ``nobody`` (``setfsuid``,
per thread on Linux) for the duration of each backend call; the kernel then
drops the thread's file-permission capabilities, so the stat really fails with
EACCES on the worker's thread, exactly as it would for an unprivileged
serving process.  The scheduler thread is untouched.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import sys
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from fault_harness import Reliability, counters, drive, finish, keys, nixl_missing, still_serves

from kvprobe.backends import FsBackend
from kvprobe.statemachine import AsyncLookupManager, ReqContext

NOBODY = 65534
PATH_MAX = 4096  # bytes including the terminating NUL (Linux)


@pytest.fixture(params=["fs", "nixl_posix"])
def kind(request: pytest.FixtureRequest) -> str:
    if request.param == "nixl_posix" and (why := nixl_missing()) is not None:
        pytest.skip(f"NIXL not importable: {why}")
    return str(request.param)


def make_backend(kind: str, root: Path | str) -> Any:
    if kind == "fs":
        return FsBackend(root)
    from kvprobe.backends.nixl_posix import NixlPosixBackend

    return NixlPosixBackend(root)


@pytest.fixture
def tier(kind: str, tmp_path: Path) -> Iterator[Any]:
    backend = make_backend(kind, tmp_path / "tier")
    yield backend
    backend.close()


def _name(tier: Any) -> str:
    return type(tier).__name__


# --- root removed ------------------------------------------------------------------


def test_root_removed_mid_run(tier: Any, reliability: Reliability) -> None:
    stored = keys("stored", 6)
    for key in stored:
        tier.store(key)
    with AsyncLookupManager(tier, lookup_timeout_s=10.0) as m:
        assert drive(m, {"before": stored}).values == [True] * 6
        assert finish(m, ["before"]) == 0

        # The root goes away right after the first flush of this run, while
        # its batch may be in flight: whatever each probe saw, it gets a verdict.
        def remove_root(step: int) -> None:
            if step == 1:
                shutil.rmtree(tier.root)

        during = drive(m, {"during": stored}, between_steps=remove_root)
        assert len(during.verdicts) == 6
        # Verdicts are cached while a request holds them: finish "during" first.
        assert finish(m, ["during"]) == 0
        after = drive(m, {"after": stored})
        assert after.values == [False] * 6  # a missing root holds no block
        assert m.stats.misses >= 6
        leaked = finish(m, ["after"])
        assert leaked == 0
        # The tier comes back (re-created by a writer): the same manager serves it.
        still_serves(m, tier.store)
        reliability.record(
            "root removed mid-run, re-created later",
            _name(tier),
            delivered=len(during.verdicts) + len(after.verdicts),
            asked=12,
            seconds=max(during.seconds, after.seconds),
            leaked=leaked,
            counters=counters(m, "misses") + " (a missing root is an empty tier)",
        )


# --- root unreadable -----------------------------------------------------------------

_libc: Any = None


def _setfsuid(uid: int) -> int:
    """Set the calling thread's filesystem uid; returns the previous one."""
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
    return int(_libc.setfsuid(uid))


class Unprivileged:
    """Runs each backend call with the calling thread's fsuid set to ``nobody``."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.active = True

    def batch_lookup(self, keys: Sequence[bytes], req_context: object) -> Iterable[bool]:
        if not self.active:
            return self.inner.batch_lookup(keys, req_context)  # type: ignore[no-any-return]
        previous = _setfsuid(NOBODY)
        try:
            # list(): consume inside the unprivileged window.
            return list(self.inner.batch_lookup(keys, req_context))
        finally:
            _setfsuid(previous)


def _denied_for_this_thread(path: str) -> str | None:
    """Why the unreadable-root setup would not deny (None when it does)."""
    if not sys.platform.startswith("linux"):
        return "setfsuid is Linux-only"
    try:
        previous = _setfsuid(NOBODY)
    except (OSError, AttributeError) as exc:
        return f"cannot call setfsuid: {exc}"
    try:
        os.stat(path)
    except PermissionError:
        return None
    except OSError as exc:
        return f"stat failed otherwise: {exc}"
    finally:
        _setfsuid(previous)
    return "stat of a file under a mode-000 root succeeded even with fsuid nobody"


def test_root_unreadable(tier: Any, reliability: Reliability) -> None:
    stored = keys("stored", 4)
    for key in stored:
        tier.store(key)
    os.chmod(tier.root, 0)
    try:
        why = _denied_for_this_thread(tier.locate(stored[0]))
        if why is not None:
            pytest.skip(f"cannot make the root unreadable here: {why}")
        backend = Unprivileged(tier)
        with AsyncLookupManager(backend, lookup_timeout_s=10.0) as m:
            result = drive(m, {"r1": stored, "r2": stored[:2]})
            assert result.values == [False] * 6
            stats = m.stats
            assert stats.hits == 0
            if isinstance(tier, FsBackend):
                # FsBackend raises PermissionError: counted, resolved as MISS.
                assert stats.backend_errors == 1 and stats.failures == {"raised": 1}, stats.failures
            leaked = finish(m, ["r1", "r2"])
            assert leaked == 0
            os.chmod(tier.root, 0o755)
            backend.active = False
            still_serves(m, tier.store)
            reliability.record(
                "root unreadable (mode 000, worker thread unprivileged)",
                _name(tier),
                delivered=len(result.verdicts),
                asked=6,
                seconds=result.seconds,
                leaked=leaked,
                counters=counters(m, "backend_errors", "misses")
                + ("" if isinstance(tier, FsBackend) else " (NIXL answers 'missing' for EACCES)"),
            )
    finally:
        os.chmod(tier.root, 0o755)


# --- names too long ----------------------------------------------------------------


def test_key_longer_than_a_file_name(tier: Any) -> None:
    # A key whose hex would exceed the 255-byte name limit is stored under a
    # digest name: it works like any other key, and so does its absence.
    long_key = bytes(range(256)) * 8  # 2 KiB
    other = long_key[:-1] + b"\x00"
    tier.store(long_key)
    with AsyncLookupManager(tier) as m:
        result = drive(m, {"r1": [long_key, other]})
        assert result.values == [True, False]
        assert m.stats.backend_errors == 0
        assert finish(m, ["r1"]) == 0


def _deep_root(base: Path, length: int) -> Path:
    """A directory whose absolute path is exactly ``length`` bytes."""
    path = str(base.resolve())
    while length - len(path) > 201:
        path = os.path.join(path, "d" * 200)
    path = os.path.join(path, "e" * (length - len(path) - 1))
    os.makedirs(path)
    assert len(path) == length
    return Path(path)


def test_path_longer_than_path_max(kind: str, tmp_path: Path, reliability: Reliability) -> None:
    # The root is so deep that a 16-byte key's path (root + 39 bytes) exceeds
    # PATH_MAX, while a 1-byte key's path (root + 9 bytes) still fits.
    root = _deep_root(tmp_path, PATH_MAX - 30)
    tier = make_backend(kind, root)
    try:
        long_path_keys = keys("k", 3)
        assert all(len(tier.locate(k)) >= PATH_MAX for k in long_path_keys)
        with AsyncLookupManager(tier, lookup_timeout_s=10.0) as m:
            result = drive(m, {"r1": long_path_keys})
            assert result.values == [False] * 3
            if isinstance(tier, FsBackend):
                # ENAMETOOLONG is not "absent": counted as a backend error.
                assert m.stats.failures == {"raised": 1}, m.stats.failures
            leaked = finish(m, ["r1"])
            assert leaked == 0
            short = b"\x07"
            assert len(tier.locate(short)) < PATH_MAX
            still_serves(m, tier.store, key=short)
            reliability.record(
                "path longer than PATH_MAX (deep root)",
                _name(tier),
                delivered=len(result.verdicts),
                asked=3,
                seconds=result.seconds,
                leaked=leaked,
                counters=counters(m, "backend_errors", "misses")
                + ("" if isinstance(tier, FsBackend) else " (NIXL answers 'missing' for ENAMETOOLONG)"),
            )
    finally:
        tier.close()


# --- a file replaced by a directory --------------------------------------------------


def test_file_replaced_by_directory(tier: Any, reliability: Reliability) -> None:
    stored = keys("stored", 3)
    for key in stored:
        tier.store(key)
    as_dir, plain = stored[0], stored[1]
    path = tier.locate(as_dir)
    os.remove(path)
    os.mkdir(path)
    # And a shard directory replaced by a regular file (ENOTDIR below it).
    shard_key = stored[2]
    shard = os.path.dirname(tier.locate(shard_key))
    shutil.rmtree(shard)
    Path(shard).write_bytes(b"not a directory")
    with AsyncLookupManager(tier, lookup_timeout_s=10.0) as m:
        result = drive(m, {"r1": [as_dir, plain, shard_key]})
        # A directory is not a block; nothing under a file is a block.
        assert result.values == [False, True, False]
        assert m.stats.backend_errors == 0
        leaked = finish(m, ["r1"])
        assert leaked == 0
        os.rmdir(path)
        os.remove(shard)
        tier.store(as_dir)
        tier.store(shard_key)
        assert drive(m, {"r2": [as_dir, shard_key]}).values == [True, True]
        assert finish(m, ["r2"]) == 0
        reliability.record(
            "block file replaced by a directory; shard dir replaced by a file",
            _name(tier),
            delivered=len(result.verdicts),
            asked=3,
            seconds=result.seconds,
            leaked=leaked,
            counters=counters(m, "hits", "misses"),
        )


# --- files deleted between lookup and probe --------------------------------------------


def test_files_deleted_between_lookup_and_probe(tier: Any, reliability: Reliability) -> None:
    stored = keys("stored", 4)
    for key in stored:
        tier.store(key)
    with AsyncLookupManager(tier, lookup_timeout_s=10.0) as m:
        ctx = ReqContext("r1")
        for key in stored:
            assert m.lookup(key, ctx) is None  # PENDING: nothing probed yet
        for key in stored[:2]:
            tier.remove(key)
        result = drive(m, {"r1": stored})
        assert result.values == [False, False, True, True]

        # Deleted after a True verdict: the verdict was right when given; the
        # engine's load then fails and it calls mark_miss, which sticks.
        tier.remove(stored[2])
        assert m.lookup(stored[2], ReqContext("r2")) is True
        m.mark_miss([stored[2]])
        assert m.lookup(stored[2], ReqContext("r2")) is False
        assert m.lookup(stored[2], ctx) is False
        assert m.stats.forced_misses == 1
        leaked = finish(m, ["r1", "r2"])
        assert leaked == 0
        # A new request probes afresh and sees the file gone.
        assert drive(m, {"r3": stored}).values == [False, False, False, True]
        assert finish(m, ["r3"]) == 0
        still_serves(m, tier.store)
        reliability.record(
            "files deleted between lookup and probe; and after a True verdict (mark_miss)",
            _name(tier),
            delivered=len(result.verdicts),
            asked=4,
            seconds=result.seconds,
            leaked=leaked,
            counters=counters(m, "forced_misses"),
        )
