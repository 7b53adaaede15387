"""The core's half of the worker handoff: Flush submits groups, Drain applies their outcomes.

:class:`WorkerHandoff` sits between :class:`~kvprobe.statemachine.probe_table.ProbeTable`
(the tables) and :class:`~kvprobe.statemachine.core.LookupCore` (the
caller's actions).  Its actions are the two ends of what the core exchanges
with a worker (:mod:`kvprobe.statemachine.workers`): :meth:`~WorkerHandoff.flush`
turns this step's PENDING probes into a batch of groups, one per request;
:meth:`~WorkerHandoff.drain` applies the outcomes the worker appended to the
inbox, and :meth:`~WorkerHandoff.fail_outstanding` resolves groups the
worker will never answer.  It is a module of its own because these rules
(which result is stale, what a failure counts as, when an orphan is
reclaimed) are read together and apart from the lookup path.

Compiled with the rest of the core (mypyc).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from typing import Final

from kvprobe.statemachine.probe_table import ProbeTable, mypyc_attr
from kvprobe.statemachine.records import ProbeState, WaitingRequest
from kvprobe.statemachine.rules import ANSWERED, IN_FLIGHT, PENDING, TO_IN_FLIGHT
from kvprobe.statemachine.types import Batch, FailureKind, GroupOutcome, ProbeGroup, is_death_marker
from kvprobe.statemachine.verdict_cache import VerdictMemory

__all__ = ["WorkerHandoff", "as_applied"]

_BACKEND_ERRORS: Final = frozenset(
    {
        FailureKind.RAISED,
        FailureKind.RAISED_WHILE_ITERATING,
        FailureKind.SHORT_RESULT,
        FailureKind.LONG_RESULT,
        FailureKind.BAD_VERDICT,
    }
)


_NO_CALL: Final = frozenset({FailureKind.SATURATED, FailureKind.WORKER_DIED, FailureKind.WORKER_ERROR})


def as_applied(outcome: GroupOutcome) -> GroupOutcome:
    """``outcome`` as :meth:`LookupCore.apply` applies it (the tracing core logs this form).

    An outcome whose verdicts do not match its group's keys in number is the
    failure it is (SHORT_RESULT or LONG_RESULT); any other is itself.
    """
    if outcome.verdicts is None or len(outcome.verdicts) == len(outcome.group.states):
        return outcome
    given, expected = len(outcome.verdicts), len(outcome.group.states)
    failure = FailureKind.SHORT_RESULT if given < expected else FailureKind.LONG_RESULT
    detail = f"the worker published {given} verdicts for {expected} keys"
    return GroupOutcome(outcome.group, None, failure, detail, outcome.late, outcome.call_s)


# Interpreted subclasses: the tracing core, the test suite's mutant cores.
@mypyc_attr(allow_interpreted_subclasses=True)
class WorkerHandoff(ProbeTable):
    """The Flush and Drain actions over the core's tables.

    All methods must be called from one thread.  None of them performs I/O or
    blocks.
    """

    # --- Flush ---------------------------------------------------------------

    def flush(self) -> Batch | None:
        """Flush action: submit this step's PENDING probes, one group per request.

        States reclaimed (their requests all left) or forced to MISS since the
        lookup are skipped: they are never probed.  A state is grouped under
        the request that created it, or under the smallest id of the requests
        still waiting on it if that one left.  Returns None when there is
        nothing to submit.
        """
        if self.inbox:
            self.drain()
        self.walks_started = 0  # the start rule's count is per step
        entries, self.step_batch = self.step_batch, []
        if not entries:
            return None
        self._flushed_probes += len(entries)
        to_in_flight = TO_IN_FLIGHT
        pending = PENDING
        # A request's new keys are usually consecutive entries, so the group
        # of the previous entry is tried before the dict (`is` is only a
        # shortcut; the dict decides).
        grouped: dict[WaitingRequest, list[ProbeState]] = {}
        last: WaitingRequest | None = None
        members: list[ProbeState] = []
        for state in entries:
            if state.phase is not pending:
                continue
            owner = state.owner
            if not owner.waiting:
                owner = self._regroup(state)
            state.phase = to_in_flight
            if owner is not last:
                last = owner
                found = grouped.get(owner)
                if found is None:
                    found = grouped[owner] = []
                members = found
            members.append(state)
        if not grouped:
            return None
        batch_id = next(self._batch_ids)
        group_ids = self._group_ids
        outstanding = self.outstanding
        groups = []
        submitted = 0
        for owner, members in grouped.items():
            group = ProbeGroup(next(group_ids), batch_id, owner.req_id, owner.context, tuple(members))
            outstanding[group.group_id] = group
            groups.append(group)
            submitted += len(members)
        stats = self._stats
        stats.probes_submitted += submitted
        stats.batches += 1
        return Batch(batch_id, tuple(groups))

    def _regroup(self, state: ProbeState) -> WaitingRequest:
        """The request a PENDING state is grouped under when its creator was cleaned up.

        Its creator's id if that id asked again and waits on it, else the
        smallest id among its waiters (deterministic, so traces replay).
        """
        req_id = state.owner.req_id
        if req_id not in state.waiters:
            req_id = min(state.waiters)
        return self.requests[req_id]

    # --- Drain ---------------------------------------------------------------

    def drain(self) -> int:
        """Drain action, repeated: apply every published outcome; return how many."""
        inbox = self.inbox
        applied = 0
        while inbox:
            self.apply(inbox.popleft())
            applied += 1
        return applied

    def apply(self, outcome: GroupOutcome) -> None:
        """Apply one group outcome to the states it was submitted for.

        A failure applies MISS to each key.  A state no longer IN_FLIGHT (gone
        from the table, replaced by a newer generation, or already RESOLVED)
        is left alone and counted in ``stale_results_dropped``: that is what
        keeps a timed-out call's late answer, or a result racing a
        ``mark_miss``, from overriding anything.  Verdicts fewer or more than
        the group's keys (a worker of its own that skipped ``probe_group``'s
        check) are applied as that group's SHORT_RESULT or LONG_RESULT
        failure: every key MISS, counted as a backend error, none left
        waiting and none trusted (which verdict is whose is unknown).
        """
        group = outcome.group
        if group.group_id == 0 and is_death_marker(outcome):
            # The worker's dispatcher ended: whatever it held is lost.  Outcomes
            # queued behind the marker are drained after it, as the model's queue
            # is: a stuck call's late answer then finds its keys resolved.
            self._fail_open_groups(FailureKind.WORKER_DIED, outcome.detail)
            return
        outcome = as_applied(outcome)
        stats = self._stats
        first = self.outstanding.pop(group.group_id, None) is not None
        if outcome.late:
            stats.late_results += 1
        if first:
            self._count_call(outcome.failure)
        verdicts: Iterable[bool] = (
            outcome.verdicts if outcome.verdicts is not None else itertools.repeat(False, len(group.states))
        )
        in_flight = IN_FLIGHT
        answered = ANSWERED
        # Counted locally and added once: a stats attribute update per key
        # costs as much as the state change itself.
        hits = misses = stale = 0
        # Only the backend's own answer for the live generation is remembered:
        # a failure's MISS says nothing about the store, and a stale result
        # may be older than a mark_miss that forgot the key.
        memory = self.memory if outcome.failure is None else None
        if memory is not None and outcome.unanswered:
            # Keys the backend marked as unanswered (its MISS is a failure's):
            # the others are remembered here, before the states change.
            self._remember_answered(memory, group.states, verdicts, outcome.unanswered)
            memory = None
        # One verdict per key (a miscounted outcome became a failure above).
        for state, verdict in zip(group.states, verdicts, strict=False):
            if state.phase is not in_flight:
                stale += 1
                continue
            if memory is not None:
                memory.remember(state.key, state.generation, verdict)
            if state.waiters:
                state.phase = answered
                state.verdict = verdict
                if verdict:
                    hits += 1
                else:
                    misses += 1
            else:
                # Nobody waits on it any more: the orphan is reclaimed.
                self._drop(state)
                stats.orphans_reclaimed += 1
        stats.hits += hits
        stats.misses += misses
        stats.stale_results_dropped += stale

    @staticmethod
    def _remember_answered(
        memory: VerdictMemory, states: Sequence[ProbeState], verdicts: Iterable[bool], unanswered: frozenset[int]
    ) -> None:
        in_flight = IN_FLIGHT
        for index, (state, verdict) in enumerate(zip(states, verdicts, strict=False)):
            if state.phase is in_flight and index not in unanswered:
                memory.remember(state.key, state.generation, verdict)

    def _count_call(self, failure: FailureKind | None) -> None:
        stats = self._stats
        # A dead, saturated or broken worker made no backend call for the group.
        stats.backend_calls += failure not in _NO_CALL
        if failure is None:
            return
        stats.failures[failure.value] = stats.failures.get(failure.value, 0) + 1
        if failure in _BACKEND_ERRORS:
            stats.backend_errors += 1
        elif failure is FailureKind.TIMEOUT:
            stats.timeouts += 1
        elif failure is FailureKind.SATURATED:
            stats.saturated += 1

    def fail_outstanding(self, failure: FailureKind, detail: str, groups: Iterable[ProbeGroup] | None = None) -> int:
        """Resolve submitted groups that have no outcome yet as a failure (every key MISS).

        ``groups`` None means every open group: the worker died (its queue is
        lost; counted in ``worker_deaths``).  Given groups are those a worker
        could not accept (``submit`` raised).  Returns the number of groups
        failed.  Never raises.
        """
        if groups is None:
            if self.inbox:
                # What the worker published before it died is its answer.
                self.drain()
            return self._fail_open_groups(failure, detail)
        return self._fail_groups(groups, failure, detail)

    def _fail_open_groups(self, failure: FailureKind, detail: str) -> int:
        """Fail every open group (the worker died); what is queued behind stays queued."""
        if failure is FailureKind.WORKER_DIED:
            self._stats.worker_deaths += 1
        return self._fail_groups(list(self.outstanding.values()), failure, detail)

    def _fail_groups(self, groups: Iterable[ProbeGroup], failure: FailureKind, detail: str) -> int:
        failed = 0
        for group in groups:
            if group.group_id in self.outstanding:
                self.apply(GroupOutcome(group, None, failure, detail))
                failed += 1
        return failed
