"""The pure, scheduler-owned core of the lookup manager.

No I/O, no threads, no backends: :class:`LookupCore` is a data structure whose
public methods are the TLA+ model's scheduler actions (``tla/KVProbe.tla``)::

    lookup      Lookup      flush       Flush
    drain       Drain       cleanup     Cleanup
    mark_miss   MarkMiss    shutdown    Shutdown
    lookup_chain       Lookup of each key in order, up to the first MISS, window by window
    fail_outstanding   Drain of a WORKER_DIED failure for every open group

The worker actions (take a batch, complete a group, fail a group, time out)
belong to drivers (:mod:`kvprobe.statemachine.workers`); the only thing they
touch is :attr:`LookupCore.inbox`, a ``deque`` they append outcomes to
(``deque.append`` is atomic, so no lock is needed).  Everything else is owned
by the one thread that calls the methods.

The parts, one module each: the lifecycle rows the hot path reads and the
facts about them it relies on (:mod:`~kvprobe.statemachine.rules`, checked
at import), the checks of what callers pass
(:mod:`~kvprobe.statemachine.inputs`), the chain walk
(:mod:`~kvprobe.statemachine.chain`) and the snapshot invariants
(:mod:`~kvprobe.statemachine.invariants`).  A new probe state is made in one
place, :meth:`LookupCore._new_probe`, whether a single lookup or a chain
asked for it.

Data layout (see :mod:`kvprobe.statemachine.records`).  A
:class:`ProbeState` is one generation of one key, and every structure that
must refer to "this generation" holds the object itself: the step batch, the
reverse index (a :class:`WaitingRequest`'s list of states) and the submitted
groups.  A state dropped from the table has its phase set to ABSENT, so "is
this result still for the live generation?" is ``state.phase is IN_FLIGHT``
(a state never returns to IN_FLIGHT once it left it), and cleanup reaches
its states without a table lookup.  Generation numbers are kept for traces
and the reference model, not compared here.  Each probe points at the
registration of the request that created it, and that registration knows
whether the request was cleaned up, so flush groups a probe without looking
into its set of waiters (a separate object, and so a cache miss per key).
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Final, TypeVar

from kvprobe.spec.lifecycle import ABSENT, Phase
from kvprobe.statemachine.chain import walk_chain
from kvprobe.statemachine.closed import ClosedInbox, ClosedList, ClosedTable
from kvprobe.statemachine.inferred import EXACT, INFERRED, forgive, refute
from kvprobe.statemachine.inputs import bad_lookup, key_list
from kvprobe.statemachine.invariants import layout_violations
from kvprobe.statemachine.records import ProbeState, WaitingRequest
from kvprobe.statemachine.rules import (
    ANSWERED,
    CLEANUP_LAST,
    COMPILED,
    IN_FLIGHT,
    MARK_MISS_NEXT,
    PENDING,
    RECALLED,
    TO_IN_FLIGHT,
)
from kvprobe.statemachine.types import (
    Batch,
    ChainAnswer,
    FailureKind,
    GroupOutcome,
    HasReqId,
    InvalidInputError,
    InvariantViolation,
    Key,
    KvprobeError,
    ProbeGroup,
    Stats,
    is_death_marker,
)
from kvprobe.statemachine.verdict_cache import VerdictMemory
from kvprobe.statemachine.windows import ALL

_C = TypeVar("_C")

try:
    from mypy_extensions import mypyc_attr
except ImportError:  # only the compiled build needs mypy_extensions (mypyc reads the decorator)

    def mypyc_attr(*_args: str, **_flags: bool) -> Callable[[_C], _C]:  # type: ignore[misc]
        return lambda cls: cls


__all__ = ["COMPILED", "InvariantViolation", "LookupCore", "ProbeState", "WaitingRequest"]

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
class LookupCore:
    """Scheduler-owned probe table, reverse index, generations and step batch.

    All methods must be called from one thread.  None of them performs I/O or
    blocks.  Errors: methods raise :class:`InvalidInputError` for bad
    arguments, before changing anything.
    """

    def __init__(self) -> None:
        self.states: dict[Key, ProbeState] = {}
        # Reverse index: request id -> its registration, which lists the
        # states it waits on (each once) and holds its context (handed to the
        # backend for the groups it owns).  A listed state is in the table: it
        # cannot be dropped while it has a waiter, and a request leaves only
        # through cleanup.
        self.requests: dict[str, WaitingRequest] = {}
        # This step's new states, in first-asked order.  Some may have been
        # reclaimed or forced to MISS since; flush skips those.
        self.step_batch: list[ProbeState] = []
        # Groups submitted whose first outcome has not been applied yet.
        self.outstanding: dict[int, ProbeGroup] = {}
        #: Outcomes published by the worker, applied by :meth:`drain`.
        self.inbox: deque[GroupOutcome] = deque()
        self._stats = Stats()
        self._flushed_probes = 0  # probes_created, but for the step batch
        # The last generation number handed out (an int, not itertools.count:
        # ``next()`` on a counter cost a tenth of a new probe).
        self._last_generation = 0
        self._batch_ids = itertools.count(1)
        self._group_ids = itertools.count(1)
        #: The first window of :meth:`lookup_chain`'s walk, in keys (windows
        #: then double); ``windows.ALL`` (0): one window, every key.  A bare
        #: core walks the whole chain; ``AsyncLookupManager(chain_window=...)``
        #: checks the value it sets (default ``windows.DEFAULT_CHAIN_WINDOW``).
        self.chain_window: int = ALL
        #: How :meth:`lookup_chain` walks: ``inferred.EXACT`` (every key up
        #: to the first miss) or ``inferred.INFERRED`` (a search that infers
        #: the keys before the stored prefix's end; :mod:`kvprobe.statemachine.inferred`).
        self.chain_mode: str = EXACT
        #: Inferred mode: keys whose load failed (``mark_miss``), latest last;
        #: a chain holding one is walked exactly (``inferred.refute``).
        self.refuted_keys: dict[bytes, None] = {}
        #: The opt-in verdict cache (:mod:`kvprobe.statemachine.verdict_cache`):
        #: None (the default) remembers nothing across requests;
        #: ``AsyncLookupManager(verdict_cache=...)`` sets one.
        self.memory: VerdictMemory | None = None

    @property
    def stats(self) -> Stats:
        """The live counters.

        ``probes_created`` is brought up to date here: the lookup that creates
        a probe does not count it (the step batch does), flush adds it.
        """
        stats = self._stats
        stats.probes_created = self._flushed_probes + len(self.step_batch)
        return stats

    # --- Lookup ------------------------------------------------------------

    # Arguments that come from the caller are annotated ``Any``/``object``, not
    # ``Key``/``str``: a compiled build (mypyc) checks annotated types itself
    # and would raise a plain TypeError before the InvalidInputError these
    # methods promise.  AsyncLookupManager's signatures carry the real types.

    def lookup(self, key: Any, req_context: HasReqId) -> bool | None:
        """Lookup action: the verdict if known, else None (ask again later).

        Applies any published results first, so a verdict is visible to the
        first lookup after the backend returned.

        Raises:
            InvalidInputError: ``key`` is not exactly ``bytes`` (a subclass, a
                memoryview or a bytearray is refused even when an equal key is
                held), or ``req_context`` has no ``req_id`` that is exactly a
                ``str`` (or reading it raises).  Nothing changed.  One
                exception, for speed: a request that already waits on the key
                asking again with an equal look-alike key or id gets the
                verdict, as it would with the exact ones (nothing changes).
            ManagerClosedError: after :meth:`shutdown` (also through a bound
                method taken before it).
        """
        if self.inbox:
            self.drain()
        try:
            state = self.states.get(key)
            req_id = req_context.req_id
            # The same request asking again changes nothing.  Its key and id
            # were type-checked when it first asked; an equal look-alike (a
            # memoryview, a str subclass) from a request already waiting gets
            # the same answer and changes nothing.  Testing the exact types
            # here too would cost about a fifth of this path (measured), so
            # look-alikes are refused on every path that changes something.
            if state is not None and req_id in state.waiters:
                return state.verdict
            # Inside the try: an unhashable req_id fails here, and must be
            # reported as bad input like any other bad req_id.
            request = self.requests.get(req_id)
        except KvprobeError:
            raise  # the closed tables of a shutdown racing this call
        except Exception as exc:
            # Whatever a bad key's hash or a req_id property raised: with an
            # exact bytes key and str id nothing here can raise.  Free when
            # nothing raises (CPython 3.11 and mypyc alike).
            raise bad_lookup(key, req_context) from exc
        # This path runs for every new (key, request) pair.  A join is written
        # inline (a method call would be a tenth of its cost); a new probe
        # pays that one call, to be made in the one place the chain walk uses.
        if type(key) is not bytes or type(req_id) is not str:
            raise bad_lookup(key, req_context)
        if request is None:
            request = self.requests[req_id] = WaitingRequest(req_id, req_context)
        if state is None:
            return self._new_probe(key, request)
        # Another request joins the probe (its phase does not change); the
        # early return above ruled out a request already waiting on it.
        state.waiters.add(req_id)
        phase = state.phase
        if phase is PENDING:
            self._stats.joins += 1
        elif phase is IN_FLIGHT:
            self._stats.in_flight_reuses += 1
        request.states.append(state)
        return state.verdict

    def _new_probe(self, key: bytes, request: WaitingRequest) -> bool | None:
        """The Lookup of a key without a state: a new generation for ``request``; its verdict.

        The one place a :class:`ProbeState` is made and its fields are set
        (:meth:`lookup` and the chain walk both come here): it joins the
        table and the request's list of states.  It is PENDING and joins this
        step's batch (the verdict is None), unless the verdict cache
        remembers a fresh backend answer for the key: then it is RESOLVED at
        once with that verdict and never probed (``lifecycle.RECALL_RULE``).
        """
        generation = self._last_generation = self._last_generation + 1
        state = ProbeState()
        state.generation = generation
        state.waiters = {request.req_id}
        state.key = key
        state.owner = request
        memory = self.memory
        verdict = None if memory is None else memory.recall(key)
        state.verdict = verdict
        self.states[key] = state
        if verdict is None:
            state.phase = PENDING
            self.step_batch.append(state)
        else:
            state.phase = RECALLED
        request.states.append(state)
        return verdict

    def lookup_chain(self, keys: Sequence[Any], req_context: HasReqId) -> ChainAnswer:
        """The Lookup action of each key in order, stopping at the first known MISS or the window's end.

        Exactly the sequence ``lookup(keys[0], req_context)``,
        ``lookup(keys[1], req_context)``, ... up to and including the first
        key whose verdict is False, and no further than the end of the
        window (:mod:`kvprobe.statemachine.windows`, first window
        :attr:`chain_window`) of the first key whose verdict is unknown:
        a window's keys are submitted only once every key before the window
        is known stored.  Keys not looked up get no state, no probe, no
        backend work.  Published results are applied once, before the first
        key (a result published while the walk runs is applied by the next
        call, as if it had arrived after the walk).

        In inferred mode (:attr:`chain_mode`) a chain holding no refuted key
        is searched instead: its keys are looked up one at a time at the
        positions a gallop-then-bisect search picks, and the keys before the
        boundary found are answered stored by inference
        (:mod:`kvprobe.statemachine.inferred`).

        Raises:
            InvalidInputError: ``keys`` is not a sequence of keys (a single
                ``bytes``/``str`` is refused) or reading it raises, some
                element is not exactly ``bytes`` (its hash may even raise),
                or ``req_context`` has no ``req_id`` that is exactly a
                ``str`` (or reading it raises).  Nothing changed: a walk that would change
                something checks every key first, the ones after its stop
                included; a walk that only reads checks the keys it reads
                (as the single lookups would: none after the stop).
            ManagerClosedError: after :meth:`shutdown`.
        """
        answer = walk_chain(self, keys, req_context)
        if self.refuted_keys:
            forgive(self, keys, answer)  # hits the backend answered fill the holes recorded
        return answer

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

    def _drop(self, state: ProbeState) -> None:
        """Take ``state`` out of the table and mark it gone for groups that refer to it."""
        del self.states[state.key]
        state.phase = ABSENT

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

    # --- Cleanup -------------------------------------------------------------

    def cleanup(self, req_id: Any) -> None:
        """Cleanup action: the request finished; release its interest in every key.

        A request id the manager does not know is counted and ignored.

        Raises:
            InvalidInputError: ``req_id`` is not a string.  Nothing changed.
        """
        if type(req_id) is not str:
            raise InvalidInputError(f"cleanup() takes a request id string, got {type(req_id).__name__}")
        request = self.requests.pop(req_id, None)
        if request is None:
            self._stats.unknown_cleanups += 1
            return
        request.waiting = False
        last_waiter_left = CLEANUP_LAST
        never_probed = 0
        for state in request.states:
            waiters = state.waiters
            waiters.discard(req_id)
            if waiters:
                continue  # others still wait: no phase changes (asserted at import)
            source = state.phase
            dest = last_waiter_left[source._value_]  # type: ignore[union-attr]  # listed states are live
            if dest is ABSENT:
                self._drop(state)
                if source is PENDING:
                    never_probed += 1
            else:
                state.phase = dest
        self._stats.never_probed += never_probed

    # --- MarkMiss ------------------------------------------------------------

    def mark_miss(self, keys: Iterable[Any]) -> None:
        """MarkMiss action: force MISS for keys whose load from the tier failed.

        Keys without a state are counted and ignored (the next lookup probes
        them afresh).  The verdict cache, if any, forgets every key given
        (a remembered "stored" whose load failed is served no more).  A later result of the probe that was in flight is
        dropped, so the MISS sticks until the state is reclaimed.

        Raises:
            InvalidInputError: ``keys`` is a single key (``bytes``/``str``)
                rather than an iterable of keys, or holds a non-``bytes``
                element.  Nothing changed.
        """
        keys = key_list(keys, "mark_miss")
        if self.chain_mode == INFERRED:
            refute(self, keys)  # chains holding these keys are walked exactly from now on
        states = self.states
        stats = self._stats
        memory = self.memory
        for key in keys:
            if memory is not None:
                memory.forget(key)
            state = states.get(key)
            if state is None:
                stats.unknown_mark_miss += 1
                continue
            source = state.phase
            dest = MARK_MISS_NEXT[not state.waiters][source._value_]  # type: ignore[union-attr]  # in the table
            stats.forced_misses += 1
            if dest is ABSENT:
                self._drop(state)
                stats.orphans_reclaimed += 1
            else:
                state.phase = dest
                state.verdict = False

    # --- Shutdown ------------------------------------------------------------

    def shutdown(self, message: str = "the lookup manager was shut down") -> None:
        """Shutdown action: reclaim every state, request, batch entry and outcome.

        The tables are first swapped for closed ones (:mod:`kvprobe.statemachine.closed`),
        so every later action, including a lookup bound before this call or
        one racing it from another thread, raises :class:`ManagerClosedError`
        with ``message``; then the old tables are emptied.
        """
        step_batch, states, requests, inbox = self.step_batch, self.states, self.requests, self.inbox
        self.inbox = ClosedInbox(message)
        self.states = ClosedTable(message)
        self.requests = ClosedTable(message)
        self.step_batch = ClosedList(message)
        self._flushed_probes += len(step_batch)
        # Snapshots (C-level copies): a call racing this one may still write
        # to a table it read before the swap; iterating it directly could fail.
        for state in list(states.values()):
            state.phase = ABSENT
        states.clear()
        for request in list(requests.values()):
            request.waiting = False
        requests.clear()
        step_batch.clear()
        self.outstanding.clear()
        inbox.clear()
        if self.memory is not None:
            self.memory.clear()

    # --- Observation -----------------------------------------------------------

    def phase(self, key: Any) -> Phase:
        """The key's phase, or None when no state is held (does not drain)."""
        state = self.states.get(key)
        return None if state is None else state.phase

    def check_invariants(self) -> None:
        """Check the invariants (docs/properties.md) that a snapshot can show.

        Raises:
            InvariantViolation: naming the invariant and the offending key.
        """
        problems = list(self.violations())
        if problems:
            raise InvariantViolation("; ".join(problems))

    def violations(self) -> Iterable[str]:
        """Yield one message per broken invariant (empty when all hold); never raises.

        See :func:`kvprobe.statemachine.invariants.layout_violations`.
        """
        return layout_violations(self.states, self.requests, self.outstanding.values(), self.step_batch)
