"""Several actions as one step, so that deep interleavings and every verdict's path come within reach.

Each rule here is a sequence of the single rules (each action compared and
traced as they are), or plays a liveness property out to its end:

* ``SchedulerStep``: what an engine step does (lookups, chains, cleanups,
  forced misses, ground-truth changes), then maybe a flush;
* ``LoadFailed``: the engine's failed-load path (MarkMiss, then Cleanup);
* ``EventuallyReclaimed``: clean up everything, let the worker answer,
  drain: the table must be empty;
* ``RoundTrip`` (``kvprobe conform`` adds copies of it for weight): a
  request's lookups, the flush, the worker's answers, the drain, and the
  request asking again;
* ``ChainSearch`` (inferred mode, manual worker): a request's chain walked
  step after step until decided, then the engine's loads of its inferred
  keys (a load of a key not stored fails: MarkMiss), and the walk again.
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st
from hypothesis.strategies import SearchStrategy

from kvprobe.spec import model
from kvprobe.testing.stateful.abstraction import stable_repr
from kvprobe.testing.stateful.base import MachineOptions, is_open, machine_rule
from kvprobe.testing.stateful.scheduler import SchedulerActions
from kvprobe.testing.stateful.worker import WorkerActions

__all__ = ["Sequences"]


def scheduler_ops(o: MachineOptions) -> SearchStrategy[list[tuple[Any, ...]]]:
    """The operations of one scheduler step, as tuples ``(name, *arguments)``."""
    lookup_op = st.tuples(st.just("lookup"), st.sampled_from(o.keys), st.sampled_from(o.reqs))
    # A chain lookup: a request's keys in order, and its first window (see LookupChain).
    # Half the chains are prefixes of the pool in its order, as prompts share
    # prefixes: walks of one chain then go on window by window, and past a
    # miss, across requests.
    chain_keys = st.one_of(
        st.integers(1, len(o.keys)).map(lambda n: list(o.keys[:n])),
        st.lists(st.sampled_from(o.keys), max_size=4),
    )
    if o.chain_mode == "inferred":
        # The search skips positions only on chains of four keys or more: the
        # pool repeated (a hole wherever a skipped key is not stored), and longer lists.
        # Two lengths only, so that a request's walks of one chain go on step after step.
        chain_keys = st.one_of(
            st.sampled_from((4, 9)).map(lambda n: list((o.keys * 3)[:n])),
            st.lists(st.sampled_from(o.keys), max_size=8),
        )
    chain_window = st.sampled_from(o.chain_windows) if o.chain_windows else st.none()
    chain_op = st.tuples(st.just("chain"), chain_keys, st.sampled_from(o.reqs), chain_window)
    return st.lists(
        # Mostly lookups, as in a real step; cleanup and mark_miss reclaim
        # probes, so too many of them would starve the worker's side.
        st.one_of(
            lookup_op,
            st.one_of(lookup_op, chain_op) if o.chain_walks else lookup_op,
            st.tuples(st.just("cleanup"), st.sampled_from(o.reqs)),
            st.tuples(st.just("mark_miss"), st.sampled_from(o.keys)),
            st.tuples(st.just("set_stored"), st.sampled_from(o.keys), st.booleans()),
        ),
        min_size=1,
        max_size=5,
    )


def round_trip_arguments(o: MachineOptions) -> dict[str, SearchStrategy[Any]]:
    """RoundTrip's request, the keys it asks (two at least), and the ground-truth change before."""
    return {
        "req": st.sampled_from(o.reqs),
        # Two keys at least: a group whose verdicts can be swapped or shifted.
        "asked": st.lists(st.sampled_from(o.keys), min_size=min(2, len(o.keys)), max_size=len(o.keys), unique=True),
        "change": st.none() | st.tuples(st.sampled_from(o.keys), st.booleans()),
    }


class Sequences(SchedulerActions, WorkerActions):
    """SchedulerStep, LoadFailed, EventuallyReclaimed and RoundTrip."""

    @machine_rule(lambda o: {"ops": scheduler_ops(o), "flush": st.booleans()}, when=is_open)
    def SchedulerStep(self, ops: list[tuple[Any, ...]], flush: bool) -> None:
        """A scheduler step: several Lookup/Cleanup/MarkMiss actions (and ground-truth
        changes between them), then maybe Flush.

        The same actions as the single rules (each one is compared and
        traced), bundled so that the deep interleavings come within reach.
        """
        for op in ops:
            if op[0] == "lookup":
                self.Lookup(op[1], op[2])
            elif op[0] == "chain":
                self.LookupChain(op[1], op[2], op[3])
            elif op[0] == "cleanup":
                self.Cleanup(op[1])
            elif op[0] == "set_stored":
                self.set_stored(op[1], op[2])
            else:
                self.MarkMiss([op[1]])
        if flush:
            self.Flush(None)

    @machine_rule(lambda o: {"index": st.integers(0, 3)}, when=lambda self: is_open(self) and bool(self.s.requests))
    def LoadFailed(self, index: int) -> None:
        """The engine's failed-load path: loading a request's blocks failed, so it
        forces MISS on them (MarkMiss), and the request finishes (Cleanup)."""
        reqs = sorted(self.s.requests)
        req = reqs[index % len(reqs)]
        self.MarkMiss(sorted(self.s.requests[req]))
        self.Cleanup(req)

    @machine_rule(lambda o: {"roll": st.integers(0, 3)}, when=is_open)
    def EventuallyReclaimed(self, roll: int) -> None:
        """Liveness, checked by playing it out: clean up every request, let the
        worker answer everything (late answers included), drain; the table
        must then be empty."""
        if roll != 3:
            return
        for req in sorted(self.s.requests):
            self.m.cleanup(req)
            self.s = model.cleanup(self.s, req)
        # End the step: stale step-batch entries are dropped, nothing is submitted.
        self.m.flush()
        self.s, groups = model.flush(model.revive(self.s))
        assert not groups, f"a flush after every request left submitted {groups}"
        if self.options.manual:
            self._answer_everything()
        self.m.drain_results()
        self.s = model.drain_all(self.s)
        assert model.Reclaimed(self.s), f"the model leaks: {stable_repr(self.s.probes)}"
        assert len(self.m) == 0, f"EventuallyReclaimed: {len(self.m)} states left: {dict(self.m.core.states)}"
        assert not self.m.core.outstanding, f"EventuallyReclaimed: groups never answered {self.m.core.outstanding}"

    def _answer_everything(self) -> None:
        """The ManualWorker takes every batch and answers every taken group truthfully."""
        worker_obj = self._manual_worker()
        while worker_obj.submitted or worker_obj.taken:
            if worker_obj.submitted:
                worker_obj.take_batch()
                self.s, _ = model.take_batch(self.s)
            for gid in sorted(worker_obj.taken):
                group = self.s.taken[gid]
                self._expect_call(group)
                worker_obj.complete(worker_obj.taken[gid])
                self._answered(group)

    @machine_rule(
        lambda o: {"req": st.sampled_from(o.reqs), "length": st.sampled_from((4, 9)), "steps": st.integers(1, 6)},
        when=is_open,
        only=lambda o: o.chain_mode == "inferred" and o.manual,
    )
    def ChainSearch(self, req: str, length: int, steps: int) -> None:
        """A request walks the pool repeated (``length`` keys) for up to ``steps``
        steps (walk, Flush, the worker's answers, Drain) until decided; the
        engine loads the inferred keys, MarkMiss on those the tier does not
        store (the broken assumption, found by a failed load), and the request
        walks once more (exactly, if a key was refuted)."""
        keys = list((self.options.keys * 3)[:length])
        for _ in range(steps):
            answer = self.LookupChain(keys, req)
            if answer.decided or self.s.worker_dead:
                break
            self.Flush(None)
            while self.s.queue and not self.s.worker_dead:
                self.WorkerServesBatch()
            self.Drain(False)
        if answer.decided and answer.inferred:
            failed = [key for key in keys[: answer.leading_hits] if key not in self.stored]
            if failed:
                self.MarkMiss(failed)
        self.LookupChain(keys, req)

    @machine_rule(round_trip_arguments, when=is_open, only=lambda o: o.round_trips > 0)
    def RoundTrip(self, req: str, asked: list[bytes], change: tuple[bytes, bool] | None) -> None:
        """Maybe store or remove a block; one request looks up some keys; Flush;
        the worker answers the batch; Drain; the request asks again.

        The path every verdict takes, as one step (each action is compared
        and traced as in the single rules), so that a tier's answers reach
        the checks within a few steps.
        """
        if change is not None:
            self.set_stored(*change)
        for key in asked:
            self.Lookup(key, req)
        self.Flush(None)
        if self.options.manual:
            while self.s.queue and not self.s.worker_dead:
                self.WorkerServesBatch()
        self.Drain(False)
        for key in asked:
            self.Lookup(key, req)
