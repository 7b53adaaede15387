"""The seven named mutants (docs/properties.md), as variants defined in the tests.

Production code stays clean: each mutant is a subclass of ``LookupCore``
overriding one action (or, for ``worker-error-drops-batch``, a ManualWorker
subclass), plugged into ``AsyncLookupManager`` through its ``core_class``
attribute.  Each override is the real method with the one rule changed; the
comment above the change names it.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from dataclasses import dataclass

from kvprobe.spec.lifecycle import ABSENT, NEXT_PHASE, Event, LookupPhase
from kvprobe.statemachine import AsyncLookupManager, LookupCore, ManualWorker, WaitingRequest
from kvprobe.statemachine.types import (
    Batch,
    FailureKind,
    GroupOutcome,
    Key,
    ProbeGroup,
    ProbeState,
    is_death_marker,
)

PENDING, IN_FLIGHT, RESOLVED = LookupPhase.PENDING, LookupPhase.IN_FLIGHT, LookupPhase.RESOLVED


class FlushSubmitsCleaned(LookupCore):
    def flush(self) -> Batch | None:
        if self.inbox:
            self.drain()
        entries, self.step_batch = self.step_batch, []
        self._flushed_probes += len(entries)
        grouped: dict[WaitingRequest, list[ProbeState]] = {}
        for state in entries:
            owner = state.owner
            if state.phase is PENDING:
                if not owner.waiting:
                    owner = self._regroup(state)
                state.phase = IN_FLIGHT
            # MUTANT: the state is submitted even when it was reclaimed or
            # forced to MISS since the lookup.
            grouped.setdefault(owner, []).append(state)
        if not grouped:
            return None
        batch_id = next(self._batch_ids)
        groups = tuple(
            ProbeGroup(next(self._group_ids), batch_id, owner.req_id, owner.context, tuple(members))
            for owner, members in grouped.items()
        )
        for group in groups:
            self.outstanding[group.group_id] = group
            self.stats.probes_submitted += len(group.states)
        self.stats.batches += 1
        return Batch(batch_id, groups)


class CleanupDropsInFlight(LookupCore):
    def cleanup(self, req_id: str) -> None:
        request = self.requests.pop(req_id, None)
        if request is None:
            self.stats.unknown_cleanups += 1
            return
        request.waiting = False
        for state in request.states:
            state.waiters.discard(req_id)
            source = state.phase
            dest = NEXT_PHASE[(source, Event.CLEANUP, bool(state.waiters))]
            # MUTANT: the last waiter leaving deletes an IN_FLIGHT state too.
            if dest is ABSENT or (source is IN_FLIGHT and not state.waiters):
                self._drop(state)
                if source is PENDING:
                    self.stats.never_probed += 1
            else:
                state.phase = dest


@dataclass(frozen=True)
class _ApplyRules:
    same_generation_only: bool = True
    apply_to_resolved: bool = False
    reclaim_orphans: bool = True


class _MutantApply(LookupCore):
    """``LookupCore.apply`` with its rules as switches (each mutant flips one)."""

    rules = _ApplyRules()

    def apply(self, outcome: GroupOutcome) -> None:
        group = outcome.group
        if is_death_marker(outcome):
            # As the real apply: the death marker fails every open group (each through this apply).
            self._fail_open_groups(FailureKind.WORKER_DIED, outcome.detail)
            return
        stats = self.stats
        first = self.outstanding.pop(group.group_id, None) is not None
        if outcome.late:
            stats.late_results += 1
        if first:
            self._count_call(outcome.failure)
        verdicts: Iterable[bool] = (
            outcome.verdicts if outcome.verdicts is not None else itertools.repeat(False, len(group.states))
        )
        for submitted, verdict in zip(group.states, verdicts, strict=False):
            # The state the result is for: the one submitted, or (mutant) the
            # key's current state, whatever its generation.
            state = submitted if self.rules.same_generation_only else self.states.get(submitted.key)
            if state is None or self.states.get(state.key) is not state:
                stats.stale_results_dropped += 1
                continue
            source = state.phase
            if source is RESOLVED:
                if self.rules.apply_to_resolved:
                    state.verdict = verdict
                else:
                    stats.stale_results_dropped += 1
                continue
            dest = NEXT_PHASE.get((source, Event.DRAIN, bool(state.waiters)), source)
            if dest is ABSENT and self.rules.reclaim_orphans:
                self._drop(state)
                stats.orphans_reclaimed += 1
            elif dest is ABSENT or dest is RESOLVED:
                state.phase = RESOLVED
                state.verdict = verdict
                if verdict:
                    stats.hits += 1
                else:
                    stats.misses += 1
            else:
                stats.stale_results_dropped += 1


class StaleResultApplied(_MutantApply):
    # MUTANT: a result is applied to the key's current state without comparing generations.
    rules = _ApplyRules(same_generation_only=False)


class DoubleResult(_MutantApply):
    # MUTANT: a second result of a generation (e.g. the late answer) is applied to its RESOLVED state.
    rules = _ApplyRules(apply_to_resolved=True)


class OrphanNeverReclaimed(_MutantApply):
    # MUTANT: a result for an IN_FLIGHT state nobody waits on resolves it instead of reclaiming it.
    rules = _ApplyRules(reclaim_orphans=False)


class MarkMissInFlightUnguarded(LookupCore):
    def mark_miss(self, keys: Iterable[Key]) -> None:
        for key in list(keys):
            state = self.states.get(key)
            if state is None:
                self.stats.unknown_mark_miss += 1
                continue
            self.stats.forced_misses += 1
            if state.phase is IN_FLIGHT:
                # MUTANT: the verdict is forced but the state stays IN_FLIGHT,
                # so the probe's late result overrides the miss.
                state.verdict = False
                continue
            dest = NEXT_PHASE[(state.phase, Event.MARK_MISS, bool(state.waiters))]
            if dest is ABSENT:
                self._drop(state)
                self.stats.orphans_reclaimed += 1
            else:
                state.phase = dest
                state.verdict = False


class ErrorDropsBatchWorker(ManualWorker):
    def _deliver(self, group: ProbeGroup, outcome: GroupOutcome) -> GroupOutcome:
        if outcome.failure is not None and outcome.failure is not FailureKind.TIMEOUT:
            # MUTANT: a failed backend call publishes nothing; its probes stay IN_FLIGHT.
            if self.taken.pop(group.group_id, None) is None and self.stray.pop(group.group_id, None) is None:
                raise ValueError(f"group {group.group_id} was not taken")
            self.timed_out.discard(group.group_id)
            return outcome
        return super()._deliver(group, outcome)


def manager_with(core: type[LookupCore]) -> type[AsyncLookupManager]:
    """An AsyncLookupManager whose core is the given mutant."""
    return type(f"Manager{core.__name__}", (AsyncLookupManager,), {"core_class": core})


#: mutant name (docs/properties.md) -> (manager class, ManualWorker class)
MUTANTS: dict[str, tuple[type[AsyncLookupManager], type[ManualWorker]]] = {
    "flush-submits-cleaned": (manager_with(FlushSubmitsCleaned), ManualWorker),
    "cleanup-drops-in-flight": (manager_with(CleanupDropsInFlight), ManualWorker),
    "stale-result-applied": (manager_with(StaleResultApplied), ManualWorker),
    "double-result": (manager_with(DoubleResult), ManualWorker),
    "worker-error-drops-batch": (AsyncLookupManager, ErrorDropsBatchWorker),
    "orphan-never-reclaimed": (manager_with(OrphanNeverReclaimed), ManualWorker),
    "mark-miss-in-flight-unguarded": (manager_with(MarkMissInFlightUnguarded), ManualWorker),
}
