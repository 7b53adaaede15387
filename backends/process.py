"""Run a backend in helper processes, so its Python work never holds the scheduler's GIL.

Why.  A backend called on the manager's worker thread shares the GIL with
the scheduler thread.  Even NIXL POSIX, whose file stats run in C++ without
the GIL, holds it for much of a call: building a path per key, converting
the descriptor list, and building NIXL's answer (a dict of strings per key)
all run under it.  Measured here on a 10,000-file group: about 12 ms of path
building and 3 ms of descriptors before the call, and the call itself lets a
pure-Python thread run at only about 0.6 of its idle rate.  A pure-Python
``os.stat`` loop (``FsBackend``) holds the GIL for everything but the stat
itself.  ``python -m bench.reliability.starvation`` shows what that costs the scheduler.

How.  :class:`ProcessBackend` builds the real backend in a helper process
(started with ``spawn``: the manager's process has threads, and forking it
would copy their locks) by calling ``factory()`` there, and forwards each
``batch_lookup`` over a pipe.  The keys travel as one bytes message (their
lengths as a 32-bit array, then the keys back to back) and the verdicts come
back as one byte per key; both conversions run in C in the manager's
process, and the worker thread waits for the answer in a blocking read
without the GIL.  The helper's own Python work holds only the helper's GIL.

Concurrency: a helper serves one call at a time.  A call takes an idle
helper or starts one, up to ``max_procs`` (by default as many as the
manager's worker runs at once: its concurrent groups plus its stuck calls);
beyond that it fails at once, so the manager answers MISS instead of
queueing behind a stuck call.  Starting a helper costs about a second
(an interpreter, imports, ``factory()``); :meth:`ProcessBackend.start_helpers`
starts them ahead, so the first concurrent calls do not wait for that.

Faults.  Whatever the backend raises in the helper is raised again in the
caller (the same exception type when it can be pickled, with a note naming
the helper).  A helper that dies mid-call, or takes longer than
``call_timeout_s`` (10 s by default, so a frozen helper never holds its
slot for ever), is killed and replaced by the next call; the call raises
:class:`HelperProcessError`.  A verdict that is not a ``bool`` raises
``TypeError``; a short or long answer keeps its length, so the manager's own
checks name it.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import pickle
import struct
import threading
import weakref
from array import array
from collections.abc import Callable, Iterable, Sequence
from multiprocessing.connection import Connection
from typing import Any

from kvprobe.backends.base import Backend, Key, Verdicts
from kvprobe.backends.cpu_clock import process_threads_busy_seconds
from kvprobe.backends.timeouts import PIPE_POLL_MAX_S, check_seconds

__all__ = ["DEFAULT_CALL_TIMEOUT_S", "DEFAULT_HELPER_NICE", "HelperProcessError", "ProcessBackend"]

# Reply status bytes (first byte of every message from a helper).
_OK = 0
_RAISED = 1  # payload: the pickled exception
_RAISED_UNPICKLABLE = 2  # payload: "Type: message" in UTF-8
_READY = 3  # payload: repr of the backend, UTF-8

# Verdict bytes: 0 False, 1 True, 2 not a bool, 3 False that a ``Verdicts``
# result marked as no answer (carried so a verdict cache never remembers it).
_VERDICTS = (False, True)
_NOT_A_BOOL = 2
_UNANSWERED = 3
_COUNT = struct.Struct("<I")


#: A helper that has not answered after this long is presumed frozen: it is
#: killed and replaced.  Far above any healthy call (a 3,600-key stat loop
#: takes milliseconds; 2,000 S3 HEADs about a second), far below "for ever".
DEFAULT_CALL_TIMEOUT_S = 10.0
#: Helpers run this much nicer than the manager's process: with four groups
#: probed at once on two cores, equal-priority helpers left the scheduler
#: thread about half its lookup rate (``python -m bench.starvation_commits``).
DEFAULT_HELPER_NICE = 10
_DEFAULT_MAX_PROCS = 2


def _pollable_seconds(name: str, value: object) -> float:
    """``value`` if a pipe's poll can wait that long (ValueError for any bad value, as documented)."""
    return check_seconds(
        name, value, limit=PIPE_POLL_MAX_S, limit_name="the longest a pipe's poll can wait", wrong_type=ValueError
    )


def _kill_all(idle: list[_Helper], busy: set[_Helper], pid: int) -> None:
    """Finalizer: kill the helpers of a ProcessBackend nobody closed (only in the process that started them)."""
    if os.getpid() != pid:
        return
    for helper in [*idle, *busy]:
        try:
            helper.kill()
        except Exception:  # a finalizer has nobody to report to
            pass


class HelperProcessError(RuntimeError):
    """A helper process died, hung past ``call_timeout_s``, or could not start."""


def _encode(keys: Sequence[Key]) -> bytes:
    lengths = array("I", map(len, keys))
    return _COUNT.pack(len(keys)) + lengths.tobytes() + b"".join(keys)


def _decode(message: bytes) -> list[Key]:
    (count,) = _COUNT.unpack_from(message)
    lengths = array("I")
    lengths.frombytes(message[_COUNT.size : _COUNT.size + 4 * count])
    keys: list[Key] = []
    at = _COUNT.size + 4 * count
    for length in lengths:
        keys.append(message[at : at + length])
        at += length
    return keys


def _verdict_byte(verdict: object) -> int:
    return 1 if verdict is True else 0 if verdict is False else _NOT_A_BOOL


def _verdict_bytes(result: Iterable[object]) -> bytes:
    """One byte per verdict; a ``False`` that a :class:`Verdicts` result marked unanswered is ``_UNANSWERED``."""
    answer = bytearray(map(_verdict_byte, result))
    marked = result.unanswered if isinstance(result, Verdicts) else frozenset()
    for index in marked if isinstance(marked, frozenset) else ():
        if type(index) is int and 0 <= index < len(answer) and answer[index] == 0:
            answer[index] = _UNANSWERED
    return bytes(answer)


def _error_reply(exc: BaseException) -> bytes:
    try:
        return bytes([_RAISED]) + pickle.dumps(exc)
    except Exception:
        return bytes([_RAISED_UNPICKLABLE]) + f"{type(exc).__name__}: {exc}".encode("utf-8", "replace")


def _serve(conn: Connection, factory: Callable[[], Backend], disabled_log_level: int, nice: int) -> None:
    """The helper process: build the backend, then answer lookups until told to stop."""
    if nice:
        os.nice(nice)
    # A spawned process starts with fresh logging: carry over the manager
    # process's logging.disable() level, so that e.g. NIXL's INFO line per
    # agent stays as quiet in the helper as the caller asked it to be here.
    logging.disable(disabled_log_level)
    try:
        backend = factory()
        if not callable(getattr(backend, "batch_lookup", None)):
            raise TypeError(
                f"factory() must build a backend with a callable batch_lookup(keys, req_context); "
                f"it built a {type(backend).__name__}"
            )
    except BaseException as exc:
        conn.send_bytes(_error_reply(exc))
        return
    try:
        conn.send_bytes(bytes([_READY]) + repr(backend)[:500].encode("utf-8", "replace"))
    except OSError:
        return  # the process that started us is gone (it gave up, or exited)
    try:
        while True:
            try:
                request = conn.recv_bytes()
            except EOFError:
                return  # the manager's process went away
            if not request:
                return  # asked to stop
            try:
                answer = bytes([_OK]) + _verdict_bytes(backend.batch_lookup(_decode(request), None))
            except Exception as exc:
                answer = _error_reply(exc)
            try:
                conn.send_bytes(answer)
            except OSError:
                return  # the caller gave up on this call (timeout) or went away
    finally:
        close = getattr(backend, "close", None)
        if callable(close):
            close()


def process_busy_seconds(pid: int) -> float:
    """Seconds the threads of process ``pid`` have run or waited in the run queue (0.0 if unreadable)."""
    try:
        return process_threads_busy_seconds(pid)
    except OSError:
        return 0.0


class _Helper:
    """One helper process and the manager's end of its pipe."""

    __slots__ = ("conn", "process")

    def __init__(self, process: Any, conn: Connection) -> None:
        self.process = process
        self.conn = conn

    def kill(self) -> None:
        self.conn.close()
        if self.process.is_alive():
            self.process.kill()
        self.process.join(5.0)

    def stop(self, timeout_s: float) -> None:
        try:
            self.conn.send_bytes(b"")
        except OSError:
            pass
        self.process.join(timeout_s)
        self.kill()


class ProcessBackend:
    """A backend that runs ``factory()``'s backend in helper processes (see the module docs).

    Args:
        factory: builds the real backend; called in each helper process, so it
            must pickle (a class, or ``functools.partial(FsBackend, root)``;
            not a lambda).  The helper's backend receives ``req_context=None``.
        max_procs: most helpers alive at once (one per concurrent call).
            None (the default): as many as the manager's worker runs calls
            at once (it says so through :meth:`fit_concurrency`), 2 before.
        call_timeout_s: a call that has no answer after this long kills its
            helper and raises :class:`HelperProcessError`, so a frozen helper
            is replaced by itself; None waits for ever (a frozen helper then
            holds its slot until ``close``).
        start_timeout_s: how long starting a helper (importing and calling
            ``factory``) may take.
        helper_nice: how much lower the helpers' CPU priority is than the
            manager's process (``os.nice``, 0 to 19; default
            :data:`DEFAULT_HELPER_NICE`).  With several groups probed at once
            the helpers can outnumber the cores; niced, they leave the
            scheduler thread its core and use what it does not.  0 keeps them
            at the manager's priority (they then take an equal share).

    The first helper is started here, so a factory that fails does so now.
    In a child process after ``os.fork()`` the parent's helpers are left to
    the parent (sharing their pipes would cross answers) and the child starts
    its own.  A ProcessBackend garbage-collected without ``close`` kills its
    helpers.

    Raises:
        TypeError: ``factory`` is not callable or does not pickle, or what it
            builds has no callable ``batch_lookup``.
        ValueError: ``max_procs`` is not a positive int, a timeout is not
            a positive number of seconds a pipe can wait for (at most
            :data:`~kvprobe.backends.timeouts.PIPE_POLL_MAX_S`, about 24.8
            days; the message names the argument and the limit), or
            ``helper_nice`` is not an int from 0 to 19.
        HelperProcessError: the helper did not start in time, or exited.
        Exception: whatever ``factory()`` raised in the helper (re-raised
            here when it pickles, else as :class:`HelperProcessError`).
    """

    def __init__(
        self,
        factory: Callable[[], Backend],
        *,
        max_procs: int | None = None,
        call_timeout_s: float | None = DEFAULT_CALL_TIMEOUT_S,
        start_timeout_s: float = 120.0,
        helper_nice: int = DEFAULT_HELPER_NICE,
    ) -> None:
        if not callable(factory):
            raise TypeError(f"factory must be callable, got {type(factory).__name__}")
        try:
            pickle.dumps(factory)
        except Exception as exc:
            raise TypeError(
                f"factory must pickle to reach the helper process (use a class or functools.partial, "
                f"not a lambda or a local function): {exc}"
            ) from exc
        if max_procs is not None and (isinstance(max_procs, bool) or not isinstance(max_procs, int) or max_procs < 1):
            raise ValueError(f"max_procs must be a positive int or None, got {max_procs!r}")
        # Both are waited for in a pipe's poll: a longer timeout would make
        # every wait overflow (every call failing, the helper killed).
        if call_timeout_s is not None:
            call_timeout_s = _pollable_seconds("call_timeout_s", call_timeout_s)
        start_timeout_s = _pollable_seconds("start_timeout_s", start_timeout_s)
        if isinstance(helper_nice, bool) or not isinstance(helper_nice, int) or not 0 <= helper_nice <= 19:
            raise ValueError(f"helper_nice must be an int from 0 to 19, got {helper_nice!r}")
        self.factory = factory
        self.helper_nice = helper_nice
        self._follows_manager = max_procs is None
        self.max_procs = _DEFAULT_MAX_PROCS if max_procs is None else max_procs
        self.call_timeout_s = call_timeout_s
        self.start_timeout_s = start_timeout_s
        self._context = multiprocessing.get_context("spawn")
        self._lock = threading.Lock()
        self._idle: list[_Helper] = []
        self._busy: set[_Helper] = set()
        # Calling thread -> (pid of the helper serving its call, that helper's
        # CPU seconds when the call began): what cpu_seconds_of reads.
        self._serving: dict[int, tuple[int, float]] = {}
        self._starting = 0
        self._closed = False
        self._pid = os.getpid()
        self.description = repr(factory)
        helper, self.description = self._start()
        self._idle.append(helper)
        # Dropped without close(): kill the helpers (they hold pipes and memory).
        self._finalizer = weakref.finalize(self, _kill_all, self._idle, self._busy, self._pid)

    def fit_concurrency(self, calls: int) -> None:
        """The manager's worker runs up to ``calls`` calls at once: allow as many helpers.

        Only when ``max_procs`` was left at None; an explicit ``max_procs`` stays.
        """
        if self._follows_manager and isinstance(calls, int) and calls >= 1:
            self.max_procs = calls

    def start_helpers(self, count: int | None = None) -> int:
        """Start idle helpers now until ``count`` are alive (capped at ``max_procs``); how many are.

        A warm-up: helpers otherwise start on demand, so the first calls
        that run at once each pay a process start (an interpreter, imports,
        ``factory()``: about a second here).  Call it after the manager has
        started its worker (which sets ``max_procs``), before measuring or
        serving.  None: ``max_procs``.

        Raises:
            ValueError: ``count`` is not a positive int (nothing started).
            RuntimeError: the backend is closed.
            HelperProcessError / Exception: a helper failed to start, as in
                the constructor; the helpers started before it stay.
        """
        if count is not None and (isinstance(count, bool) or not isinstance(count, int) or count < 1):
            raise ValueError(f"count must be a positive int or None, got {count!r}")
        self._forget_if_forked()
        while True:
            with self._lock:
                if self._closed:
                    raise RuntimeError("ProcessBackend is closed")
                alive = len(self._idle) + len(self._busy) + self._starting
                if alive >= min(self.max_procs if count is None else count, self.max_procs):
                    return alive
                self._starting += 1
            self._start_reserved(self._idle.append)

    def cpu_seconds_of(self, thread_id: int) -> float:
        """Seconds the helper serving thread ``thread_id``'s current call has been
        busy on it so far (running, or waiting in the run queue), every thread
        of the helper counted (a tier may compute on a pool of its own while
        the thread serving the pipe waits); 0.0 if that thread makes no call
        (or where ``/proc`` has no ``schedstat``).  Never raises.

        The manager's worker reads it to tell a call that computes from one
        that waits (:mod:`kvprobe.statemachine.cpu_gate`).
        """
        serving = self._serving.get(thread_id)
        if serving is None:
            return 0.0
        pid, at_start = serving
        return max(0.0, process_busy_seconds(pid) - at_start)

    @property
    def pids(self) -> list[int]:
        """Process ids of the idle helpers (busy ones are in a call)."""
        with self._lock:
            return [h.process.pid for h in self._idle]

    @property
    def helper_pids(self) -> list[int]:
        """Process ids of every helper, idle or in a call."""
        with self._lock:
            return [h.process.pid for h in (*self._idle, *self._busy)]

    def batch_lookup(self, keys: Sequence[Key], req_context: object) -> list[bool]:
        """The wrapped backend's verdicts for ``keys``, computed in a helper process.

        A :class:`~kvprobe.backends.base.Verdicts` result's marks (keys the
        wrapped backend did not answer) come back as a ``Verdicts`` too.

        Raises:
            TypeError: a key is not ``bytes`` (before anything is sent).
            RuntimeError: the backend is closed, or ``max_procs`` calls are
                already running.
            HelperProcessError: the helper died or timed out (it is replaced
                at the next call).
            TypeError: the wrapped backend answered something other than a bool.
            Exception: what the wrapped backend raised.
        """
        del req_context
        if not keys:
            if self._closed:
                raise RuntimeError("ProcessBackend is closed")
            return []
        if not set(map(type, keys)) <= {bytes}:
            bad = next(k for k in keys if type(k) is not bytes)
            raise TypeError(f"keys must be bytes, got {type(bad).__name__}")
        request = _encode(keys)
        helper = self._checkout()
        caller = threading.get_ident()
        pid = helper.process.pid
        self._serving[caller] = (pid, process_busy_seconds(pid))
        try:
            helper.conn.send_bytes(request)
            if self.call_timeout_s is not None and not helper.conn.poll(self.call_timeout_s):
                raise TimeoutError(f"no answer within call_timeout_s={self.call_timeout_s}")
            reply = helper.conn.recv_bytes()
        except BaseException as exc:
            # The pipe may now hold half a message: this helper is done for.
            self._retire(helper)
            if isinstance(exc, (EOFError, OSError, TimeoutError)):
                raise HelperProcessError(
                    f"helper process {helper.process.pid} of {self.description} failed: {type(exc).__name__}: {exc} "
                    f"(exit code {helper.process.exitcode})"
                ) from exc
            raise
        finally:
            self._serving.pop(caller, None)
        self._checkin(helper)
        status = reply[0]
        if status != _OK:
            raise self._error(reply, helper)
        verdicts = reply[1:]
        if _NOT_A_BOOL in verdicts:
            raise TypeError(f"{self.description} answered a non-bool for key {verdicts.index(_NOT_A_BOOL)}")
        if _UNANSWERED not in verdicts:
            return list(map(_VERDICTS.__getitem__, verdicts))
        unanswered = frozenset(i for i, byte in enumerate(verdicts) if byte == _UNANSWERED)
        return Verdicts((byte == 1 for byte in verdicts), unanswered=unanswered)

    def close(self) -> None:
        """Stop the idle helpers and kill busy ones; later lookups raise RuntimeError.  Idempotent.

        A call still running in a killed helper raises :class:`HelperProcessError`.
        """
        self._forget_if_forked()
        self._finalizer.detach()
        with self._lock:
            if self._closed:
                return
            self._closed = True
            idle = list(self._idle)
            self._idle.clear()
            busy = list(self._busy)
        for helper in busy:
            helper.kill()
        for helper in idle:
            helper.stop(5.0)

    def __enter__(self) -> ProcessBackend:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"ProcessBackend({self.description}, max_procs={self.max_procs})"

    # --- helpers -------------------------------------------------------------------

    def _start(self) -> tuple[_Helper, str]:
        mine, theirs = self._context.Pipe(duplex=True)
        process = self._context.Process(
            target=_serve,
            args=(theirs, self.factory, logging.root.manager.disable, self.helper_nice),
            name="kvprobe-helper",
            daemon=True,
        )
        process.start()
        theirs.close()
        helper = _Helper(process, mine)
        try:
            if not mine.poll(self.start_timeout_s):
                raise HelperProcessError(f"helper process did not start within {self.start_timeout_s} s")
            message = mine.recv_bytes()
        except EOFError:
            helper.kill()
            raise HelperProcessError(
                f"helper process exited with code {process.exitcode} before it was ready"
            ) from None
        except BaseException:
            helper.kill()
            raise
        if message[0] != _READY:
            helper.kill()
            raise self._error(message, helper)
        return helper, message[1:].decode("utf-8", "replace")

    def _forget_if_forked(self) -> None:
        """In a fork child: the helpers and their pipes belong to the parent.

        Using them would cross the parent's and the child's answers (wrong
        verdicts); killing them would break the parent.  The child closes its
        copies of the pipes and starts its own helpers when it needs them.
        """
        if os.getpid() == self._pid:
            return
        self._pid = os.getpid()
        self._lock = threading.Lock()  # may have been held by a parent thread at fork
        inherited = [*self._idle, *self._busy]
        self._idle = []
        self._busy = set()
        self._serving = {}
        self._starting = 0
        for helper in inherited:
            helper.conn.close()
        self._finalizer.detach()
        self._finalizer = weakref.finalize(self, _kill_all, self._idle, self._busy, self._pid)

    def _checkout(self) -> _Helper:
        self._forget_if_forked()
        with self._lock:
            if self._closed:
                raise RuntimeError("ProcessBackend is closed")
            if self._idle:
                helper = self._idle.pop()
                self._busy.add(helper)
                return helper
            if len(self._busy) + self._starting >= self.max_procs:
                raise RuntimeError(f"all {self.max_procs} helper processes are busy (raise max_procs?)")
            self._starting += 1
        return self._start_reserved(self._busy.add)

    def _start_reserved(self, keep: Callable[[_Helper], None]) -> _Helper:
        """Start the helper whose slot the caller reserved (``_starting``); ``keep`` it unless closed meanwhile.

        Raises:
            RuntimeError: the backend was closed while the helper started (it is stopped).
            HelperProcessError / Exception: as :meth:`_start`.
        """
        try:
            helper, _ = self._start()
        finally:
            with self._lock:
                self._starting -= 1
        with self._lock:
            if not self._closed:
                keep(helper)
                return helper
        helper.stop(5.0)
        raise RuntimeError("ProcessBackend is closed")

    def _checkin(self, helper: _Helper) -> None:
        with self._lock:
            self._busy.discard(helper)
            if not self._closed:
                self._idle.append(helper)
                return
        helper.stop(5.0)

    def _retire(self, helper: _Helper) -> None:
        with self._lock:
            self._busy.discard(helper)
        helper.kill()

    def _error(self, reply: bytes, helper: _Helper) -> BaseException:
        status, payload = reply[0], reply[1:]
        where = f"in helper process {helper.process.pid} of {self.description}"
        if status == _RAISED:
            try:
                exc = pickle.loads(payload)
            except Exception as unpickling:
                return HelperProcessError(f"an exception {where} could not be read back: {unpickling}")
            if isinstance(exc, BaseException):
                add_note = getattr(exc, "add_note", None)  # Python 3.11+
                if add_note is not None:
                    add_note(f"raised {where}")
                return exc
        text = payload.decode("utf-8", "replace")
        return HelperProcessError(f"{text} (raised {where})")
