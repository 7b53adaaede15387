"""The threaded worker: groups run at once on caller threads, each published when done.

:class:`ThreadedWorker` is the default worker.  A *dispatcher* thread takes
batches in order and hands each group to a *caller* thread; each caller
publishes its group's outcome the moment the backend returns.  The
dispatcher's side (start a call, time out the overdue) and the callers'
(run one call, publish, go back to the pool) are the two halves of the
class below; the fork handling at the end keeps a forked child from waiting
on threads that stayed in the parent.  The shape it follows (states,
actions, death marker) is ``docs/worker.md``; when a further group may start
beside running calls is :mod:`kvprobe.statemachine.cpu_gate`.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import queue
import sys
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable
from dataclasses import replace

from kvprobe.backends.base import Backend
from kvprobe.statemachine.cpu_gate import DEFAULT_HOLD_S, BusyClock, CpuGate, thread_busy_clock
from kvprobe.statemachine.trace import WorkerTracer, worker_tracer
from kvprobe.statemachine.types import (
    Batch,
    FailureKind,
    GroupOutcome,
    InvalidInputError,
    ProbeGroup,
    death_marker,
)
from kvprobe.statemachine.worker_base import (
    Publish,
    check_count,
    check_hold,
    check_timeout,
    describe_exception,
    discard_outcome,
    probe_group,
)

__all__ = [
    "DEFAULT_CONCURRENT_GROUPS",
    "EXIT_WAIT_S",
    "ThreadedWorker",
    "end_before_finalization",
    "stop_live_workers",
]

_STOP = object()

#: Groups the threaded worker runs at once by default.  Four keeps a slow
#: group from holding back the fast ones behind it while keeping threads few
#: (the machine a scheduler runs on has other work).
DEFAULT_CONCURRENT_GROUPS = 4

#: How long the exit hook waits, in all, for backend calls still running.
#: A call still inside NIXL when the interpreter finalizes aborts the
#: process ("terminate called without an active exception": the thread
#: coming back for the GIL is ended by an unwind through C++); one
#: ``query_memory`` of vLLM's object tier (64 HEADs on its 4 I/O threads,
#: half of them throttled and retried by the AWS SDK) was measured at 10 s.
#: A call that outlives the wait is never let back: the hook ends the
#: process before the interpreter finalizes (:func:`end_before_finalization`).
EXIT_WAIT_S = 30.0


def _backend_cpu(backend: Backend | None) -> Callable[[int], float] | None:
    """The backend's ``cpu_seconds_of(thread_id)``, if it has one."""
    gauge = getattr(backend, "cpu_seconds_of", None)
    return gauge if callable(gauge) else None


class _Call:
    """One backend call handed to a caller thread."""

    __slots__ = ("clock", "deadline", "events", "group", "lost", "outcome", "started", "thread_id", "timed_out")

    def __init__(
        self,
        group: ProbeGroup,
        events: queue.SimpleQueue[object],
        started: float,
        deadline: float,
        caller: tuple[int, BusyClock | None],
    ) -> None:
        self.group = group
        self.events = events  # the dispatcher that started it is told when it ends
        self.started = started
        self.deadline = deadline
        self.thread_id, self.clock = caller  # its caller thread, for the CPU gate
        self.outcome: GroupOutcome | None = None
        self.timed_out = False
        self.lost = False  # its dispatcher died while it ran: its answer is not published


class ThreadedWorker:
    """Runs up to ``max_concurrent_groups`` groups at once on caller threads.

    A *dispatcher* thread takes batches in order and hands each group to a
    caller thread (an idle one, or a new one) while fewer than
    ``max_concurrent_groups`` calls run; each caller publishes its group's
    outcome the moment the backend returns, so one slow group holds back no
    other.  With a timeout, the dispatcher reports a call that overstays as
    TIMEOUT and sets its caller aside as *stuck*; while ``max_stuck_calls``
    are stuck, further groups fail at once as SATURATED.  A stuck call that
    returns publishes its answer marked ``late`` (the core drops it) and its
    caller goes back to the pool.  Threads: 1 dispatcher + at most
    ``max_concurrent_groups`` busy callers + ``max_stuck_calls`` stuck ones.

    A further group starts beside running calls only while each of them
    waits rather than computes (busy under a fifth of the time, the helper
    process serving it included) or has run ``busy_call_hold_s``, and at the
    latest ``busy_call_hold_s`` after its slot was free: calls that compute
    together only take the scheduler's CPU and GIL
    (:mod:`kvprobe.statemachine.cpu_gate`).

    The worker survives any ``Exception`` of its own machinery (the group
    concerned fails as WORKER_ERROR); if the dispatcher ends anyway it
    publishes a death marker, and in a child process after ``os.fork()``
    (where its threads do not exist) it publishes one too and forgets its
    threads, so the manager fails the open groups and starts afresh.
    A worker that nobody references any more is stopped by the manager's
    finalizer.

    Args:
        name: used in thread names.
        lookup_timeout_s: a call slower than this is reported as TIMEOUT
            (None: wait as long as the backend takes).
        max_stuck_calls: bound on calls left running past their timeout.
        max_concurrent_groups: groups whose calls run at once.
        busy_call_hold_s: the longest that running calls which keep a CPU
            busy hold back a further group, counted from its slot being
            free (0: start one whenever a slot is free).

    Raises:
        InvalidInputError: an argument has the wrong type.
        InvalidValueError: a count below 1, a timeout that is not a
            positive number of seconds ``threading`` can wait for, or a
            negative ``busy_call_hold_s``.
    """

    def __init__(
        self,
        *,
        name: str = "tier",
        lookup_timeout_s: float | None = None,
        max_stuck_calls: int = 4,
        max_concurrent_groups: int = DEFAULT_CONCURRENT_GROUPS,
        busy_call_hold_s: float = DEFAULT_HOLD_S,
    ) -> None:
        if not isinstance(name, str):
            raise InvalidInputError(f"name must be a str, got {type(name).__name__}")
        self.name = name
        if lookup_timeout_s is not None:
            lookup_timeout_s = check_timeout("lookup_timeout_s", lookup_timeout_s)
        self.lookup_timeout_s = lookup_timeout_s
        self.max_stuck_calls = check_count("max_stuck_calls", max_stuck_calls)
        self.max_concurrent_groups = check_count("max_concurrent_groups", max_concurrent_groups)
        self.busy_call_hold_s = check_hold("busy_call_hold_s", busy_call_hold_s)
        self._backend: Backend | None = None
        self._publish: Publish = discard_outcome
        self._events: queue.SimpleQueue[object] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._idle: list[queue.SimpleQueue[object]] = []
        self._threads: set[threading.Thread] = set()  # every thread of this worker still running
        # Each live caller's thread id and busy clock, for the CPU gate.
        self._caller_ids: dict[queue.SimpleQueue[object], tuple[int, BusyClock | None]] = {}
        self._callers = 0
        self._stuck = 0
        self._stopping = False
        self._pid = os.getpid()
        self._trace: WorkerTracer | None = None  # set by start() when the manager is traced
        _LIVE_WORKERS.add(self)

    @property
    def stuck_calls(self) -> int:
        """Calls currently running past their timeout."""
        return self._stuck

    @property
    def caller_threads(self) -> int:
        """Caller threads alive (idle, busy or stuck)."""
        return self._callers

    @property
    def threads(self) -> list[threading.Thread]:
        """The threads this worker started that are still running (dispatcher and callers)."""
        with self._lock:
            return list(self._threads)

    def start(self, backend: Backend, publish: Publish) -> None:
        """Start a dispatcher (again, after a death) serving ``backend``.

        Tells a backend with ``fit_concurrency(n)`` (such as ``ProcessBackend``)
        how many calls may run at once.
        """
        if os.getpid() != self._pid:
            self._forget_threads()
        fit = getattr(backend, "fit_concurrency", None)
        if callable(fit):
            fit(self.max_concurrent_groups + (self.max_stuck_calls if self.lookup_timeout_s is not None else 0))
        revived = self._backend is not None
        self._trace = worker_tracer(publish)
        self._backend = backend
        self._publish = publish
        self._stopping = False
        events: queue.SimpleQueue[object] = queue.SimpleQueue()
        self._events = events  # a dead dispatcher's queue is abandoned with it
        thread = threading.Thread(target=self._dispatch, args=(events,), name=f"kvprobe-{self.name}", daemon=True)
        with self._lock:
            self._threads.add(thread)
        self._thread = thread
        try:
            thread.start()
        except BaseException:
            with self._lock:
                self._threads.discard(thread)
            raise
        if revived and self._trace is not None:
            self._trace.log("Revive", self._trace_state())

    def submit(self, batch: Batch) -> None:
        """Queue ``batch`` for the dispatcher (never blocks)."""
        self._events.put(batch)

    def is_alive(self) -> bool:
        """Whether the dispatcher thread runs (False in a fork child, where it does not exist)."""
        return self._thread is not None and self._thread.is_alive() and self._pid == os.getpid()

    def stop(self, timeout_s: float) -> None:
        """Stop: nothing published from now on reaches the manager; idle callers end now,
        busy and stuck ones as soon as their call returns.  Waits at most ``timeout_s``
        for the dispatcher.  Never raises."""
        if os.getpid() != self._pid:
            self._forget_threads()
        # Under the lock: once stop() returns, nothing reaches the old publish.
        with self._lock:
            self._stopping = True
            self._publish = discard_outcome
            idle, self._idle = self._idle, []
        for calls in idle:
            calls.put(_STOP)
        self._events.put(_STOP)
        thread = self._thread
        if thread is not None and thread is not threading.current_thread() and timeout_s > 0:
            thread.join(timeout_s)

    def abandon(self) -> None:
        """Stop without taking a lock or waiting (a finalizer may run on any thread,
        even one inside this worker's locked code).  The dispatcher ends and
        tells the idle callers to end; busy ones end when their call returns."""
        self._stopping = True
        self._publish = discard_outcome
        self._events.put(_STOP)

    # --- the dispatcher ---------------------------------------------------------

    def _dispatch(self, events: queue.SimpleQueue[object]) -> None:
        pending: deque[ProbeGroup] = deque()
        # Calls started and neither finished nor timed out, oldest first: all
        # share one timeout, so the first has the earliest deadline.
        running: dict[_Call, None] = {}
        timeout = self.lookup_timeout_s
        gate = CpuGate(self.busy_call_hold_s, _backend_cpu(self._backend))
        ended_as_asked = False
        try:
            while True:
                wait: float | None = None
                while pending and len(running) < self.max_concurrent_groups:
                    held = gate.wait_s(running, time.monotonic())
                    if held > 0:
                        wait = held
                        break
                    self._start_call(pending.popleft(), events, running)
                else:
                    gate.no_demand()  # the gate's bound counts from a group's free slot
                if timeout is not None and running:
                    overdue = min(max(0.0, next(iter(running)).deadline - time.monotonic()), threading.TIMEOUT_MAX)
                    wait = overdue if wait is None else min(wait, overdue)
                try:
                    item = events.get(timeout=wait)
                except queue.Empty:
                    item = None
                if item is _STOP:
                    ended_as_asked = True
                    with self._lock:
                        idle, self._idle = self._idle, []
                    for calls in idle:
                        calls.put(_STOP)
                    return
                if isinstance(item, Batch):
                    if not self._stopping:
                        pending.extend(item.groups)
                        if self._trace is not None:
                            self._trace_take(item)
                elif isinstance(item, _Call):
                    running.pop(item, None)
                if timeout is not None and running:
                    self._time_out_overdue(running)
        finally:
            with self._lock:
                self._threads.discard(threading.current_thread())
                if not ended_as_asked and not self._stopping:
                    # The groups it held are lost: the marker makes the core fail
                    # them at its next drain (a lookup is enough).  Their calls
                    # still running must not publish after it (the model's Die
                    # loses them); calls already timed out are stuck, not held,
                    # and may still answer late.
                    for call in running:
                        call.lost = True
                    self._send("Die", death_marker(f"worker {self.name!r} dispatcher ended unexpectedly"))

    def _start_call(self, group: ProbeGroup, events: queue.SimpleQueue[object], running: dict[_Call, None]) -> None:
        try:
            with self._lock:
                if self._stopping:
                    return
                if self.lookup_timeout_s is not None and self._stuck >= self.max_stuck_calls:
                    self._send(
                        "Saturate",
                        GroupOutcome(group, None, FailureKind.SATURATED, f"{self._stuck} calls stuck past the timeout"),
                    )
                    return
                caller = self._idle.pop() if self._idle else None
            if caller is None:
                caller = self._new_caller()
            timeout = self.lookup_timeout_s
            now = time.monotonic()
            ids = self._caller_ids.get(caller, (0, None))
            call = _Call(group, events, now, now + timeout if timeout is not None else 0.0, ids)
            running[call] = None
            caller.put(call)
        except Exception as exc:
            # Our own machinery failed (a thread could not start, ...): this
            # group fails; the dispatcher carries on with the next.
            with self._lock:
                if not self._stopping:
                    self._send(
                        "FailGroup", GroupOutcome(group, None, FailureKind.WORKER_ERROR, describe_exception(exc))
                    )

    def _time_out_overdue(self, running: dict[_Call, None]) -> None:
        now = time.monotonic()
        while running:
            call = next(iter(running))
            if call.deadline > now:
                return
            del running[call]
            with self._lock:
                if call.outcome is not None:
                    continue  # it returned just now and published itself
                call.timed_out = True
                self._stuck += 1
                if not self._stopping:
                    detail = f"no answer within {self.lookup_timeout_s} s"
                    given_up = GroupOutcome(call.group, None, FailureKind.TIMEOUT, detail, call_s=now - call.started)
                    self._send("TimeOut", given_up)

    # --- caller threads ---------------------------------------------------------

    def _new_caller(self) -> queue.SimpleQueue[object]:
        calls: queue.SimpleQueue[object] = queue.SimpleQueue()
        thread = threading.Thread(target=self._call_loop, args=(calls,), name=f"kvprobe-{self.name}-call", daemon=True)
        with self._lock:
            self._callers += 1
            self._threads.add(thread)
        try:
            thread.start()
        except BaseException:
            with self._lock:
                self._callers -= 1
                self._threads.discard(thread)
            raise
        ident = thread.ident
        assert ident is not None  # started
        with self._lock:
            if thread.is_alive():
                self._caller_ids[calls] = (ident, thread_busy_clock(thread))
        return calls

    def _call_loop(self, calls: queue.SimpleQueue[object]) -> None:
        try:
            while True:
                call = calls.get()
                if not isinstance(call, _Call):
                    return
                backend = self._backend
                assert backend is not None
                ending: BaseException | None = None
                try:
                    outcome = probe_group(backend, call.group)
                except BaseException as exc:
                    # SystemExit and the like end this thread, as they would
                    # any thread; but the call still gets an answer and its
                    # slot is released, or the group would wait for ever.
                    ending = exc
                    outcome = GroupOutcome(
                        call.group, None, FailureKind.RAISED, "caller thread ended: " + describe_exception(exc)
                    )
                with self._lock:
                    if self._trace is not None and not self._stopping and not call.lost:
                        # Logged before the stuck count drops: the model's
                        # worker state at the return is the one before it.
                        self._trace.call_returned(outcome, **self._trace_state())
                    call.outcome = outcome
                    if call.timed_out:
                        self._stuck -= 1
                        outcome = replace(outcome, late=True)
                    # Published under the lock and only if not stopped: a call
                    # that outlived shutdown must not reach the closed manager.
                    if not self._stopping and not call.lost:
                        answered = "CompleteGroup" if outcome.verdicts is not None else "FailGroup"
                        self._send("LateAnswer" if call.timed_out else answered, outcome)
                    keep_going = ending is None and not self._stopping
                    if keep_going:
                        self._idle.append(calls)
                call.events.put(call)  # frees its slot in the dispatcher
                if ending is not None:
                    raise ending
                if not keep_going:
                    return
        finally:
            with self._lock:
                self._callers -= 1
                self._threads.discard(threading.current_thread())
                self._caller_ids.pop(calls, None)

    # --- fork -------------------------------------------------------------------

    def _forget_threads(self) -> None:
        """In a fork child: the parent's threads do not exist here; start from nothing."""
        self._pid = os.getpid()
        self._lock = threading.Lock()  # it may have been held by a thread that is not here
        self._idle = []
        self._threads = set()
        self._caller_ids = {}
        self._callers = 0
        self._stuck = 0
        self._thread = None
        self._events = queue.SimpleQueue()

    def _after_fork_in_child(self) -> None:
        self._forget_threads()
        if not self._stopping:
            # Groups the parent's threads held will never be answered here.
            self._send("Die", death_marker(f"worker {self.name!r} forked: its threads stayed in the parent"))

    # --- trace events (only when the manager is traced) -------------------------

    def _send(self, action: str, outcome: GroupOutcome) -> None:
        """Publish ``outcome``, logging it as the TLA+ action ``action`` if traced (caller holds the lock)."""
        trace = self._trace
        if trace is None:
            self._publish(outcome)
        else:
            trace.publish(action, outcome, self._publish, **self._trace_state())

    def _trace_take(self, batch: Batch) -> None:
        assert self._trace is not None
        with self._lock:
            if not self._stopping:
                fields = {"batch": batch.batch_id, "groups": [g.group_id for g in batch.groups]}
                self._trace.log("TakeBatch", {**fields, **self._trace_state()}, on_worker_thread=True)

    def _trace_state(self) -> dict[str, object]:
        return {"stuck": self._stuck, "max_stuck": self.max_stuck_calls}


_LIVE_WORKERS: weakref.WeakSet[ThreadedWorker] = weakref.WeakSet()


def stop_live_workers(wait_s: float) -> list[threading.Thread]:
    """Stop every threaded worker of this process and wait for their backend calls to return.

    Each worker is stopped as :meth:`ThreadedWorker.stop` does (groups not
    started are dropped, nothing more is published, callers end when their
    call returns); then every worker thread is joined, all of them within
    ``wait_s`` seconds in total.  Returns the threads still running then
    (their calls outlived the wait).  Never raises.
    """
    workers = [worker for worker in list(_LIVE_WORKERS) if worker._pid == os.getpid()]
    for worker in workers:
        worker.stop(0.0)
    deadline = time.monotonic() + wait_s
    me = threading.current_thread()
    left: list[threading.Thread] = []
    for worker in workers:
        for thread in worker.threads:
            if thread is not me:
                thread.join(max(0.0, deadline - time.monotonic()))
                if thread.is_alive():
                    left.append(thread)
    return left


def end_before_finalization(left: list[threading.Thread]) -> None:
    """End the process now, with the exit status the interpreter would give, without finalizing it.

    For the exit hook, when ``left`` (threads still inside a backend call)
    is not empty.  A thread that returns from a C++ call (NIXL's
    ``query_memory``) while the interpreter finalizes is ended by an unwind
    through C++ and the process dies of SIGABRT; ``os._exit`` ends the
    process before that can happen, whenever the call returns.  Names the
    threads on stderr, shuts logging down and flushes the standard streams
    first (the ``atexit`` hooks not run yet, registered before this module
    was imported, are skipped).  The status is 1 after an uncaught
    exception (Python sets ``sys.last_value`` when it prints one), else 0:
    the code of a ``SystemExit`` is not visible to an exit hook.  Returns
    at once, doing nothing, when ``left`` is empty.
    """
    if not left:
        return
    status = 1 if getattr(sys, "last_value", None) is not None else 0
    names = ", ".join(sorted(thread.name for thread in left))
    with contextlib.suppress(Exception):  # a closed stderr must not keep the process alive
        sys.stderr.write(
            f"kvprobe: {len(left)} thread(s) still inside a backend call at exit ({names}); "
            f"ending the process with status {status} before the interpreter finalizes\n"
        )
    with contextlib.suppress(Exception):
        logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(status)


@atexit.register
def _stop_workers_at_exit() -> None:
    # Daemon threads left inside a backend's C++ call (NIXL) while the
    # interpreter finalizes make the process abort: wait for them here,
    # before finalization, whether or not the managers were shut down, and
    # end the process here if one outlives the wait.
    end_before_finalization(stop_live_workers(EXIT_WAIT_S))


def _workers_after_fork() -> None:
    for worker in list(_LIVE_WORKERS):
        worker._after_fork_in_child()


os.register_at_fork(after_in_child=_workers_after_fork)
