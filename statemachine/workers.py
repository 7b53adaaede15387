"""Workers: the drivers that run backend calls for the core.

A worker receives :class:`Batch` es from the manager's ``flush`` and publishes
one :class:`GroupOutcome` per :class:`ProbeGroup` through the ``publish``
callable it was started with (the core's inbox ``deque.append``: atomic, so
no lock).  It touches nothing else of the manager.

* :class:`ThreadedWorker` (the default) runs up to ``max_concurrent_groups``
  groups at once, each on a *caller* thread, and publishes each group as soon
  as it is done.  With a timeout, a call that overstays is reported as
  TIMEOUT and its caller is set aside as *stuck*.  Policy for calls that never
  return: at most ``max_stuck_calls`` callers may be stuck at once; while
  that many are, further groups fail at once as SATURATED instead of starting
  yet another thread, so threads stay bounded and nothing waits.  A stuck
  call that eventually returns publishes its answer marked ``late`` (the core
  drops it) and its caller goes back to work.  The shape it follows (states,
  actions, death marker) is ``docs/worker.md``.
* :class:`ManualWorker` lets tests pump the worker step by step: take a batch,
  complete, fail, time out or saturate any group, die with or without the
  death marker, in any order.
"""

from __future__ import annotations

import numbers
import os
import queue
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Protocol

from kvprobe.backends.base import Backend
from kvprobe.statemachine.cpu_gate import DEFAULT_HOLD_S, BusyClock, CpuGate, thread_busy_clock
from kvprobe.statemachine.trace import WorkerTracer, worker_tracer
from kvprobe.statemachine.types import (
    Batch,
    FailureKind,
    GroupOutcome,
    InvalidInputError,
    InvalidValueError,
    ProbeGroup,
    death_marker,
)

__all__ = [
    "DEFAULT_CONCURRENT_GROUPS",
    "DEFAULT_HOLD_S",
    "ManualWorker",
    "Publish",
    "ThreadedWorker",
    "Worker",
    "check_count",
    "check_hold",
    "check_timeout",
    "probe_group",
]

Publish = Callable[[GroupOutcome], None]


class Worker(Protocol):
    """What the manager needs of a worker driver (the shape is ``docs/worker.md``).

    Optional: ``abandon()``, a lock-free stop that the manager's finalizer
    calls instead of ``stop(0)`` when the manager is collected unshut; and
    publishing :func:`~kvprobe.statemachine.types.death_marker` when the
    worker dies, so that a ``lookup`` notices.
    """

    def start(self, backend: Backend, publish: Publish) -> None:
        """Begin serving; called once at construction and again after a death."""

    def submit(self, batch: Batch) -> None:
        """Queue a batch; must not block."""

    def is_alive(self) -> bool:
        """False once the worker can no longer deliver the groups it was given."""

    def stop(self, timeout_s: float) -> None:
        """Stop serving and discard anything published later; wait at most ``timeout_s``."""


def probe_group(backend: Backend, group: ProbeGroup) -> GroupOutcome:
    """Call ``backend.batch_lookup`` for one group and check what it returns.

    Never raises for an ``Exception`` from the backend: a raise at call time,
    a raise while its iterable is consumed, too few or too many results, or a
    result that is not a ``bool`` becomes a failed outcome naming the problem.
    """
    keys = list(group.keys)
    expected = len(keys)
    try:
        result = backend.batch_lookup(keys, group.req_context)
    except Exception as exc:
        return GroupOutcome(group, None, FailureKind.RAISED, _describe(exc))
    if type(result) is list and len(result) == expected and set(map(type, result)) <= _BOOL_ONLY:
        # The common answer, checked in C: a large group's verdicts would
        # otherwise hold the GIL for a Python loop the scheduler waits on.
        return GroupOutcome(group, tuple(result))
    verdicts: list[bool] = []
    try:
        for verdict in result:
            if len(verdicts) == expected:
                return GroupOutcome(group, None, FailureKind.LONG_RESULT, f"more than {expected} results")
            if verdict is not True and verdict is not False:
                return GroupOutcome(
                    group, None, FailureKind.BAD_VERDICT, f"result {len(verdicts)} is {type(verdict).__name__}"
                )
            verdicts.append(verdict)
    except Exception as exc:
        return GroupOutcome(group, None, FailureKind.RAISED_WHILE_ITERATING, _describe(exc))
    if len(verdicts) < expected:
        return GroupOutcome(group, None, FailureKind.SHORT_RESULT, f"{len(verdicts)} results for {expected} keys")
    return GroupOutcome(group, tuple(verdicts))


_BOOL_ONLY = frozenset({bool})


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[:500]


def _discard(outcome: GroupOutcome) -> None:
    del outcome


_STOP = object()

#: Groups the threaded worker runs at once by default.  Four keeps a slow
#: group from holding back the fast ones behind it while keeping threads few
#: (the machine a scheduler runs on has other work).
DEFAULT_CONCURRENT_GROUPS = 4


def check_timeout(name: str, value: object) -> float:
    """``value`` as a float number of seconds that ``threading`` can wait for.

    Raises:
        InvalidInputError: not a real number (``bool`` excluded).
        InvalidValueError: not positive, not finite, or above
            ``threading.TIMEOUT_MAX`` (an ``Event.wait`` would raise
            ``OverflowError`` on the worker for every group).
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise InvalidInputError(f"{name} must be a number of seconds, got {type(value).__name__}")
    seconds = float(value)
    if not 0 < seconds <= threading.TIMEOUT_MAX:
        raise InvalidValueError(
            f"{name} must be positive and finite, got {value!r} "
            f"(at most threading.TIMEOUT_MAX = {threading.TIMEOUT_MAX:.0f} s)"
        )
    return seconds


def check_hold(name: str, value: object) -> float:
    """``value`` as a float number of seconds, 0 or more, that ``threading`` can wait for.

    Raises:
        InvalidInputError: not a real number (``bool`` excluded).
        InvalidValueError: negative, not finite, or above ``threading.TIMEOUT_MAX``.
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise InvalidInputError(f"{name} must be a number of seconds, got {type(value).__name__}")
    seconds = float(value)
    if not 0 <= seconds <= threading.TIMEOUT_MAX:
        raise InvalidValueError(
            f"{name} must be 0 or more and finite, got {value!r} "
            f"(at most threading.TIMEOUT_MAX = {threading.TIMEOUT_MAX:.0f} s)"
        )
    return seconds


def _backend_cpu(backend: Backend | None) -> Callable[[int], float] | None:
    """The backend's ``cpu_seconds_of(thread_id)``, if it has one."""
    gauge = getattr(backend, "cpu_seconds_of", None)
    return gauge if callable(gauge) else None


def check_count(name: str, value: object) -> int:
    """``value`` if it is an int of at least 1.

    Raises:
        InvalidInputError: not an ``int`` (``bool`` excluded).
        InvalidValueError: less than 1.
    """
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidInputError(f"{name} must be an int, got {type(value).__name__}")
    if value < 1:
        raise InvalidValueError(f"{name} must be at least 1, got {value}")
    return value


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
    process serving it included) or has run ``busy_call_hold_s``: calls that
    compute together only take the scheduler's CPU and GIL
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
            busy hold back a further group (0: start one whenever a slot
            is free).

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
        self._publish: Publish = _discard
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
            self._publish = _discard
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
        self._publish = _discard
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
                    self._send("FailGroup", GroupOutcome(group, None, FailureKind.WORKER_ERROR, _describe(exc)))

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
                    self._send("TimeOut", GroupOutcome(call.group, None, FailureKind.TIMEOUT, detail))

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
                        call.group, None, FailureKind.RAISED, "caller thread ended: " + _describe(exc)
                    )
                with self._lock:
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


def _workers_after_fork() -> None:
    for worker in list(_LIVE_WORKERS):
        worker._after_fork_in_child()


os.register_at_fork(after_in_child=_workers_after_fork)


class ManualWorker:
    """A worker that does nothing until the test says so.

    ``submitted`` is the submission queue (batches not yet taken); ``taken``
    holds the groups of taken batches that have no outcome yet (or only a
    timeout, so that a late answer can still be delivered); ``timed_out``
    are those of them whose call is stuck.  ``stray`` holds the stuck calls of
    an earlier life of the worker (before a death, or before a revival): as in
    the model, a stuck call outlives its dispatcher and may still answer late.

    Args:
        max_stuck_calls: the bound of :meth:`saturate` (the threaded worker's
            ``max_stuck_calls``); None: no bound, nothing saturates.  With a
            bound, every trace event of the worker also records ``stuck`` and
            ``max_stuck``, as the threaded worker's do.

    Raises:
        InvalidInputError: ``max_stuck_calls`` is not an int.
        InvalidValueError: ``max_stuck_calls`` is below 1.
    """

    def __init__(self, *, max_stuck_calls: int | None = None) -> None:
        self.max_stuck_calls = None if max_stuck_calls is None else check_count("max_stuck_calls", max_stuck_calls)
        self.submitted: deque[Batch] = deque()
        self.taken: dict[int, ProbeGroup] = {}
        self.timed_out: set[int] = set()
        self.stray: dict[int, ProbeGroup] = {}
        #: Whether the worker died publishing its death marker (until it is started again).
        self.marker_published = False
        self._backend: Backend | None = None
        self._publish: Publish = _discard
        self._alive = False
        self._trace: WorkerTracer | None = None

    @property
    def stuck_calls(self) -> int:
        """Calls stuck past their timeout: this life's (``timed_out``) and earlier ones' (``stray``)."""
        return len(self.timed_out) + len(self.stray)

    def start(self, backend: Backend, publish: Publish) -> None:
        revived = self._backend is not None
        self._backend = backend
        self._publish = publish
        self._trace = worker_tracer(publish)
        self._alive = True
        self.marker_published = False
        self._set_stuck_aside()
        self.submitted.clear()
        self.taken.clear()
        if revived:
            self._log("Revive")

    def submit(self, batch: Batch) -> None:
        self.submitted.append(batch)

    def is_alive(self) -> bool:
        return self._alive

    def stop(self, timeout_s: float) -> None:
        del timeout_s
        self._alive = False
        self._publish = _discard

    def die(self, *, publish_marker: bool = False) -> None:
        """Die: the worker ends with everything it holds.

        With ``publish_marker`` it publishes the death marker, as the threaded
        worker's dispatcher does (``docs/worker.md``, the model's ``Die``): its
        queue and running calls are lost (the lists are emptied), its stuck
        calls move to ``stray``, and the core's next drain, a ``lookup``
        included, fails every open group.  Without it the worker keeps what it
        held and the death is noticed only at the next ``flush``/``drain_results``
        (Revive).
        """
        self._alive = False
        if publish_marker:
            self._set_stuck_aside()
            self.submitted.clear()
            self.taken.clear()
            self.marker_published = True
            self._publish(death_marker("manual worker died"))
            self._log("Die")

    def _set_stuck_aside(self) -> None:
        # The stuck calls outlive this life of the worker; the rest of ``taken`` is lost.
        for gid in sorted(self.timed_out):
            self.stray[gid] = self.taken.pop(gid)
        self.timed_out.clear()

    def take_batch(self) -> Batch | None:
        """TakeBatch: move the oldest submitted batch into ``taken``."""
        if not self.submitted:
            return None
        batch = self.submitted.popleft()
        for group in batch.groups:
            self.taken[group.group_id] = group
        self._log("TakeBatch", batch=batch.batch_id, groups=[g.group_id for g in batch.groups])
        return batch

    def _is_stuck(self, group: ProbeGroup) -> bool:
        return group.group_id in self.timed_out or group.group_id in self.stray

    def complete(self, group: ProbeGroup, verdicts: Sequence[bool] | None = None) -> GroupOutcome:
        """CompleteGroup: publish the backend's answer (or the given verdicts).

        After :meth:`time_out` (a stuck call, also one of ``stray``) the answer
        is published as ``late`` (LateAnswer).  Raises ``ValueError`` if the
        group is neither taken nor stuck, or for a wrong number of verdicts.
        """
        late = self._is_stuck(group)
        if verdicts is None:
            assert self._backend is not None, "worker not started"
            outcome = probe_group(self._backend, group)
        else:
            if len(verdicts) != len(group.states):
                raise ValueError(f"{len(verdicts)} verdicts for {len(group.states)} keys")
            outcome = GroupOutcome(group, tuple(verdicts))
        outcome = self._deliver(group, outcome)
        self._log_outcome(outcome, late)
        return outcome

    def fail(self, group: ProbeGroup, failure: FailureKind = FailureKind.RAISED, detail: str = "") -> GroupOutcome:
        """FailGroup: publish a failure for the group (late for a stuck call).

        Raises ``ValueError`` if the group is neither taken nor stuck.
        """
        late = self._is_stuck(group)
        outcome = self._deliver(group, GroupOutcome(group, None, failure, detail))
        self._log_outcome(outcome, late)
        return outcome

    def time_out(self, group: ProbeGroup) -> GroupOutcome:
        """TimeOut: publish TIMEOUT; the group stays taken so a late answer can follow."""
        if group.group_id not in self.taken or group.group_id in self.timed_out:
            raise ValueError(f"group {group.group_id} is not taken or already timed out")
        self.timed_out.add(group.group_id)
        outcome = GroupOutcome(group, None, FailureKind.TIMEOUT, "timed out (manual)")
        self._publish(outcome)
        self._log("TimeOut", group=group.group_id)
        return outcome

    def saturate(self, group: ProbeGroup) -> GroupOutcome:
        """Saturate: while ``max_stuck_calls`` calls are stuck, a taken group fails at
        once as SATURATED, without a backend call (as the threaded worker's
        dispatcher does instead of starting another call).

        Raises:
            ValueError: no bound is configured, fewer calls are stuck, or the
                group is not taken or already timed out (nothing is published).
        """
        bound = self.max_stuck_calls
        if bound is None or self.stuck_calls < bound:
            raise ValueError(f"Saturate: {self.stuck_calls} calls stuck, the bound is {bound}")
        if group.group_id not in self.taken or group.group_id in self.timed_out:
            raise ValueError(f"group {group.group_id} is not taken or already timed out")
        detail = f"{self.stuck_calls} calls stuck past the timeout (manual)"
        outcome = self._deliver(group, GroupOutcome(group, None, FailureKind.SATURATED, detail))
        self._log("Saturate", group=group.group_id)
        return outcome

    def _log_outcome(self, outcome: GroupOutcome, late: bool) -> None:
        if self._trace is not None:
            action = "LateAnswer" if late else "CompleteGroup" if outcome.verdicts is not None else "FailGroup"
            verdicts = None if outcome.verdicts is None else list(outcome.verdicts)
            failure = None if outcome.failure is None else outcome.failure.value
            self._log(action, group=outcome.group.group_id, verdicts=verdicts, failure=failure)

    def _log(self, action: str, **fields: object) -> None:
        """Log a worker action with the groups held after it (taken and not timed out)
        and, with a bound, the calls stuck."""
        if self._trace is not None:
            # A dead worker holds nothing: the groups it had are lost.
            held = sorted(set(self.taken) - self.timed_out) if self._alive else []
            if self.max_stuck_calls is not None:
                fields.update(stuck=self.stuck_calls, max_stuck=self.max_stuck_calls)
            self._trace.log(action, {**fields, "held": held})

    def _deliver(self, group: ProbeGroup, outcome: GroupOutcome) -> GroupOutcome:
        gid = group.group_id
        late = self._is_stuck(group)
        if self.taken.pop(gid, None) is None and self.stray.pop(gid, None) is None:
            raise ValueError(f"group {gid} was not taken")
        self.timed_out.discard(gid)
        if late:
            outcome = replace(outcome, late=True)
        self._publish(outcome)
        return outcome

    def run_all(self) -> int:
        """Take every submitted batch and complete each group through the backend."""
        done = 0
        while (batch := self.take_batch()) is not None:
            for group in batch.groups:
                self.complete(group)
                done += 1
        return done
