"""The faults: a backend call that fails, times out or hangs, a worker that saturates or dies.

Failures of a call are injected by the :class:`~.tier.ScriptedBackend`, so
the real ``probe_group`` path turns them into outcomes; the worker's own
faults are ManualWorker calls (``time_out``, ``saturate``, ``die``).  Each
rule takes the matching model action.  ``Saturate`` and
``StrayAnswersLate`` exist only in the manual machine, ``ReleaseStuckCall``
only in the threaded one with a lookup timeout's hang: an extra rule would
change how the other machine's runs are generated.
"""

from __future__ import annotations

import threading

from hypothesis import strategies as st

from kvprobe.spec import model
from kvprobe.testing.stateful.base import MachineBase, is_open, machine_rule, manual_worker_up
from kvprobe.testing.stateful.tier import FAILURES

__all__ = ["Faults"]


def _running_group(machine: MachineBase) -> bool:
    """A group is taken and its call has not timed out."""
    return bool(set(machine.s.taken) - machine.s.timed_out)


class Faults(MachineBase):
    """FailGroup, TimeOut, WorkerDies, Saturate, StrayAnswersLate, ReleaseStuckCall."""

    @machine_rule(
        lambda o: {"index": st.integers(0, 7), "how": st.sampled_from(sorted(FAILURES))},
        when=lambda self: manual_worker_up(self) and bool(self.s.taken),
    )
    def FailGroup(self, index: int, how: str) -> None:
        """A taken group's backend call fails in one of four ways (see ``FAILURES``)."""
        group = self._pick(index)
        self._expect_call(self.s.taken[group.group_id])
        self.backend.mode = how
        self._manual_worker().complete(group)
        self._answered(self.s.taken[group.group_id], how)

    @machine_rule(
        lambda o: {"index": st.integers(0, 7)}, when=lambda self: manual_worker_up(self) and _running_group(self)
    )
    def TimeOut(self, index: int) -> None:
        """A running call overstays the timeout: TIMEOUT is published, the call stays stuck."""
        group = self._pick(index, timed_out=False)
        self._manual_worker().time_out(group)
        self.s = model.time_out(self.s, group.group_id, self.options.max_stuck)

    @machine_rule(lambda o: {"roll": st.integers(0, 3), "marker": st.booleans()}, when=manual_worker_up)
    def WorkerDies(self, roll: int, marker: bool) -> None:
        """The worker dies holding its batches.  With its death marker (how the
        threaded worker's dispatcher dies): the next drain, a lookup's
        included, fails every open group as WORKER_DIED.  Without: the next
        flush or drain_results must notice and do so.  Either way that call
        starts a new worker; stuck calls live on and may answer late."""
        if roll != 3:
            return
        self._manual_worker().die(publish_marker=marker)
        self.s = model.worker_dies(self.s, marker=marker)

    @machine_rule(
        lambda o: {"index": st.integers(0, 7)},
        when=lambda self: (
            manual_worker_up(self) and len(self.s.stuck()) >= self.options.max_stuck and _running_group(self)
        ),
        only=lambda o: o.manual,
    )
    def Saturate(self, index: int) -> None:
        """While max_stuck calls are stuck, a running group fails at once as
        SATURATED (no backend call), as the threaded worker does instead of
        starting another call."""
        group = self._pick(index, timed_out=False)
        worker_obj = self._manual_worker()
        assert worker_obj.stuck_calls == len(self.s.stuck()), (
            f"the worker counts {worker_obj.stuck_calls} stuck calls, the model {len(self.s.stuck())}"
        )
        worker_obj.saturate(group)
        self.s = model.saturate(self.s, group.group_id, self.options.max_stuck)

    @machine_rule(
        lambda o: {"index": st.integers(0, 7)},
        when=lambda self: is_open(self) and bool(self.s.stray),
        only=lambda o: o.manual,
    )
    def StrayAnswersLate(self, index: int) -> None:
        """A stuck call of the worker's earlier life (it died since, or was
        revived) returns: its answer is published marked late and dropped,
        also while the worker is dead."""
        gids = sorted(self.s.stray)
        gid = gids[index % len(gids)]
        group = self.s.stray[gid]
        worker_obj = self._manual_worker()
        self._expect_call(group)
        worker_obj.complete(worker_obj.stray[gid])
        self._answered(group, late=True)

    @machine_rule(when=lambda self: is_open(self) and self.hung is not None, only=lambda o: not o.manual)
    def ReleaseStuckCall(self) -> None:
        """The call that overstayed its timeout returns: its late answer is published."""
        group = self.hung
        assert group is not None
        self.hung = None
        self.backend.release.set()
        # One more outcome, whether the tier answers well or not; then the model follows what it did.
        self._wait_published(len(model.complete_group(self.s, group.group_id, self._truth(group)).inbox))
        self._answered(group)
        self.backend.release = threading.Event()
