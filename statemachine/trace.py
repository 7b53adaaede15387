"""Event traces of the manager, named by TLA+ action, for trace validation.

Tracing costs nothing when off: the manager then uses a plain
:class:`~kvprobe.statemachine.core.LookupCore`.  With a sink it uses
:class:`TracingCore`, which emits one JSON-ready dict after each scheduler
action, and the workers (:mod:`kvprobe.statemachine.workers`) emit one per
worker action:

=================  ===========================================================
``action``         other fields
=================  ===========================================================
``Lookup``         ``key`` (hex), ``req``, ``verdict`` (true/false/null), ``phase``
``Flush``          ``groups``: list of ``{group, req, keys, gens}``
``Drain``          ``group``, ``keys``, ``gens``, ``verdicts`` (list or null),
                   ``failure`` (FailureKind value or null), ``late``; the Drain
                   of a dead worker (its death marker, or the manager noticing
                   the death) is one event with ``group`` 0, no keys and
                   ``failure`` ``"worker_died"``: it fails every open group
``Cleanup``        ``req``
``MarkMiss``       ``keys``
``Shutdown``       (none)
``TakeBatch``      ``batch``, ``groups`` (group ids)
``CompleteGroup``  ``group``, ``verdicts``
``FailGroup``      ``group``, ``failure``
``TimeOut``        ``group``
``Saturate``       ``group``
``LateAnswer``     ``group``, ``verdicts`` (null if the late call failed), ``failure``
``Die``            (none); logged by the manager when it notices a worker that
                   died without publishing a death marker
``Revive``         (none): a dead worker was started again
``CallReturned``   ``group``, ``verdicts``, ``failure``: a group's backend call
                   returned (ThreadedWorker; no model action: the worker's
                   next event must publish that answer)
=================  ===========================================================

``lookup_chain`` emits one ``Lookup`` event per key it looked up (a chain is
a sequence of Lookup actions); the inferred walk
(:mod:`kvprobe.statemachine.inferred`) looks its keys up with ``lookup``,
whose events have no more fields; the exact walk's events have two more: ``index`` (the
key's position in the chain, 0 for the walk's first key: the events of one
walk are consecutive, indices 0, 1, ...) and ``window`` (the walk's first
window, or ``"all"``), and ``growth`` when the windows grow by other than
2 (``chain_window_growth``), so that a checker can tell whether the walk was
allowed to look that key up.  Every event has ``seq`` (0, 1, ...).
Scheduler events also have ``size`` (states held after the action),
``after`` (for each key the action touched, its state afterwards:
``{key, phase, gen, verdict, waiters}``, phase ``ABSENT`` and gen 0 when no
state is held; with the verdict cache on, also the key's entry in the
cache's memory, ``remembered`` (true/false, null for none) and
``remembered_gen`` (the generation whose answer it is, 0 for none)) and
``open`` (the groups submitted and not answered yet, as
``{req, keys, gens}``), so that the trace spec can pin the model's state
down after every event: a core that applies an outcome it should drop, or
keeps a state it should reclaim, records a trace no behaviour of the model
matches.  Worker events carry the worker's own state after the action where
the worker knows it: ``held`` (ids of the groups it holds and has not
answered, ManualWorker) and ``stuck`` (calls past their timeout) with
``max_stuck`` (ThreadedWorker).

Order.  Events are numbered and handed to the sink under one lock
(:class:`TraceRecorder`).  A scheduler action holds that lock from start to
end, and a worker logs each outcome and appends it to the inbox under it
too, so the recorded order is a linearization of what happened: an outcome
logged before a ``Lookup`` was drained by that lookup (its ``Drain`` event
comes first), one logged after it was not yet visible to it.  A worker finds
the recorder through the ``publish`` callable it is started with (the
tracing core's inbox), so the manager needs no extra wiring; a worker that
logs nothing leaves its steps to be inferred by the trace checker.
:class:`NdjsonTrace` writes events one JSON object per line.
"""

from __future__ import annotations

import json
import threading
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import IO

from kvprobe.spec.actions import CALL_RETURNED, WORKER_EVENTS
from kvprobe.spec.lifecycle import Event
from kvprobe.statemachine.core import LookupCore, as_applied
from kvprobe.statemachine.inferred import searches
from kvprobe.statemachine.types import (
    Batch,
    ChainAnswer,
    FailureKind,
    GroupOutcome,
    HasReqId,
    Key,
    ProbeGroup,
    is_death_marker,
)
from kvprobe.statemachine.windows import window_name

__all__ = [
    "WORKER_ACTIONS",
    "NdjsonTrace",
    "TraceRecorder",
    "TraceSink",
    "TracedInbox",
    "TracingCore",
    "WorkerTracer",
    "read_ndjson",
    "tracing",
    "worker_tracer",
]

TraceSink = Callable[[dict[str, object]], None]

#: The trace events the worker side records (kvprobe.spec.actions.WORKER_EVENTS:
#: the worker's actions of tla/KVProbe.tla, and Revive).
WORKER_ACTIONS = frozenset(WORKER_EVENTS)


class TraceRecorder:
    """Numbers events and hands them to the sink one at a time.

    ``lock`` is re-entrant: a scheduler action holds it while it runs (its
    drain emits Drain events inside it).  A sink that raises on a worker
    thread does not stop the worker (the outcome is still published): the
    error is kept in ``worker_error`` and raised by the next scheduler event,
    after that event's action was performed (the trace is incomplete from
    then on; the manager's state is not).
    """

    def __init__(self, sink: TraceSink) -> None:
        self.sink = sink
        self.lock = threading.RLock()
        self.seq = 0
        self.worker_error: Exception | None = None

    def emit(self, event: dict[str, object]) -> None:
        """Number ``event`` and hand it to the sink (raises what the sink raises)."""
        with self.lock:
            event = {"seq": self.seq, **event}
            self.seq += 1
            self.sink(event)


class TracedInbox(deque[GroupOutcome]):
    """The tracing core's inbox: a plain deque that also carries the worker's tracer."""

    def __init__(self, tracer: WorkerTracer) -> None:
        super().__init__()
        self.tracer = tracer


class WorkerTracer:
    """What a worker uses to log its actions (:func:`worker_tracer` finds it)."""

    def __init__(self, recorder: TraceRecorder) -> None:
        self.recorder = recorder

    def log(self, action: str, fields: Mapping[str, object], *, on_worker_thread: bool = False) -> None:
        """Log a worker action that publishes nothing.

        On the scheduler's thread (``ManualWorker``) a sink error is raised;
        on a worker thread it is kept for the scheduler.
        """
        try:
            self.recorder.emit({"action": action, **fields})
        except Exception as exc:
            if not on_worker_thread:
                raise
            self.recorder.worker_error = self.recorder.worker_error or exc

    def call_returned(self, outcome: GroupOutcome, **fields: object) -> None:
        """Log that the backend call of ``outcome``'s group returned ``outcome`` (on a worker thread).

        Logged apart from the publication so that a worker holding an answer
        it already has shows in the trace.  A sink error is kept for the
        scheduler.
        """
        self.log(CALL_RETURNED, {**outcome_fields(outcome), **fields}, on_worker_thread=True)

    def publish(
        self, action: str, outcome: GroupOutcome, publish: Callable[[GroupOutcome], None], **fields: object
    ) -> None:
        """Log ``action`` for ``outcome`` and publish it, with no scheduler action in between.

        For worker threads: a sink error is kept for the scheduler, and the
        outcome is published whatever happens to the log.
        """
        recorder = self.recorder
        with recorder.lock:
            try:
                recorder.emit({"action": action, **outcome_fields(outcome), **fields})
            except Exception as exc:
                recorder.worker_error = recorder.worker_error or exc
            publish(outcome)


def outcome_fields(outcome: GroupOutcome) -> dict[str, object]:
    """The fields of a worker event that describe ``outcome``."""
    if is_death_marker(outcome):
        return {}
    return {
        "group": outcome.group.group_id,
        "verdicts": None if outcome.verdicts is None else list(outcome.verdicts),
        "failure": None if outcome.failure is None else outcome.failure.value,
    }


def worker_tracer(publish: Callable[[GroupOutcome], None]) -> WorkerTracer | None:
    """The tracer of the traced manager ``publish`` belongs to, or None if it is not traced."""
    inbox = getattr(publish, "__self__", None)
    return inbox.tracer if isinstance(inbox, TracedInbox) else None


class TracingCore(LookupCore):
    """A core that reports each action to ``sink`` after performing it.

    Use :func:`tracing` to add the same reporting to a subclass of
    :class:`LookupCore` (the mutants of the test suite are such subclasses).
    """

    def __init__(self, sink: TraceSink) -> None:
        super().__init__()
        self._recorder = TraceRecorder(sink)
        self.inbox = TracedInbox(WorkerTracer(self._recorder))
        # While a dead worker's open groups are failed: their applies are one Drain event.
        self._failing_open = False
        self._marker_drained = False

    def _emit(self, action: Event, touched: Iterable[Key] = (), size: int | None = None, **fields: object) -> None:
        recorder = self._recorder
        failed, recorder.worker_error = recorder.worker_error, None
        if failed is not None:
            raise failed
        memory = self.memory
        remembered = None if memory is None else {key: (v, gen) for key, v, gen, _ in memory.entries()}
        event: dict[str, object] = {
            "action": action.value,
            **fields,
            "size": len(self.states) if size is None else size,
            "after": [self._snapshot(key, remembered) for key in dict.fromkeys(touched)],
            "open": [
                {"req": g.req_id, "keys": [k.hex() for k in g.keys], "gens": list(g.generations)}
                for g in self.outstanding.values()
            ],
        }
        recorder.emit(event)

    def _snapshot(self, key: Key, remembered: Mapping[bytes, tuple[bool, int]] | None) -> dict[str, object]:
        """``key``'s state, and with the verdict cache on, its entry (``remembered`` maps key -> verdict, gen)."""
        # dict.get: after shutdown the table refuses its own get().
        state = dict.get(self.states, key)
        snapshot: dict[str, object] = {"key": key.hex(), "phase": "ABSENT", "gen": 0, "verdict": None, "waiters": []}
        if state is not None:
            snapshot["phase"] = "ABSENT" if state.phase is None else state.phase.value
            snapshot["gen"] = state.generation
            snapshot["verdict"] = state.verdict
            snapshot["waiters"] = sorted(state.waiters)
        if remembered is not None:
            # The entry as held, expired or not: the memory drops an expired
            # entry only when a lookup of its key finds it.
            entry = remembered.get(key)
            snapshot["remembered"] = None if entry is None else entry[0]
            snapshot["remembered_gen"] = 0 if entry is None else entry[1]
        return snapshot

    def lookup(self, key: Key, req_context: HasReqId) -> bool | None:
        with self._recorder.lock:
            verdict = super().lookup(key, req_context)
            phase = self.phase(key)
            self._emit(
                Event.LOOKUP,
                (key,),
                key=key.hex(),
                req=req_context.req_id,
                verdict=verdict,
                phase=None if phase is None else phase.value,
            )
            return verdict

    def lookup_chain(self, keys: Sequence[Key], req_context: HasReqId) -> ChainAnswer:
        # A chain is a sequence of Lookup actions, so it is traced as one
        # Lookup event per key looked up, as the single lookups would be.
        # The core's own walk runs (a defect in it must show in the trace);
        # the events are rebuilt after it from what a lookup cannot change
        # afterwards: a later lookup of the walk never changes an earlier
        # key's state (a repeated key is the same request asking again) nor
        # the open groups, so each key's state now is its state after its own
        # Lookup, and only the size needs replaying (the new states are those
        # of a generation handed out during the walk, one per key asked first
        # by it: probed, or served from the verdict cache).
        with self._recorder.lock:
            mark = self._last_generation
            answer = super().lookup_chain(keys, req_context)
            if answer.looked_up and searches(self, list(keys)):
                return answer  # the inferred walk's lookups were traced by lookup()
            states = self.states
            size = len(states) - (self._last_generation - mark)
            counted: set[int] = set()
            req = req_context.req_id
            window = window_name(self.chain_window)
            # Recorded only when not the default, so that a default trace reads as before.
            growth = {} if self.chain_window_growth == 2.0 else {"growth": self.chain_window_growth}
            for index, key in enumerate(list(keys)[: answer.looked_up]):
                state = states[key]
                if state.generation > mark and id(state) not in counted:
                    counted.add(id(state))
                    size += 1
                phase = state.phase
                self._emit(
                    Event.LOOKUP,
                    (key,),
                    size=size,
                    key=key.hex(),
                    req=req,
                    verdict=state.verdict,
                    phase=None if phase is None else phase.value,
                    index=index,
                    window=window,
                    **growth,
                )
            return answer

    def flush(self) -> Batch | None:
        with self._recorder.lock:
            touched = [state.key for state in self.step_batch]
            batch = super().flush()
            groups = (
                []
                if batch is None
                else [
                    {
                        "group": g.group_id,
                        "req": g.req_id,
                        "keys": [k.hex() for k in g.keys],
                        "gens": list(g.generations),
                    }
                    for g in batch.groups
                ]
            )
            self._emit(Event.FLUSH, touched, groups=groups)
            return batch

    def apply(self, outcome: GroupOutcome) -> None:
        with self._recorder.lock:
            group = outcome.group
            if is_death_marker(outcome):
                # Its Drain is the one _fail_open_groups emits (the worker logged Die).
                self._marker_drained = True
                super().apply(outcome)
                return
            super().apply(outcome)
            if self._failing_open:
                return  # part of the dead worker's one Drain event
            outcome = as_applied(outcome)  # what the core applied: a miscounted outcome is a failure
            self._emit(
                Event.DRAIN,
                group.keys,
                group=group.group_id,
                keys=[k.hex() for k in group.keys],
                gens=list(group.generations),
                verdicts=None if outcome.verdicts is None else list(outcome.verdicts),
                failure=None if outcome.failure is None else outcome.failure.value,
                late=outcome.late,
            )

    def fail_outstanding(self, failure: FailureKind, detail: str, groups: Iterable[ProbeGroup] | None = None) -> int:
        # Groups a worker could not take are not a model action (see
        # docs/worker.md); a dead worker's are, through _fail_open_groups.
        # Published outcomes are applied first (as the core does), each its own Drain.
        with self._recorder.lock:
            return super().fail_outstanding(failure, detail, groups)

    def _fail_open_groups(self, failure: FailureKind, detail: str) -> int:
        if failure is not FailureKind.WORKER_DIED:
            return super()._fail_open_groups(failure, detail)
        with self._recorder.lock:
            # The worker died: the model's Drain of its death marker, which
            # fails every open group at once.
            if not self._marker_drained:
                # It died without a marker: the manager noticed at flush or
                # drain_results; it logs the worker's Die on its behalf.
                self._recorder.emit({"action": "Die", "by": "manager"})
            self._marker_drained = False
            touched = [key for g in self.outstanding.values() for key in g.keys]
            self._failing_open = True
            try:
                failed = super()._fail_open_groups(failure, detail)
            finally:
                self._failing_open = False
            self._emit(
                Event.DRAIN,
                touched,
                group=0,
                keys=[],
                gens=[],
                verdicts=None,
                failure=FailureKind.WORKER_DIED.value,
                late=False,
            )
            return failed

    def cleanup(self, req_id: str) -> None:
        with self._recorder.lock:
            request = self.requests.get(req_id)
            touched = [] if request is None else [state.key for state in request.states]
            super().cleanup(req_id)
            self._emit(Event.CLEANUP, touched, req=req_id)

    def mark_miss(self, keys: Iterable[Key]) -> None:
        with self._recorder.lock:
            keys = list(keys) if not isinstance(keys, (bytes, bytearray, memoryview, str)) else keys
            super().mark_miss(keys)
            self._emit(Event.MARK_MISS, keys, keys=[k.hex() for k in keys])

    def shutdown(self, message: str = "the lookup manager was shut down") -> None:
        with self._recorder.lock:
            touched = list(self.states)
            super().shutdown(message)
            self._emit(Event.SHUTDOWN, touched)


def tracing(core_class: type[LookupCore]) -> Callable[[TraceSink], LookupCore]:
    """A factory of cores of ``core_class`` that also report to a trace sink."""
    if issubclass(core_class, TracingCore):
        return core_class
    # TracingCore's overrides come first in the MRO and call core_class's actions.
    traced: type[TracingCore] = type(f"Tracing{core_class.__name__}", (TracingCore, core_class), {})
    return traced


class NdjsonTrace:
    """A trace sink writing one JSON object per line to a text stream."""

    def __init__(self, stream: IO[str]) -> None:
        self._stream = stream

    def __call__(self, event: dict[str, object]) -> None:
        self._stream.write(json.dumps(event, separators=(",", ":")) + "\n")


def read_ndjson(lines: Iterable[str]) -> list[dict[str, object]]:
    """Parse an NDJSON trace (blank lines are skipped)."""
    return [json.loads(line) for line in lines if line.strip()]
