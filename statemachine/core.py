"""The pure, scheduler-owned core of the lookup manager.

No I/O, no threads, no backends: :class:`LookupCore` is a data structure whose
public methods are the TLA+ model's scheduler actions (``tla/KVProbe.tla``)::

    lookup      Lookup      flush       Flush
    drain       Drain       cleanup     Cleanup
    mark_miss   MarkMiss    shutdown    Shutdown
    fail_outstanding   Drain of a WORKER_DIED failure for every open group

The worker actions (take a batch, complete a group, fail a group, time out)
belong to drivers (:mod:`kvprobe.statemachine.workers`); the only thing they
touch is :attr:`LookupCore.inbox`, a ``deque`` they append outcomes to
(``deque.append`` is atomic, so no lock is needed).  Everything else is owned
by the one thread that calls the methods.

Phase changes go through :data:`kvprobe.spec.lifecycle.NEXT_PHASE`, compiled
from the lifecycle declaration.  Two facts derived from that declaration let
the hot path skip the table: a lookup never changes the phase of an existing
state, and the verdict is set exactly when the phase is RESOLVED, so a lookup
of an existing state answers ``state.verdict`` (None unless resolved).  Both
are asserted at import below, so changing the declaration cannot silently
invalidate them.
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Iterable

from kvprobe.spec.lifecycle import ABSENT, NEXT_PHASE, RULES, Event, LookupPhase, Phase
from kvprobe.statemachine.types import (
    Batch,
    FailureKind,
    GroupOutcome,
    HasReqId,
    InvalidInputError,
    Key,
    ProbeGroup,
    Stats,
)

__all__ = ["InvariantViolation", "LookupCore", "ProbeState"]

PENDING = LookupPhase.PENDING
IN_FLIGHT = LookupPhase.IN_FLIGHT
RESOLVED = LookupPhase.RESOLVED

# The hot path relies on these; see the module docstring.
if any(r.event is Event.LOOKUP and r.source is not ABSENT and r.dest is not r.source for r in RULES):
    raise ImportError("lifecycle declares a lookup that changes an existing phase; LookupCore.lookup must follow it")
if NEXT_PHASE.get((ABSENT, Event.LOOKUP, True)) is not PENDING:
    raise ImportError("lifecycle no longer sends a new lookup to PENDING; LookupCore.lookup must follow it")


def _by_source(event: Event) -> tuple[dict[str, LookupPhase | None], dict[str, LookupPhase | None]]:
    """NEXT_PHASE's rows for ``event``, re-indexed for the hot path.

    Returns ``(rows when some request still waits, rows when none does)``,
    each ``{source phase value: next phase}``, so a caller indexes it with
    ``[not waiters][state.phase._value_]``.  Same rows, other index: enum
    members hash through ``Enum.__hash__``, a Python-level method, so a
    ``NEXT_PHASE[(phase, event, flag)]`` lookup makes two Python calls (about
    0.5 us on the 2-core bench machine), while a member's value is a string
    whose hash is cached.  Drain and cleanup run this once per key.
    """
    some: dict[str, LookupPhase | None] = {}
    none: dict[str, LookupPhase | None] = {}
    for (source, ev, has_waiters), dest in NEXT_PHASE.items():
        if ev is event and source is not None:
            (some if has_waiters else none)[source.value] = dest
    return some, none


_DRAIN_NEXT = _by_source(Event.DRAIN)
# What a result does to an IN_FLIGHT probe somebody waits on: the row apply()
# meets for nearly every key, so it is looked up once here.
_answered = NEXT_PHASE[(IN_FLIGHT, Event.DRAIN, True)]
if _answered is not RESOLVED:
    raise ImportError("lifecycle no longer resolves an answered in-flight probe; LookupCore.apply must follow it")
_ANSWERED: LookupPhase = _answered
_CLEANUP_NEXT = _by_source(Event.CLEANUP)
_MARK_MISS_NEXT = _by_source(Event.MARK_MISS)

_BACKEND_ERRORS = frozenset(
    {
        FailureKind.RAISED,
        FailureKind.RAISED_WHILE_ITERATING,
        FailureKind.SHORT_RESULT,
        FailureKind.LONG_RESULT,
        FailureKind.BAD_VERDICT,
    }
)


class InvariantViolation(AssertionError):
    """A DESIGN.md section 2 invariant does not hold (a bug in kvprobe)."""


class ProbeState:
    """The one probe state of a key: phase, generation, waiters, verdict."""

    __slots__ = ("generation", "phase", "verdict", "waiters")

    def __init__(self, generation: int, req_id: str) -> None:
        self.phase: LookupPhase = PENDING
        self.generation = generation
        self.waiters: set[str] = {req_id}
        self.verdict: bool | None = None

    def __repr__(self) -> str:
        waiters = sorted(self.waiters)
        return f"ProbeState({self.phase.name}, gen={self.generation}, waiters={waiters}, verdict={self.verdict})"


class LookupCore:
    """Scheduler-owned probe table, reverse index, generations and step batch.

    All methods must be called from one thread.  None of them performs I/O or
    blocks.  Errors: methods raise :class:`InvalidInputError` for bad
    arguments, before changing anything.
    """

    def __init__(self) -> None:
        self.states: dict[Key, ProbeState] = {}
        # Reverse index: request id -> keys it waits on, and its context
        # (handed to the backend for the groups it owns).
        self.requests: dict[str, set[Key]] = {}
        self.contexts: dict[str, object] = {}
        # This step's batch: (key, generation, req_id) in first-asked order.
        self.step_batch: list[tuple[Key, int, str]] = []
        # Groups submitted whose first outcome has not been applied yet.
        self.outstanding: dict[int, ProbeGroup] = {}
        #: Outcomes published by the worker, applied by :meth:`drain`.
        self.inbox: deque[GroupOutcome] = deque()
        self.stats = Stats()
        self._generations = itertools.count(1)
        self._batch_ids = itertools.count(1)
        self._group_ids = itertools.count(1)

    # --- Lookup ------------------------------------------------------------

    def lookup(self, key: Key, req_context: HasReqId) -> bool | None:
        """Lookup action: the verdict if known, else None (ask again later).

        Applies any published results first, so a verdict is visible to the
        first lookup after the backend returned.

        Raises:
            InvalidInputError: ``key`` is not ``bytes`` or ``req_context`` has
                no string ``req_id``.  Nothing changed.
        """
        if self.inbox:
            self.drain()
        try:
            state = self.states.get(key)
            req_id = req_context.req_id
            # Inside the try: an unhashable req_id fails here, and must be
            # reported as bad input like any other bad req_id.
            if state is not None and req_id in state.waiters:
                return state.verdict  # the same request asking again
        except (TypeError, AttributeError) as exc:
            raise _bad_lookup(key, req_context) from exc
        if state is None:
            # A new probe (ABSENT -> PENDING).  This path and the join below
            # are written inline: they run for every new (key, request) pair,
            # and a method call would be a tenth of their cost.
            if type(key) is not bytes or type(req_id) is not str:
                raise _bad_lookup(key, req_context)
            generation = next(self._generations)
            self.states[key] = ProbeState(generation, req_id)
            self.step_batch.append((key, generation, req_id))
            self.stats.probes_created += 1
            verdict = None
        else:
            # Another request joins the probe (its phase does not change); the
            # early return above ruled out a request already waiting on it.
            if type(req_id) is not str:
                raise _bad_lookup(key, req_context)
            state.waiters.add(req_id)
            phase = state.phase
            if phase is PENDING:
                self.stats.joins += 1
            elif phase is IN_FLIGHT:
                self.stats.in_flight_reuses += 1
            verdict = state.verdict
        # Both paths: remember (request, key) in the reverse index.
        keys = self.requests.get(req_id)
        if keys is None:
            self.requests[req_id] = {key}
            self.contexts[req_id] = req_context
        else:
            keys.add(key)
        return verdict

    # --- Flush ---------------------------------------------------------------

    def flush(self) -> Batch | None:
        """Flush action: submit this step's PENDING probes, one group per request.

        Entries whose state was reclaimed (its requests all left) or forced to
        MISS since the lookup are skipped: they are never probed.  A key is
        grouped under the request that first asked for it this step, or under
        another waiting request if that one left.  Returns None when there is
        nothing to submit.
        """
        if self.inbox:
            self.drain()
        entries, self.step_batch = self.step_batch, []
        if not entries:
            return None
        to_in_flight = NEXT_PHASE[(PENDING, Event.FLUSH, True)]
        pending = PENDING
        # A request's new keys are usually consecutive entries, so the group
        # of the previous entry is tried before the dict (`is` is only a
        # shortcut; the dict decides).
        grouped: dict[str, tuple[list[Key], list[int]]] = {}
        states = self.states
        last_req: str | None = None
        keys: list[Key] = []
        gens: list[int] = []
        for key, generation, req_id in entries:
            state = states.get(key)
            if state is None or state.generation != generation or state.phase is not pending:
                continue
            if req_id not in state.waiters:
                req_id = min(state.waiters)  # deterministic, so traces replay
            state.phase = to_in_flight  # type: ignore[assignment]  # declared: PENDING -> IN_FLIGHT
            if req_id is not last_req:
                last_req = req_id
                slot = grouped.get(req_id)
                if slot is None:
                    slot = grouped[req_id] = ([], [])
                keys, gens = slot
            keys.append(key)
            gens.append(generation)
        if not grouped:
            return None
        batch_id = next(self._batch_ids)
        contexts = self.contexts
        group_ids = self._group_ids
        groups = tuple(
            ProbeGroup(next(group_ids), batch_id, req_id, contexts[req_id], tuple(keys), tuple(gens))
            for req_id, (keys, gens) in grouped.items()
        )
        outstanding = self.outstanding
        submitted = 0
        for group in groups:
            outstanding[group.group_id] = group
            submitted += len(group.keys)
        self.stats.probes_submitted += submitted
        self.stats.batches += 1
        return Batch(batch_id, groups)

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
        """Apply one group outcome to the states of the same generation.

        A failure applies MISS to each key.  Keys whose state is gone, belongs
        to another generation, or is already RESOLVED are dropped (counted in
        ``stale_results_dropped``): that is what keeps a timed-out call's late
        answer, or a result racing a ``mark_miss``, from overriding anything.
        """
        group = outcome.group
        stats = self.stats
        first = self.outstanding.pop(group.group_id, None) is not None
        if outcome.late:
            stats.late_results += 1
        if first:
            self._count_call(outcome.failure)
        verdicts: Iterable[bool] = (
            outcome.verdicts if outcome.verdicts is not None else itertools.repeat(False, len(group.keys))
        )
        states = self.states
        next_phase = _DRAIN_NEXT
        in_flight = IN_FLIGHT
        answered = _ANSWERED
        # Counted locally and added once: a stats attribute update per key
        # costs as much as the state change itself.
        hits = misses = 0
        # Producers guarantee one verdict per key (probe_group checks lengths).
        for key, generation, verdict in zip(group.keys, group.generations, verdicts, strict=False):
            state = states.get(key)
            if state is None or state.generation != generation:
                stats.stale_results_dropped += 1
                continue
            source = state.phase
            if source is in_flight and state.waiters:
                # The common row, read from NEXT_PHASE at import (_ANSWERED).
                state.phase = answered
                state.verdict = verdict
                if verdict:
                    hits += 1
                else:
                    misses += 1
                continue
            dest = next_phase[not state.waiters].get(source._value_, source)
            if dest is ABSENT:
                del states[key]
                stats.orphans_reclaimed += 1
            elif source is RESOLVED or dest is not RESOLVED:
                stats.stale_results_dropped += 1
            else:
                state.phase = dest
                state.verdict = verdict
                if verdict:
                    hits += 1
                else:
                    misses += 1
        stats.hits += hits
        stats.misses += misses

    def _count_call(self, failure: FailureKind | None) -> None:
        stats = self.stats
        # A dead worker or a saturated one made no backend call for the group.
        stats.backend_calls += failure is not FailureKind.SATURATED and failure is not FailureKind.WORKER_DIED
        if failure is None:
            return
        stats.failures[failure.value] = stats.failures.get(failure.value, 0) + 1
        if failure in _BACKEND_ERRORS:
            stats.backend_errors += 1
        elif failure is FailureKind.TIMEOUT:
            stats.timeouts += 1
        elif failure is FailureKind.SATURATED:
            stats.saturated += 1

    def fail_outstanding(self, failure: FailureKind, detail: str) -> int:
        """Resolve every submitted group that has no outcome yet as a failure.

        Used when the worker died (its queue is lost) and at shutdown.
        Returns the number of groups failed.
        """
        self.drain()
        groups = list(self.outstanding.values())
        for group in groups:
            self.apply(GroupOutcome(group, None, failure, detail))
        if failure is FailureKind.WORKER_DIED:
            self.stats.worker_deaths += 1
        return len(groups)

    # --- Cleanup -------------------------------------------------------------

    def cleanup(self, req_id: str) -> None:
        """Cleanup action: the request finished; release its interest in every key.

        A request id the manager does not know is counted and ignored.

        Raises:
            InvalidInputError: ``req_id`` is not a string.  Nothing changed.
        """
        if type(req_id) is not str:
            raise InvalidInputError(f"cleanup() takes a request id string, got {type(req_id).__name__}")
        keys = self.requests.pop(req_id, None)
        if keys is None:
            self.stats.unknown_cleanups += 1
            return
        del self.contexts[req_id]
        states = self.states
        next_phase = _CLEANUP_NEXT
        never_probed = 0
        for key in keys:
            state = states[key]
            waiters = state.waiters
            waiters.discard(req_id)
            source = state.phase
            dest = next_phase[not waiters][source._value_]
            if dest is ABSENT:
                del states[key]
                if source is PENDING:
                    never_probed += 1
            else:
                state.phase = dest
        self.stats.never_probed += never_probed

    # --- MarkMiss ------------------------------------------------------------

    def mark_miss(self, keys: Iterable[Key]) -> None:
        """MarkMiss action: force MISS for keys whose load from the tier failed.

        Keys without a state are counted and ignored (the next lookup probes
        them afresh).  A later result of the probe that was in flight is
        dropped, so the MISS sticks until the state is reclaimed.

        Raises:
            InvalidInputError: ``keys`` is a single key (``bytes``/``str``)
                rather than an iterable of keys, or holds a non-``bytes``
                element.  Nothing changed.
        """
        if isinstance(keys, (bytes, bytearray, memoryview, str)):
            raise InvalidInputError(
                f"mark_miss() takes an iterable of keys, got a single {type(keys).__name__}; wrap it in a list"
            )
        try:
            keys = list(keys)
        except TypeError as exc:
            raise InvalidInputError(f"mark_miss() takes an iterable of keys, got {type(keys).__name__}") from exc
        for key in keys:
            if type(key) is not bytes:
                raise InvalidInputError(f"mark_miss() keys must be bytes, got {type(key).__name__}")
        states = self.states
        for key in keys:
            state = states.get(key)
            if state is None:
                self.stats.unknown_mark_miss += 1
                continue
            dest = _MARK_MISS_NEXT[not state.waiters][state.phase._value_]
            self.stats.forced_misses += 1
            if dest is ABSENT:
                del states[key]
                self.stats.orphans_reclaimed += 1
            else:
                state.phase = dest
                state.verdict = False

    # --- Shutdown ------------------------------------------------------------

    def shutdown(self) -> None:
        """Shutdown action: reclaim every state, request, batch entry and outcome."""
        self.states.clear()
        self.requests.clear()
        self.contexts.clear()
        self.step_batch.clear()
        self.outstanding.clear()
        self.inbox.clear()

    # --- Observation -----------------------------------------------------------

    def phase(self, key: Key) -> Phase:
        """The key's phase, or None when no state is held (does not drain)."""
        state = self.states.get(key)
        return None if state is None else state.phase

    def check_invariants(self) -> None:
        """Check the DESIGN.md section 2 invariants that a snapshot can show.

        Raises:
            InvariantViolation: naming the invariant and the offending key.
        """
        problems = list(self.violations())
        if problems:
            raise InvariantViolation("; ".join(problems))

    def violations(self) -> Iterable[str]:
        """Yield one message per broken invariant (empty when all hold)."""
        for key, state in self.states.items():
            if (state.verdict is not None) != (state.phase is RESOLVED):
                yield f"VerdictIffResolved: {key.hex()} {state!r}"
            if not state.waiters and state.phase is not IN_FLIGHT:
                yield f"NothingLeaks: {key.hex()} {state!r} has no waiters"
            for req_id in state.waiters:
                if key not in self.requests.get(req_id, ()):
                    yield f"ReverseIndexConsistent: {req_id} waits on {key.hex()} but the index lacks it"
        for req_id, keys in self.requests.items():
            if req_id not in self.contexts:
                yield f"ReverseIndexConsistent: {req_id} has no context"
            for key in keys:
                held = self.states.get(key)
                if held is None or req_id not in held.waiters:
                    yield f"ReverseIndexConsistent: ({req_id}, {key.hex()}) points at no live waiting state"
        submitted: dict[tuple[Key, int], int] = {}
        for group in self.outstanding.values():
            for pair in zip(group.keys, group.generations, strict=True):
                submitted[pair] = submitted.get(pair, 0) + 1
        for (key, generation), count in submitted.items():
            if count > 1:
                yield f"EnqueueOnce: {key.hex()} generation {generation} is in {count} open groups"
        queued: dict[tuple[Key, int], int] = {}
        for key, generation, _ in self.step_batch:
            queued[(key, generation)] = queued.get((key, generation), 0) + 1
        for key, live in self.states.items():
            pair = (key, live.generation)
            if live.phase is PENDING and (pair in submitted or queued.get(pair) != 1):
                yield f"NoDuplicateProbe: PENDING {key.hex()} is submitted, or not queued exactly once"
            if live.phase is IN_FLIGHT and pair not in submitted:
                yield f"NothingLeaks: {key.hex()} IN_FLIGHT with no open group of its generation"


def _bad_lookup(key: object, req_context: object) -> InvalidInputError:
    if not isinstance(key, bytes) or type(key) is not bytes:
        return InvalidInputError(f"lookup() keys must be bytes, got {type(key).__name__}")
    req_id = getattr(req_context, "req_id", _MISSING)
    if req_id is _MISSING:
        return InvalidInputError(
            f"lookup() req_context must have a .req_id attribute; {type(req_context).__name__} has none"
        )
    return InvalidInputError(f"lookup() req_context.req_id must be a str, got {type(req_id).__name__}")


_MISSING = object()
