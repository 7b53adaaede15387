"""Workers: the drivers that run backend calls for the core.

A worker receives :class:`Batch` es from the manager's ``flush`` and publishes
one :class:`GroupOutcome` per :class:`ProbeGroup` through the ``publish``
callable it was started with (the core's inbox ``deque.append``: atomic, so
no lock).  It touches nothing else of the manager.

* :class:`ThreadedWorker` (the default) runs groups on a background thread and
  publishes each group as soon as it is done.  With a timeout, every call runs
  on a *caller* thread that the worker waits on; a call that overstays is
  reported as TIMEOUT and its caller is set aside as *stuck*.  Policy for calls
  that never return: at most ``max_stuck_calls`` callers may be stuck at once;
  while that many are, further groups fail at once as SATURATED instead of
  starting yet another thread, so threads stay bounded and nothing waits.  A
  stuck call that eventually returns publishes its answer marked ``late``
  (the core drops it) and its caller goes back to work.
* :class:`ManualWorker` lets tests pump the worker step by step: take a batch,
  complete, fail or time out any group, in any order.
"""

from __future__ import annotations

import queue
import threading
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Protocol

from kvprobe.backends.base import Backend
from kvprobe.statemachine.types import Batch, FailureKind, GroupOutcome, InvalidValueError, ProbeGroup

__all__ = ["ManualWorker", "Publish", "ThreadedWorker", "Worker", "probe_group"]

Publish = Callable[[GroupOutcome], None]


class Worker(Protocol):
    """What the manager needs of a worker driver."""

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


class _Call:
    """One backend call handed to a caller thread."""

    __slots__ = ("caller_gone", "done", "group", "outcome", "timed_out")

    def __init__(self, group: ProbeGroup) -> None:
        self.group = group
        self.done = threading.Event()
        self.outcome: GroupOutcome | None = None
        self.timed_out = False
        self.caller_gone = False  # the caller thread ended with this call


class ThreadedWorker:
    """Runs groups on a background thread; see the module docstring for timeouts.

    Args:
        name: used in thread names.
        lookup_timeout_s: a call slower than this is reported as TIMEOUT
            (None: wait as long as the backend takes).
        max_stuck_calls: bound on calls left running past their timeout.
    """

    def __init__(self, *, name: str = "tier", lookup_timeout_s: float | None = None, max_stuck_calls: int = 4) -> None:
        if max_stuck_calls < 1:
            raise InvalidValueError(f"max_stuck_calls must be at least 1, got {max_stuck_calls}")
        self.name = name
        self.lookup_timeout_s = lookup_timeout_s
        self.max_stuck_calls = max_stuck_calls
        self._backend: Backend | None = None
        self._publish: Publish = _discard
        self._queue: queue.SimpleQueue[object] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._idle: list[queue.SimpleQueue[object]] = []
        self._callers = 0
        self._stuck = 0
        self._stopping = False

    @property
    def stuck_calls(self) -> int:
        """Calls currently running past their timeout."""
        return self._stuck

    @property
    def caller_threads(self) -> int:
        """Caller threads alive (idle, busy or stuck); bounded by max_stuck_calls + 1."""
        return self._callers

    def start(self, backend: Backend, publish: Publish) -> None:
        self._backend = backend
        self._publish = publish
        self._stopping = False
        self._queue = queue.SimpleQueue()  # a dead worker's queue is abandoned with it
        self._thread = threading.Thread(
            target=self._serve, args=(self._queue,), name=f"kvprobe-{self.name}", daemon=True
        )
        self._thread.start()

    def submit(self, batch: Batch) -> None:
        self._queue.put(batch)

    def is_alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def stop(self, timeout_s: float) -> None:
        # Under the lock: once stop() returns, nothing reaches the old publish.
        with self._lock:
            self._stopping = True
            self._publish = _discard
        self._queue.put(_STOP)
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout_s)
        with self._lock:
            for jobs in self._idle:
                jobs.put(_STOP)
            self._idle.clear()

    def _serve(self, jobs: queue.SimpleQueue[object]) -> None:
        while True:
            batch = jobs.get()
            if batch is _STOP or not isinstance(batch, Batch):
                return
            for group in batch.groups:
                if self._stopping:
                    return
                outcome = self._run(group)
                # Publish under the lock and only if not stopped: a call that
                # outlived shutdown must not put its outcome into the closed
                # manager's inbox (``self._publish(self._run(g))`` would have
                # read the old publish before the call started).
                with self._lock:
                    if self._stopping:
                        return
                    self._publish(outcome)

    def _run(self, group: ProbeGroup) -> GroupOutcome:
        assert self._backend is not None
        timeout = self.lookup_timeout_s
        if timeout is None:
            return probe_group(self._backend, group)
        with self._lock:
            if self._idle:
                caller = self._idle.pop()
            elif self._stuck >= self.max_stuck_calls:
                return GroupOutcome(group, None, FailureKind.SATURATED, f"{self._stuck} calls stuck past the timeout")
            else:
                caller = self._new_caller()
        call = _Call(group)
        caller.put(call)
        if not call.done.wait(timeout):
            with self._lock:
                if call.outcome is None:
                    call.timed_out = True
                    self._stuck += 1
                    return GroupOutcome(group, None, FailureKind.TIMEOUT, f"no answer within {timeout} s")
        assert call.outcome is not None
        with self._lock:
            if call.caller_gone:
                pass
            elif self._stopping:
                # stop() has already told the idle callers to end; this one
                # was busy then, so it is told now or it would wait forever.
                caller.put(_STOP)
            else:
                self._idle.append(caller)
        return call.outcome

    def _new_caller(self) -> queue.SimpleQueue[object]:
        calls: queue.SimpleQueue[object] = queue.SimpleQueue()
        self._callers += 1
        thread = threading.Thread(target=self._call_loop, args=(calls,), name=f"kvprobe-{self.name}-call", daemon=True)
        thread.start()
        return calls

    def _call_loop(self, calls: queue.SimpleQueue[object]) -> None:
        try:
            while True:
                call = calls.get()
                if not isinstance(call, _Call):
                    return
                assert self._backend is not None
                ending: BaseException | None = None
                try:
                    outcome = probe_group(self._backend, call.group)
                except BaseException as exc:
                    # SystemExit and the like end this thread, as they would
                    # any thread; but the call still gets an answer and its
                    # slot is released, or a dead caller would count as stuck
                    # for ever and enough of them would saturate the worker.
                    ending = exc
                    outcome = GroupOutcome(
                        call.group, None, FailureKind.RAISED, "caller thread ended: " + _describe(exc)
                    )
                with self._lock:
                    call.outcome = outcome
                    call.caller_gone = ending is not None
                    if call.timed_out:
                        # The worker has moved on; this caller is free again.
                        self._stuck -= 1
                        self._publish(replace(outcome, late=True))
                        if self._stopping or ending is not None:
                            return
                        self._idle.append(calls)
                call.done.set()
                if ending is not None:
                    raise ending
        finally:
            with self._lock:
                self._callers -= 1


class ManualWorker:
    """A worker that does nothing until the test says so.

    ``submitted`` is the submission queue (batches not yet taken); ``taken``
    holds the groups of taken batches that have no outcome yet (or only a
    timeout, so that a late answer can still be delivered).
    """

    def __init__(self) -> None:
        self.submitted: deque[Batch] = deque()
        self.taken: dict[int, ProbeGroup] = {}
        self.timed_out: set[int] = set()
        self._backend: Backend | None = None
        self._publish: Publish = _discard
        self._alive = False

    def start(self, backend: Backend, publish: Publish) -> None:
        self._backend = backend
        self._publish = publish
        self._alive = True
        self.submitted.clear()
        self.taken.clear()
        self.timed_out.clear()

    def submit(self, batch: Batch) -> None:
        self.submitted.append(batch)

    def is_alive(self) -> bool:
        return self._alive

    def stop(self, timeout_s: float) -> None:
        del timeout_s
        self._alive = False
        self._publish = _discard

    def die(self) -> None:
        """Simulate the worker thread dying with everything it holds."""
        self._alive = False

    def take_batch(self) -> Batch | None:
        """TakeBatch: move the oldest submitted batch into ``taken``."""
        if not self.submitted:
            return None
        batch = self.submitted.popleft()
        for group in batch.groups:
            self.taken[group.group_id] = group
        return batch

    def complete(self, group: ProbeGroup, verdicts: Sequence[bool] | None = None) -> GroupOutcome:
        """CompleteGroup: publish the backend's answer (or the given verdicts).

        After :meth:`time_out` the answer is published as ``late``.
        """
        if verdicts is None:
            assert self._backend is not None, "worker not started"
            outcome = probe_group(self._backend, group)
        else:
            if len(verdicts) != len(group.states):
                raise ValueError(f"{len(verdicts)} verdicts for {len(group.states)} keys")
            outcome = GroupOutcome(group, tuple(verdicts))
        return self._deliver(group, outcome)

    def fail(self, group: ProbeGroup, failure: FailureKind = FailureKind.RAISED, detail: str = "") -> GroupOutcome:
        """FailGroup: publish a failure for the group."""
        return self._deliver(group, GroupOutcome(group, None, failure, detail))

    def time_out(self, group: ProbeGroup) -> GroupOutcome:
        """TimeOut: publish TIMEOUT; the group stays taken so a late answer can follow."""
        if group.group_id not in self.taken or group.group_id in self.timed_out:
            raise ValueError(f"group {group.group_id} is not taken or already timed out")
        self.timed_out.add(group.group_id)
        outcome = GroupOutcome(group, None, FailureKind.TIMEOUT, "timed out (manual)")
        self._publish(outcome)
        return outcome

    def _deliver(self, group: ProbeGroup, outcome: GroupOutcome) -> GroupOutcome:
        if self.taken.pop(group.group_id, None) is None:
            raise ValueError(f"group {group.group_id} was not taken")
        if group.group_id in self.timed_out:
            self.timed_out.discard(group.group_id)
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
