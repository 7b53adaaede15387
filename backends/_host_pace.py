"""One store's pace shared by the processes of a host: a :class:`PaceCore` kept in a file.

Why.  A pace (:mod:`kvprobe.backends._pacing`) judges the store's answers to
the HEADs it sent.  Engine processes of one host that each keep their own
pace misjudge a store they share: when one slows down, the others' HEADs
keep the store throttling, so its decrease looks useless and can be
undone, and together they overshoot the store's limit by as much as they
disagree.  A host pace reserves every process's HEADs from one rate and
judges the outcomes of all of them together, as one process's pace does
for its threads (``NixlObjBackend(..., pace_scope="host")``).

Theory of operation.  The pace of a store (endpoint, bucket, prefix) lives
in one file per user (JSON, mode 0600, in ``$KVPROBE_PACE_DIR``, else
``/dev/shm``, else the temporary directory).  Each call opens it, takes an
exclusive ``flock``, reads the pace, applies the call on ``time.monotonic``
(one clock for every process of a boot), writes the pace back if it changed,
and closes it (which drops the lock; opening per call is what keeps a
forked child from sharing its parent's lock).  The file names its boot; a
pace from another boot, one nobody used for ``idle_reset_s``, or one that
does not read back (a torn write, another program's file) starts afresh,
unpaced, as a process's pace does when its last backend is gone.  A file
that is not ours (another owner, writable by others, a symlink) is never
read: the pacer then keeps a pace of its own process and counts it
(``host_fallbacks`` in :meth:`HostPacer.snapshot`), so the lookups never fail
for it.  Nor do they wait for it: a call waits at most ``LOCK_WAIT_S`` for
another process's lock (a holder that keeps it longer is stopped or hung),
then paces alone for ``ALONE_S`` before it tries the file again.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import math
import os
import stat
import tempfile
import threading
import time
import weakref
from collections.abc import Iterator
from pathlib import Path

from kvprobe.backends._pacing import PaceCore, Pacer, check_positive, get_or_create

__all__ = ["PACE_SCOPES", "HostPacer", "host_pacer", "pace_dir"]

_log = logging.getLogger(__name__)

#: Who may share a store's pace (``NixlObjBackend(pace_scope=...)``): its process's backends, or its host's.
PACE_SCOPES = ("process", "host")
#: A pace nobody used for this long starts afresh (seconds).
IDLE_RESET_S = 60.0
#: How long a call waits for another process's lock on the pace before pacing alone (seconds): a holder
#: keeps it for one call, but on a busy host the scheduler may leave it off a CPU for tens of milliseconds
#: (50 ms was seen exceeded on Ceph RGW's 2-core test host).
LOCK_WAIT_S = 0.5
#: How long a process paces alone after such a wait in vain, before it tries the file again (seconds).
ALONE_S = 5.0


def pace_dir() -> Path:
    """Where host paces are kept: ``$KVPROBE_PACE_DIR``, else ``/dev/shm`` (memory), else the temporary directory."""
    chosen = os.environ.get("KVPROBE_PACE_DIR")
    if chosen:
        return Path(chosen)
    shm = Path("/dev/shm")
    return shm if shm.is_dir() and os.access(shm, os.W_OK) else Path(tempfile.gettempdir())


def _boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""  # no such file: time.monotonic's origin cannot be checked


class HostPacer(Pacer):
    """A :class:`Pacer` whose core lives in ``path``, shared by every process of the host that names it.

    Args:
        path: the pace's file (created mode 0600 if missing).
        idle_reset_s: a pace nobody used for this long starts afresh (seconds, positive).

    Raises:
        ValueError: ``idle_reset_s`` is not a positive finite number.
    """

    def __init__(self, path: Path, *, idle_reset_s: float = IDLE_RESET_S) -> None:
        check_positive("idle_reset_s", idle_reset_s)
        super().__init__()  # the process's own pace: used only when the file cannot be
        self.path = Path(path)
        self.idle_reset_s = float(idle_reset_s)
        self.fallbacks = 0  # calls served by the process's own pace
        self._boot = _boot_id()
        self._alone_until = -math.inf  # time.monotonic() before which the file is not waited for again

    @contextlib.contextmanager
    def _held(self, *, changes: bool = True) -> Iterator[PaceCore]:
        with self._lock:
            try:
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
            except OSError as exc:
                yield self._fallback(f"cannot open it ({exc})")
                return
            try:
                info = os.fstat(fd)
                if info.st_uid != os.getuid() or info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
                    yield self._fallback("another user owns it or may write it")
                    return
                if not self._lock_file(fd):
                    yield self._fallback(f"another process held it for over {LOCK_WAIT_S} s")
                    return
                now = time.monotonic()
                core = self._read(fd, now)
                yield core
                if changes:
                    self._write(fd, core, now)
            finally:
                os.close(fd)  # drops the lock

    def _lock_file(self, fd: int) -> bool:
        """Lock the file, waiting at most ``LOCK_WAIT_S``; after a wait in vain, do not wait again for ``ALONE_S``.

        A holder keeps the lock for one call (tens of microseconds): one that
        keeps it longer is stopped or hung, and must not hold this process's
        lookups with it.
        """
        start = time.monotonic()
        if start < self._alone_until:
            return False
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return True
            except BlockingIOError:
                if time.monotonic() - start >= LOCK_WAIT_S:
                    self._alone_until = time.monotonic() + ALONE_S
                    return False
                time.sleep(0.0005)

    def _fallback(self, why: str) -> PaceCore:
        if not self.fallbacks:
            _log.warning("the host pace %s is not used, this process paces alone: %s", self.path, why)
        self.fallbacks += 1
        return self._core

    def _read(self, fd: int, now: float) -> PaceCore:
        """The pace in the file, or a fresh one (none yet, another boot's, idle too long, unreadable)."""
        size = os.fstat(fd).st_size
        if size == 0 or size > 1 << 20:
            return PaceCore(now)
        try:
            saved = json.loads(os.pread(fd, size, 0))
            if saved["boot"] != self._boot or not 0 <= now - saved["used"] <= self.idle_reset_s:
                return PaceCore(now)
            return PaceCore.from_state(saved["pace"])
        except (ValueError, KeyError, TypeError, RecursionError):
            return PaceCore(now)

    def _write(self, fd: int, core: PaceCore, now: float) -> None:
        data = json.dumps({"boot": self._boot, "used": now, "pace": core.state()}).encode()
        os.ftruncate(fd, 0)
        os.pwrite(fd, data, 0)

    def snapshot(self) -> dict[str, float | int | None]:
        """:meth:`Pacer.snapshot` of the host's pace, and ``host_fallbacks``: calls paced by this process alone."""
        return super().snapshot() | {"host_fallbacks": self.fallbacks}


_SHARED: weakref.WeakValueDictionary[Path, HostPacer] = weakref.WeakValueDictionary()
_SHARED_LOCK = threading.Lock()


def host_pacer(endpoint: str, bucket: str, prefix: str) -> HostPacer:
    """The host's pace of one store (endpoint, bucket, prefix): one object per process, one file per user."""
    name = hashlib.sha256("\0".join((endpoint, bucket, prefix)).encode()).hexdigest()[:24]
    path = pace_dir() / f"kvprobe-pace-{os.getuid()}-{name}.json"
    return get_or_create(_SHARED, _SHARED_LOCK, path, lambda: HostPacer(path))
