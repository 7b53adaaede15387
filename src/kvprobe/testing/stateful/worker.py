"""The worker's actions when it answers: the machine pumps a ManualWorker, one model action per rule.

These rules exist in thread mode too but are never enabled there (the real
worker answers on its own; :meth:`MachineBase._run_thread_worker` follows
it): the set of rules a machine has shapes the runs Hypothesis generates,
so the threaded machine keeps the rules it was measured with.  The worker's
failures are in :mod:`.faults`.
"""

from __future__ import annotations

from hypothesis import strategies as st

from kvprobe.spec import model
from kvprobe.testing.stateful.abstraction import as_model_group
from kvprobe.testing.stateful.base import MachineBase, machine_rule, manual_worker_up

__all__ = ["WorkerActions"]


class WorkerActions(MachineBase):
    """TakeBatch, CompleteGroup, and a whole batch served in one step."""

    @machine_rule(when=lambda self: manual_worker_up(self) and bool(self.s.queue))
    def TakeBatch(self) -> None:
        worker_obj = self._manual_worker()
        batch = worker_obj.take_batch()
        self.s, groups = model.take_batch(self.s)
        assert batch is not None and tuple(as_model_group(g) for g in batch.groups) == groups

    @machine_rule(
        lambda o: {"overstay": st.integers(0, 3)}, when=lambda self: manual_worker_up(self) and bool(self.s.queue)
    )
    def WorkerServesBatch(self, overstay: int = 0) -> None:
        """TakeBatch, then CompleteGroup for each of its groups, in order (what an
        unhurried worker does; the single rules give the other interleavings).

        On two rolls in four the worker behaves as the threaded one does
        while max_stuck calls are stuck: each group is answered SATURATED at
        once.  On one of them the tier hangs besides: until max_stuck calls
        are stuck, each call overstays (TimeOut)."""
        max_stuck = self.options.max_stuck
        worker_obj = self._manual_worker()
        batch = worker_obj.take_batch()
        self.s, groups = model.take_batch(self.s)
        assert batch is not None and tuple(as_model_group(g) for g in batch.groups) == groups
        for group in groups:
            taken = worker_obj.taken[group.group_id]
            if overstay >= 2 and len(self.s.stuck()) >= max_stuck:
                worker_obj.saturate(taken)
                self.s = model.saturate(self.s, group.group_id, max_stuck)
            elif overstay == 3:
                worker_obj.time_out(taken)
                self.s = model.time_out(self.s, group.group_id, max_stuck)
            else:
                self._expect_call(group)
                worker_obj.complete(taken)
                self._answered(group)

    @machine_rule(
        lambda o: {"index": st.integers(0, 7)}, when=lambda self: manual_worker_up(self) and bool(self.s.taken)
    )
    def CompleteGroup(self, index: int) -> None:
        group = self._pick(index)
        want = self.s.taken[group.group_id]
        self._expect_call(want)
        self._manual_worker().complete(group)
        self._answered(want)
