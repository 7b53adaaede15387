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
(one clock for every process of a boot), and, if it changed, writes it to a
new file that replaces the old one (a write that fails half-way, on a full
disk or past a file-size limit, leaves the old pace whole), then closes it
(which drops the lock; opening per call is what keeps a forked child from
sharing its parent's lock).  A process that locked a file that was replaced
meanwhile locks the new one.  The file names its boot; a pace from another
boot, or one nobody used for ``idle_reset_s``, starts afresh, unpaced, as a
process's pace does when its last backend is gone.  One that does not read
back as a pace (not JSON, a field of the wrong kind, a time or a rate out of
range: another program's file) is replaced by a fresh pace and counted
(``host_bad_files`` in :meth:`HostPacer.snapshot`).  The pacer keeps a pace of
its own process, and serves a call from it, counted (``host_fallbacks``),
when the file is not ours (another owner, writable by others, a symlink:
never read), cannot be opened or written, or another process holds it: a
call waits at most ``LOCK_WAIT_S`` for another process's lock (a holder that
keeps it longer is stopped or hung), and after a wait in vain or a failed
write the process paces alone for ``ALONE_S`` before it tries the file
again, from the pace the host had.  So a lookup never fails, nor waits
long, for the file.  A process that forks while one of its threads is in a
call leaves the child neither that thread's lock nor its open file (which
would keep the host's lock for the child's lifetime).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import math
import os
import secrets
import stat
import tempfile
import threading
import time
import weakref
from collections.abc import Iterator
from pathlib import Path

from kvprobe.backends._pace_core import PaceCore, check_positive
from kvprobe.backends._pacing import Pacer, get_or_create

__all__ = ["PACE_SCOPES", "HostPacer", "checked_pace", "host_pacer", "pace_dir"]

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
        self.bad_files = 0  # files that did not read back as a pace, replaced
        self._boot = _boot_id()
        self._alone_until = -math.inf  # time.monotonic() before which the file is not waited for again
        self._fd: int | None = None  # the file, open while a call holds it (closed in a forked child)

    @contextlib.contextmanager
    def _held(self, *, changes: bool = True) -> Iterator[PaceCore]:
        with self._lock:
            fd = self._open_locked()
            if fd is None:
                yield self._core
                return
            self._fd = fd
            try:
                now = time.monotonic()
                core = self._read(fd, now)
                yield core
                if changes and not self._write(core, now):
                    # The host's pace, this call included, goes on in this process.
                    self._core = core
                    self._alone_until = time.monotonic() + ALONE_S
            finally:
                self._fd = None
                os.close(fd)  # drops the lock

    def _open_locked(self) -> int | None:
        """The pace's file, open and locked; None (counted, this call paces alone) when it cannot be used."""
        if time.monotonic() < self._alone_until:
            self._fallback("the process paces alone for now")
            return None
        for _ in range(8):  # each turn: the file was replaced between open and lock, by another writer
            try:
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
            except OSError as exc:
                self._fallback(f"cannot open it ({exc})")
                return None
            problem = self._lock_file(fd)
            if problem is None:
                return fd
            os.close(fd)
            if problem != "replaced":
                self._fallback(problem)
                return None
        self._fallback("it was replaced on every try")
        return None

    def _lock_file(self, fd: int) -> str | None:
        """Check that the file is ours and lock it, waiting at most ``LOCK_WAIT_S``; None, or why not.

        A holder keeps the lock for one call (tens of microseconds): one that
        keeps it longer is stopped or hung, and must not hold this process's
        lookups with it; after such a wait the file is not tried for ``ALONE_S``.
        ``"replaced"``: the path names another file since this one was opened.
        """
        info = os.fstat(fd)
        if info.st_uid != os.getuid() or info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            return "another user owns it or may write it"
        start = time.monotonic()
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() - start >= LOCK_WAIT_S:
                    self._alone_until = time.monotonic() + ALONE_S
                    return f"another process held it for over {LOCK_WAIT_S} s"
                time.sleep(0.0005)
        try:
            named = os.stat(self.path, follow_symlinks=False)
        except OSError:
            return "replaced"
        return None if (named.st_dev, named.st_ino) == (info.st_dev, info.st_ino) else "replaced"

    def _fallback(self, why: str) -> None:
        if not self.fallbacks:
            _log.warning("the host pace %s is not used, this process paces alone: %s", self.path, why)
        self.fallbacks += 1

    def _read(self, fd: int, now: float) -> PaceCore:
        """The pace in the file, or a fresh one (none yet, another boot's, idle too long, or not a pace: counted)."""
        size = os.fstat(fd).st_size
        if size == 0:
            return PaceCore(now)
        try:
            if size > 1 << 20:
                raise ValueError(f"{size} bytes")
            saved = json.loads(os.pread(fd, size, 0))
            if not isinstance(saved, dict) or set(saved) != {"boot", "used", "pace"}:
                raise ValueError("not a pace file's fields")
            used = saved["used"]
            if not isinstance(used, (int, float)) or isinstance(used, bool):
                raise ValueError(f"used is {used!r}")
            if saved["boot"] != self._boot or not 0 <= now - used <= self.idle_reset_s:
                return PaceCore(now)
            return checked_pace(saved["pace"], now)
        except (ValueError, KeyError, TypeError, RecursionError) as exc:  # json's errors are ValueErrors
            if not self.bad_files:
                _log.warning("the host pace %s is not a pace (%s): replaced by a fresh one", self.path, exc)
            self.bad_files += 1
            return PaceCore(now)

    def _write(self, core: PaceCore, now: float) -> bool:
        """Replace the file by one holding ``core``; False (nothing replaced, counted) when that fails."""
        data = json.dumps({"boot": self._boot, "used": now, "pace": core.state()}).encode()
        temporary = self.path.with_name(f"{self.path.name}.{secrets.token_hex(6)}.tmp")
        try:
            fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
            try:
                view = memoryview(data)
                while view:
                    written = os.write(fd, view)  # short past a file-size limit; then EFBIG
                    if written <= 0:
                        raise OSError(f"wrote {written} bytes")
                    view = view[written:]
            finally:
                os.close(fd)
            os.replace(temporary, self.path)
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.unlink(temporary)
            self._fallback(f"cannot write it ({exc})")
            return False
        return True

    def _after_fork_in_child(self, was_held: bool) -> None:
        super()._after_fork_in_child(was_held)
        fd, self._fd = self._fd, None
        if fd is not None:
            # The call that opened it runs only in the parent: in the child
            # its descriptor would keep the host's lock for the child's life.
            with contextlib.suppress(OSError):
                os.close(fd)

    def snapshot(self) -> dict[str, float | int | None]:
        """:meth:`Pacer.snapshot` of the host's pace, ``host_fallbacks`` (calls paced by this process alone)
        and ``host_bad_files`` (files that were not a pace, replaced)."""
        return super().snapshot() | {"host_fallbacks": self.fallbacks, "host_bad_files": self.bad_files}


#: The most a time in a pace file may lie ahead of now (seconds): a
#: reservation starts before its call's deadline (at most an hour), and a
#: hold lasts at most ``max_hold_s``; further ahead, it would refuse every
#: reservation until someone removed the file.
_AHEAD_S = 7200.0
#: The highest rate a pace file may hold (HEAD/s): far above any store's.
_TOP_RATE = 1e9
_RATES = ("w_max", "k", "measured", "served", "_noise_rate")
_PARAMETERS = ("c", "beta", "floor", "burst_s", "window_heads", "window_min_s", "idle_s", "holdoff_max", "max_hold_s")


def checked_pace(state: object, now: float) -> PaceCore:
    """The pace ``state`` describes, if every field is of its kind and in range at ``now``.

    The parameters must be the defaults (a host pace is made with them);
    times at most ``_AHEAD_S`` ahead, rates finite, counts whole and not negative.

    Raises:
        ValueError: naming the first field that is not.
    """
    if not isinstance(state, dict):
        raise ValueError("the pace is not an object")
    fresh = PaceCore(now).state()
    core = PaceCore.from_state(state)  # the fields' names, and the kinds its constructor checks
    for name in _PARAMETERS:
        if state[name] != fresh[name] or type(state[name]) is not type(fresh[name]):
            raise ValueError(f"{name} is {state[name]!r}, not the host pace's {fresh[name]!r}")
    for name in ("paced", "_decreasing", "_doubted"):
        _kind(name, state[name], bool)
    for name in ("_holdoff", "_holdoff_left", "_unsettled"):
        _count(name, state[name])
    for name in ("noise", "_noise_learnt"):
        if not 0.0 <= _number(name, state[name]) <= 1.0:
            raise ValueError(f"{name} is {state[name]!r}, out of [0, 1]")
    for name, value in state["stats"].items():
        _count(f"stats.{name}", value)
    window = state["_window"]
    for name in ("last_heads", "queries", "failures", "answered_heads", "heads"):
        _count(f"_window.{name}", window[name])
    _kind("_window.binding", window["binding"], bool)
    for name, value, infinite in (
        ("t_decrease", state["t_decrease"], False),
        ("tat", state["tat"], False),
        ("hold_until", state["hold_until"], True),
        ("held_at", state["held_at"], True),
        ("probe_at", state["probe_at"], True),
        ("_window.start", window["start"], False),
        ("_window.first_sent", window["first_sent"], True),
        ("_window.last_sent", window["last_sent"], True),
        ("_last_reserved[0]", _item(state["_last_reserved"], 0, 2), False),
        ("_kept_up[0]", _item(state["_kept_up"], 0, 2), True),
    ):
        _time(name, value, now, infinite)
    _count("_last_reserved[1]", _item(state["_last_reserved"], 1, 2))
    for index in range(3):
        _count(f"_noise_pool[{index}]", _item(state["_noise_pool"], index, 3))
    if state["_frozen_at"] is not None:
        _time("_frozen_at", state["_frozen_at"], now, False)
    rates = [(name, state[name]) for name in _RATES] + [("_kept_up[1]", _item(state["_kept_up"], 1, 2))]
    if state["_top"] is not None:
        rates.append(("_top", state["_top"]))
    if state["_verify"] is not None:
        rates += [(f"_verify[{i}]", _item(state["_verify"], i, 3)) for i in range(3)]
    chain = state["_demand_chain"]
    if chain is not None:  # its fields' names were checked by from_state
        rates.append(("_demand_chain.cut_rate", chain["cut_rate"]))
        _count("_demand_chain.pooled_heads", chain["pooled_heads"])
        _count("_demand_chain.windows", chain["windows"])
        for name, most in (("first_share", 1.0), ("pooled_failed", float(chain["pooled_heads"]))):
            share = _number(f"_demand_chain.{name}", chain[name])
            if not 0.0 <= share <= most:
                raise ValueError(f"_demand_chain.{name} is {share!r}, out of [0, {most:g}]")
    for name, value in rates:
        _number(name, value)
        if not 0.0 <= value <= _TOP_RATE:
            raise ValueError(f"{name} is {value!r}, out of [0, {_TOP_RATE:g}]")
    return core


def _kind(name: str, value: object, kind: type) -> None:
    if type(value) is not kind:
        raise ValueError(f"{name} is {value!r}, not a {kind.__name__}")


def _count(name: str, value: object) -> None:
    _kind(name, value, int)
    assert isinstance(value, int)
    if value < 0:
        raise ValueError(f"{name} is {value!r}, below 0")


def _number(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
        raise ValueError(f"{name} is {value!r}, not a number")
    return float(value) if math.isfinite(value) else value


def _time(name: str, value: object, now: float, infinite: bool) -> None:
    seconds = _number(name, value)
    if math.isinf(seconds) and not infinite:
        raise ValueError(f"{name} is {seconds!r}, not finite")
    if math.isfinite(seconds) and seconds > now + _AHEAD_S:
        raise ValueError(f"{name} is {seconds - now:.0f} s ahead")


def _item(value: object, index: int, length: int) -> object:
    if not isinstance(value, (list, tuple)) or len(value) != length:
        raise ValueError(f"{value!r} is not a list of {length}")
    return value[index]


_SHARED: weakref.WeakValueDictionary[Path, HostPacer] = weakref.WeakValueDictionary()
_SHARED_LOCK = threading.Lock()


def _new_registry_lock() -> None:
    global _SHARED_LOCK
    _SHARED_LOCK = threading.Lock()  # a thread of the parent may have held it at the fork


os.register_at_fork(after_in_child=_new_registry_lock)


def host_pacer(endpoint: str, bucket: str, prefix: str) -> HostPacer:
    """The host's pace of one store (endpoint, bucket, prefix): one object per process, one file per user."""
    name = hashlib.sha256("\0".join((endpoint, bucket, prefix)).encode()).hexdigest()[:24]
    path = pace_dir() / f"kvprobe-pace-{os.getuid()}-{name}.json"
    return get_or_create(_SHARED, _SHARED_LOCK, path, lambda: HostPacer(path))
