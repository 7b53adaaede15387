"""The manual worker: tests pump it step by step, one TLA+ worker action per method.

:class:`ManualWorker` does nothing until told: take a batch, complete, fail,
time out or saturate any group, die with or without the death marker, in
any order, so a test can reach every interleaving the model allows
(``docs/worker.md``).  With a trace, each method logs the worker action it
took, as the threaded worker does.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import replace

from kvprobe.backends.base import Backend
from kvprobe.statemachine.trace import WorkerTracer, worker_tracer
from kvprobe.statemachine.types import Batch, FailureKind, GroupOutcome, ProbeGroup, death_marker
from kvprobe.statemachine.worker_base import Publish, check_count, discard_outcome, probe_group

__all__ = ["ManualWorker"]


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
        self._publish: Publish = discard_outcome
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
        self._publish = discard_outcome

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
