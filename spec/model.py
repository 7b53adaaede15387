"""The reference model: the TLA+ next-state relation transcribed into pure Python.

This module is the oracle of the property suite.  Its vocabulary is fixed by
``docs/properties.md``: one pure function per model action (scheduler:
:func:`Lookup`-style :func:`lookup`, :func:`flush`, :func:`drain`,
:func:`cleanup`, :func:`mark_miss`, :func:`shutdown`; worker:
:func:`take_batch`, :func:`complete_group`, :func:`fail_group`,
:func:`time_out`) and one pure predicate per invariant, named exactly as in
that document (:func:`TypeOK`, :func:`EnqueueOnce`, ...).

Theory of operation.  A :class:`State` is immutable; every action returns a
new one.  Per-key phase changes go through :func:`transition`, i.e. through
:data:`kvprobe.spec.lifecycle.NEXT_PHASE`, the table compiled from the one
lifecycle declaration, so the model cannot drift from the declared table.
Everything else (generations, the step batch, the worker's queue, the inbox
of published outcomes, the counters of :class:`Counts`) mirrors what
``kvprobe.statemachine.core.LookupCore`` promises, down to identifiers:
generations, batch ids and group ids are allocated in the same order, so a
recorded trace of the implementation can be replayed event by event
(:mod:`kvprobe.spec.replay`).

Besides the variables the implementation has, the state carries *history*
variables that only the invariants read (as TLA+ specs do): how often each
generation was submitted and had a result applied, which generations a forced
miss made moot, and how many results were applied to a state of another
generation.  The correct model never breaks an invariant; a state abstracted
from a buggy implementation can.

The per-probe functions (:func:`probe_lookup`, :func:`probe_drain`, ...),
:func:`transition` and :func:`partition_batch` carry PEP 316 contracts
(``pre:``/``post:`` in their docstrings) that CrossHair checks
(``crosshair check kvprobe.spec.model``).

Errors: actions raise :class:`ModelClosedError` after :func:`shutdown` and
:class:`ModelError` when called where the model's relation has no step (an
action's enabling condition is false, e.g. taking a batch from an empty
queue); the state passed in is never changed (it is immutable).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import TypeVar

from kvprobe.spec.lifecycle import ABSENT, NEXT_PHASE, Event, LookupPhase, Phase

__all__ = [
    "INVARIANTS",
    "TIMEOUT",
    "Counts",
    "EnqueueOnce",
    "ForcedMissSticks",
    "Group",
    "ModelClosedError",
    "ModelError",
    "NoDuplicateProbe",
    "NothingLeaks",
    "Outcome",
    "Probe",
    "Reclaimed",
    "ReverseIndexConsistent",
    "StaleGenerationDropped",
    "State",
    "TypeOK",
    "VerdictIffResolved",
    "VerdictProvenance",
    "broken_invariants",
    "cleanup",
    "complete_group",
    "drain",
    "drain_all",
    "fail_group",
    "flush",
    "initial",
    "lookup",
    "mark_miss",
    "partition_batch",
    "probe_cleanup",
    "probe_drain",
    "probe_lookup",
    "probe_mark_miss",
    "revive",
    "shutdown",
    "take_batch",
    "time_out",
    "transition",
    "verdict_iff_resolved",
    "worker_dies",
]

Key = bytes
PENDING = LookupPhase.PENDING
IN_FLIGHT = LookupPhase.IN_FLIGHT
RESOLVED = LookupPhase.RESOLVED

#: The failure name of a timed-out group (``FailureKind.TIMEOUT.value``).
TIMEOUT = "timeout"
# Failure names that count as backend errors (FailureKind values).
_BACKEND_ERRORS = frozenset({"raised", "raised_while_iterating", "short_result", "long_result", "bad_verdict"})


class ModelError(ValueError):
    """An action was applied where the model has no step (its guard is false)."""


class ModelClosedError(ModelError):
    """An action other than :func:`shutdown` was applied after shutdown."""


# --- records -------------------------------------------------------------------


@dataclass(frozen=True)
class Probe:
    """A key's probe state: phase, generation, waiting requests, verdict."""

    phase: LookupPhase
    gen: int
    waiters: frozenset[str]
    verdict: bool | None


@dataclass(frozen=True)
class Group:
    """One request's share of a flush: one backend call."""

    group_id: int
    batch_id: int
    req: str
    keys: tuple[Key, ...]
    gens: tuple[int, ...]


@dataclass(frozen=True)
class Outcome:
    """What the worker published for a group: verdicts, or a failure name."""

    group: Group
    verdicts: tuple[bool, ...] | None
    failure: str | None = None
    late: bool = False


@dataclass(frozen=True)
class Counts:
    """The counters of ``kvprobe.statemachine.types.Stats`` the model predicts."""

    probes_created: int = 0
    probes_submitted: int = 0
    joins: int = 0
    in_flight_reuses: int = 0
    never_probed: int = 0
    orphans_reclaimed: int = 0
    stale_results_dropped: int = 0
    forced_misses: int = 0
    hits: int = 0
    misses: int = 0
    batches: int = 0
    backend_calls: int = 0
    backend_errors: int = 0
    timeouts: int = 0
    late_results: int = 0
    unknown_cleanups: int = 0
    unknown_mark_miss: int = 0


_K = TypeVar("_K")
_V = TypeVar("_V")


def _frozen_map(items: Mapping[_K, _V] | None = None) -> Mapping[_K, _V]:
    # A read-only view: the state is immutable, actions build new mappings.
    return MappingProxyType(dict(items or {}))


@dataclass(frozen=True)
class State:
    """The whole model state (immutable; mappings are read-only views).

    Implementation variables: ``probes``, ``requests`` (the reverse index),
    ``step_batch`` (``(key, gen, req)`` in first-asked order), ``outstanding``
    (submitted groups whose first outcome is not applied), the worker's
    ``queue`` (batches not taken), ``taken`` groups and the ``timed_out`` ones
    among them, the ``inbox`` of published outcomes, the id counters,
    ``closed`` and ``counts``.

    History variables (read only by invariants): ``submitted`` (times each
    ``(key, gen)`` was submitted), ``submitted_not_pending`` (generations
    submitted while their state was not PENDING of that generation),
    ``applied`` (results applied per ``(key, gen)``), ``stale_applied``
    (results applied to a state of another generation), ``forced``
    (generations hit by a forced miss), ``settled`` (generations that
    reached RESOLVED or were forced: moot for :func:`NoDuplicateProbe`) and
    ``told`` (per ``(key, gen)``, the first outcome published for it: the
    backend's verdict, False for a failure, timeout or saturation, and the
    manager's False for a dead worker's open groups).
    """

    probes: Mapping[Key, Probe] = field(default_factory=_frozen_map)
    requests: Mapping[str, frozenset[Key]] = field(default_factory=_frozen_map)
    step_batch: tuple[tuple[Key, int, str], ...] = ()
    outstanding: Mapping[int, Group] = field(default_factory=_frozen_map)
    queue: tuple[tuple[Group, ...], ...] = ()
    taken: Mapping[int, Group] = field(default_factory=_frozen_map)
    timed_out: frozenset[int] = frozenset()
    inbox: tuple[Outcome, ...] = ()
    next_gen: int = 1
    next_batch: int = 1
    next_group: int = 1
    closed: bool = False
    worker_dead: bool = False
    counts: Counts = Counts()
    submitted: Mapping[tuple[Key, int], int] = field(default_factory=_frozen_map)
    submitted_not_pending: frozenset[tuple[Key, int]] = frozenset()
    applied: Mapping[tuple[Key, int], int] = field(default_factory=_frozen_map)
    stale_applied: int = 0
    forced: frozenset[tuple[Key, int]] = frozenset()
    settled: frozenset[tuple[Key, int]] = frozenset()
    told: Mapping[tuple[Key, int], bool] = field(default_factory=_frozen_map)


def _tell(s: State, group: Group, verdicts: Sequence[bool] | None) -> Mapping[tuple[Key, int], bool]:
    """``told`` after the first outcome of ``group`` (None: a failure, every key False)."""
    told = dict(s.told)
    said = verdicts if verdicts is not None else (False,) * len(group.keys)
    for key, gen, verdict in zip(group.keys, group.gens, said, strict=False):
        told.setdefault((key, gen), bool(verdict))
    return _frozen_map(told)


def initial() -> State:
    """The initial state: nothing held, nothing submitted."""
    return State()


def _bump(counts: Counts, **deltas: int) -> Counts:
    return replace(counts, **{name: getattr(counts, name) + d for name, d in deltas.items()})


def _open(s: State) -> None:
    if s.closed:
        raise ModelClosedError("the manager was shut down")


# --- the transition function -----------------------------------------------------


def transition(phase: Phase, event: Event, has_waiters: bool) -> tuple[bool, Phase]:
    """Look up the declared lifecycle: ``(declared, next_phase)``.

    When the lifecycle declares no rule for the case, returns
    ``(False, phase)``: the event leaves the phase alone (the core treats an
    undeclared drain as "drop the result").  Never raises.

    pre: isinstance(event, Event)
    post: __return__[0] == ((phase, event, has_waiters) in NEXT_PHASE)
    post: __return__[0] or __return__[1] is phase
    post: not (event is Event.SHUTDOWN and phase is not None) or __return__ == (True, None)
    post: not (event is Event.LOOKUP and phase is not None and __return__[0]) or __return__[1] is phase
    post: not (event is Event.MARK_MISS and __return__[0]) or __return__[1] in (RESOLVED, None)
    post: not (phase is IN_FLIGHT and event is Event.DRAIN and has_waiters) or __return__[1] is RESOLVED
    post: not (phase is IN_FLIGHT and event is Event.CLEANUP) or __return__[1] is IN_FLIGHT
    """
    case = (phase, event, has_waiters)
    if case in NEXT_PHASE:
        return True, NEXT_PHASE[case]
    return False, phase


def verdict_iff_resolved(probe: Probe) -> bool:
    """The per-state part of :func:`VerdictIffResolved`.

    post: __return__ == ((probe.phase is RESOLVED) == (probe.verdict is not None))
    """
    return (probe.verdict is not None) is (probe.phase is RESOLVED)


# --- per-probe actions (the part CrossHair checks) -----------------------------------


def probe_lookup(probe: Probe, req: str) -> Probe:
    """A lookup by ``req`` of a key that has a state: join it, keep its phase.

    pre: verdict_iff_resolved(probe)
    post: __return__.phase is probe.phase and __return__.gen == probe.gen
    post: __return__.verdict == probe.verdict
    post: __return__.waiters == probe.waiters | {req}
    post: verdict_iff_resolved(__return__)
    """
    _, dest = transition(probe.phase, Event.LOOKUP, True)
    assert dest is not None
    if req in probe.waiters and dest is probe.phase:
        return probe
    return Probe(dest, probe.gen, probe.waiters | {req}, probe.verdict)


def probe_drain(probe: Probe, gen: int, verdict: bool) -> Probe | None:
    """Apply a result of generation ``gen`` (a failure passes ``False``).

    Returns the new state, or None when the state is reclaimed (an orphan:
    nobody waits on it).  A result of another generation, or for a state
    that is not IN_FLIGHT, leaves the state unchanged.

    pre: verdict_iff_resolved(probe)
    pre: probe.waiters or probe.phase is IN_FLIGHT
    post: __return__ is None or verdict_iff_resolved(__return__)
    post: probe.gen == gen or __return__ == probe
    post: probe.phase is not RESOLVED or __return__ == probe
    post: __return__ is None or __return__.gen == probe.gen
    post: (__return__ is None) == (probe.gen == gen and probe.phase is IN_FLIGHT and not probe.waiters)
    post: __return__ is None or __return__ == probe or __return__ == Probe(RESOLVED, gen, probe.waiters, verdict)
    post: not (probe.gen == gen and probe.phase is IN_FLIGHT and probe.waiters) or __return__ != probe
    """
    if probe.gen != gen:
        return probe
    declared, dest = transition(probe.phase, Event.DRAIN, bool(probe.waiters))
    if not declared or probe.phase is RESOLVED:
        return probe
    if dest is ABSENT:
        return None
    if dest is not RESOLVED:
        return probe
    return Probe(dest, gen, probe.waiters, verdict)


def probe_cleanup(probe: Probe, req: str) -> Probe | None:
    """``req`` no longer waits: the state after cleanup, None when reclaimed.

    pre: req in probe.waiters
    pre: verdict_iff_resolved(probe)
    post: __return__ is None or req not in __return__.waiters
    post: __return__ is None or verdict_iff_resolved(__return__)
    post: not (probe.phase is IN_FLIGHT) or __return__ is not None
    post: __return__ is not None or probe.waiters == {req}
    post: __return__ is None or __return__.phase is probe.phase
    """
    waiters = probe.waiters - {req}
    declared, dest = transition(probe.phase, Event.CLEANUP, bool(waiters))
    if not declared:
        raise ModelError(f"no declared cleanup from {probe.phase}")
    if dest is ABSENT:
        return None
    return Probe(dest, probe.gen, waiters, probe.verdict)


def probe_mark_miss(probe: Probe) -> Probe | None:
    """Force MISS: RESOLVED(False), or None when nobody waits (reclaimed).

    pre: probe.waiters or probe.phase is IN_FLIGHT
    post: __return__ is None or (__return__.phase is RESOLVED and __return__.verdict is False)
    post: (__return__ is None) == (not probe.waiters)
    post: __return__ is None or __return__.gen == probe.gen
    """
    declared, dest = transition(probe.phase, Event.MARK_MISS, bool(probe.waiters))
    if not declared:
        raise ModelError(f"no declared mark_miss from {probe.phase} with waiters={bool(probe.waiters)}")
    if dest is ABSENT:
        return None
    return Probe(RESOLVED, probe.gen, probe.waiters, False)


def partition_batch(
    entries: Sequence[tuple[Key, int, str]], pending: Mapping[Key, tuple[int, frozenset[str]]]
) -> list[tuple[str, list[Key], list[int]]]:
    """How a flush groups this step's entries by request.

    ``entries`` is the step batch (``(key, gen, req)`` in first-asked order);
    ``pending`` maps each key whose state is PENDING to ``(gen, waiters)``.
    An entry is submitted only if its key is PENDING with the same generation
    (otherwise its state was reclaimed, replaced or forced to MISS since the
    lookup: never probed) and only once.  It goes to the group of the request
    that asked for it, or, if that request left, of the smallest waiting
    request id.  Groups come in order of their first entry.  Never raises.

    post: all(len(ks) == len(gs) and ks for _, ks, gs in __return__)
    post: len({r for r, _, _ in __return__}) == len(__return__)
    post: all(k in pending and pending[k][0] == g for _, ks, gs in __return__ for k, g in zip(ks, gs))
    post: all(r in pending[k][1] for r, ks, _ in __return__ for k in ks)
    post: sum(len(ks) for _, ks, _ in __return__) == len(_keys_of(__return__))
    post: _keys_of(__return__) == {k for k, g, _ in entries if k in pending and pending[k][0] == g and pending[k][1]}
    """
    groups: dict[str, tuple[list[Key], list[int]]] = {}
    seen: set[Key] = set()
    for key, gen, req in entries:
        live = pending.get(key)
        if live is None or live[0] != gen or key in seen or not live[1]:
            continue
        seen.add(key)
        if req not in live[1]:
            req = min(live[1])
        slot = groups.setdefault(req, ([], []))
        slot[0].append(key)
        slot[1].append(gen)
    return [(req, keys, gens) for req, (keys, gens) in groups.items()]


def _keys_of(groups: Iterable[tuple[str, list[Key], list[int]]]) -> set[Key]:
    return {key for _, keys, _ in groups for key in keys}


# --- scheduler actions ------------------------------------------------------------------


def lookup(s: State, key: Key, req: str) -> tuple[State, bool | None]:
    """Lookup: apply published outcomes, then the verdict if known, else None.

    A key without a state gets a new PENDING generation that joins the step
    batch.  Raises :class:`ModelClosedError` after shutdown.
    """
    _open(s)
    s = drain_all(s)
    probe = s.probes.get(key)
    counts = s.counts
    if probe is None:
        declared, dest = transition(ABSENT, Event.LOOKUP, True)
        assert declared and dest is PENDING
        gen = s.next_gen
        probes = {**s.probes, key: Probe(dest, gen, frozenset({req}), None)}
        s = replace(
            s,
            probes=_frozen_map(probes),
            requests=_remember(s.requests, req, key),
            step_batch=(*s.step_batch, (key, gen, req)),
            next_gen=gen + 1,
            counts=_bump(counts, probes_created=1),
        )
        return s, None
    if req in probe.waiters:
        return s, probe.verdict
    if probe.phase is PENDING:
        counts = _bump(counts, joins=1)
    elif probe.phase is IN_FLIGHT:
        counts = _bump(counts, in_flight_reuses=1)
    joined = probe_lookup(probe, req)
    s = replace(
        s,
        probes=_frozen_map({**s.probes, key: joined}),
        requests=_remember(s.requests, req, key),
        counts=counts,
    )
    return s, joined.verdict


def _remember(requests: Mapping[str, frozenset[Key]], req: str, key: Key) -> Mapping[str, frozenset[Key]]:
    return _frozen_map({**requests, req: requests.get(req, frozenset()) | {key}})


def flush(s: State) -> tuple[State, tuple[Group, ...]]:
    """Flush: submit this step's PENDING probes, one group per request.

    Returns the new state and the submitted groups (empty when nothing was
    submitted; then no batch id is used).  Raises :class:`ModelClosedError`
    after shutdown.
    """
    _open(s)
    s = drain_all(s)
    entries = s.step_batch
    s = replace(s, step_batch=())
    pending = {k: (p.gen, p.waiters) for k, p in s.probes.items() if p.phase is PENDING}
    parts = partition_batch(entries, pending)
    if not parts:
        return s, ()
    batch_id = s.next_batch
    groups = tuple(
        Group(s.next_group + i, batch_id, req, tuple(keys), tuple(gens)) for i, (req, keys, gens) in enumerate(parts)
    )
    probes = dict(s.probes)
    submitted = dict(s.submitted)
    not_pending = set(s.submitted_not_pending)
    for group in groups:
        for key, gen in zip(group.keys, group.gens, strict=True):
            probe = probes[key]
            if probe.phase is not PENDING or probe.gen != gen:
                not_pending.add((key, gen))
            declared, dest = transition(probe.phase, Event.FLUSH, bool(probe.waiters))
            assert declared and dest is not None
            probes[key] = Probe(dest, gen, probe.waiters, probe.verdict)
            submitted[(key, gen)] = submitted.get((key, gen), 0) + 1
    s = replace(
        s,
        probes=_frozen_map(probes),
        outstanding=_frozen_map({**s.outstanding, **{g.group_id: g for g in groups}}),
        queue=(*s.queue, groups),
        next_batch=batch_id + 1,
        next_group=s.next_group + len(groups),
        counts=_bump(s.counts, probes_submitted=sum(len(g.keys) for g in groups), batches=1),
        submitted=_frozen_map(submitted),
        submitted_not_pending=frozenset(not_pending),
    )
    return s, groups


def drain(s: State) -> State:
    """Drain: apply the oldest published outcome.

    Raises :class:`ModelError` when the inbox is empty, :class:`ModelClosedError`
    after shutdown.
    """
    _open(s)
    if not s.inbox:
        raise ModelError("Drain: nothing published")
    outcome, *rest = s.inbox
    return apply_outcome(replace(s, inbox=tuple(rest)), outcome)


def drain_all(s: State) -> State:
    """Drain repeated until the inbox is empty (what lookup and flush do first)."""
    while s.inbox:
        s = drain(s)
    return s


def apply_outcome(s: State, outcome: Outcome) -> State:
    """Apply one outcome to the states of the same generation (see :func:`probe_drain`).

    A failure applies MISS to each key.  The first outcome of a group counts
    the backend call; any later one (a late answer) is counted as late and
    changes nothing.
    """
    group = outcome.group
    counts = s.counts
    first = group.group_id in s.outstanding
    outstanding = {gid: g for gid, g in s.outstanding.items() if gid != group.group_id}
    if outcome.late:
        counts = _bump(counts, late_results=1)
    if first:
        counts = _count_call(counts, outcome.failure)
    verdicts = outcome.verdicts if outcome.verdicts is not None else (False,) * len(group.keys)
    probes = dict(s.probes)
    applied = dict(s.applied)
    settled = set(s.settled)
    for key, gen, verdict in zip(group.keys, group.gens, verdicts, strict=False):
        probe = probes.get(key)
        if probe is None or probe.gen != gen:
            counts = _bump(counts, stale_results_dropped=1)
            continue
        after = probe_drain(probe, gen, verdict)
        if after is None:
            del probes[key]
            counts = _bump(counts, orphans_reclaimed=1)
        elif after == probe:
            counts = _bump(counts, stale_results_dropped=1)
            continue
        else:
            probes[key] = after
            settled.add((key, gen))
            counts = _bump(counts, hits=1) if verdict else _bump(counts, misses=1)
        applied[(key, gen)] = applied.get((key, gen), 0) + 1
    return replace(
        s,
        probes=_frozen_map(probes),
        outstanding=_frozen_map(outstanding),
        counts=counts,
        applied=_frozen_map(applied),
        settled=frozenset(settled),
    )


def _count_call(counts: Counts, failure: str | None) -> Counts:
    if failure in ("saturated", "worker_died"):
        return counts
    counts = _bump(counts, backend_calls=1)
    if failure in _BACKEND_ERRORS:
        counts = _bump(counts, backend_errors=1)
    elif failure == TIMEOUT:
        counts = _bump(counts, timeouts=1)
    return counts


def cleanup(s: State, req: str) -> State:
    """Cleanup: ``req`` finished; release its interest in every key.

    An unknown request id is counted and ignored.  Raises
    :class:`ModelClosedError` after shutdown.
    """
    _open(s)
    keys = s.requests.get(req)
    if keys is None:
        return replace(s, counts=_bump(s.counts, unknown_cleanups=1))
    probes = dict(s.probes)
    counts = s.counts
    for key in keys:
        probe = probes[key]
        after = probe_cleanup(probe, req)
        if after is None:
            del probes[key]
            if probe.phase is PENDING:
                counts = _bump(counts, never_probed=1)
        else:
            probes[key] = after
    requests = {r: ks for r, ks in s.requests.items() if r != req}
    return replace(
        s,
        probes=_frozen_map(probes),
        requests=_frozen_map(requests),
        counts=counts,
    )


def mark_miss(s: State, keys: Iterable[Key]) -> State:
    """MarkMiss: force MISS for each key that has a state (others are counted).

    Raises :class:`ModelClosedError` after shutdown.
    """
    _open(s)
    probes = dict(s.probes)
    counts = s.counts
    forced = set(s.forced)
    settled = set(s.settled)
    for key in keys:
        probe = probes.get(key)
        if probe is None:
            counts = _bump(counts, unknown_mark_miss=1)
            continue
        counts = _bump(counts, forced_misses=1)
        forced.add((key, probe.gen))
        settled.add((key, probe.gen))
        after = probe_mark_miss(probe)
        if after is None:
            del probes[key]
            counts = _bump(counts, orphans_reclaimed=1)
        else:
            probes[key] = after
    return replace(
        s,
        probes=_frozen_map(probes),
        counts=counts,
        forced=frozenset(forced),
        settled=frozenset(settled),
    )


def shutdown(s: State) -> State:
    """Shutdown: reclaim everything; later actions raise.  Idempotent."""
    if s.closed:
        return s
    return replace(
        s,
        probes=_frozen_map(),
        requests=_frozen_map(),
        step_batch=(),
        outstanding=_frozen_map(),
        queue=(),
        taken=_frozen_map(),
        timed_out=frozenset(),
        inbox=(),
        closed=True,
    )


# --- worker actions --------------------------------------------------------------------


def take_batch(s: State) -> tuple[State, tuple[Group, ...]]:
    """TakeBatch: the worker takes the oldest submitted batch.

    Raises :class:`ModelError` when nothing is queued.
    """
    _open(s)
    if not s.queue:
        raise ModelError("TakeBatch: nothing submitted")
    batch, *rest = s.queue
    taken = {**s.taken, **{g.group_id: g for g in batch}}
    return replace(s, queue=tuple(rest), taken=_frozen_map(taken)), batch


def _deliver(s: State, group_id: int, verdicts: tuple[bool, ...] | None, failure: str | None) -> State:
    _open(s)
    group = s.taken.get(group_id)
    if group is None:
        raise ModelError(f"group {group_id} is not with the worker")
    if verdicts is not None and len(verdicts) != len(group.keys):
        raise ModelError(f"{len(verdicts)} verdicts for {len(group.keys)} keys")
    late = group_id in s.timed_out
    taken = {gid: g for gid, g in s.taken.items() if gid != group_id}
    return replace(
        s,
        told=s.told if late else _tell(s, group, verdicts),
        taken=_frozen_map(taken),
        timed_out=s.timed_out - {group_id},
        inbox=(*s.inbox, Outcome(group, verdicts, failure, late)),
    )


def complete_group(s: State, group_id: int, verdicts: Sequence[bool]) -> State:
    """CompleteGroup: publish one verdict per key (marked late after a timeout).

    Raises :class:`ModelError` if the group is not with the worker or the
    number of verdicts is wrong.
    """
    return _deliver(s, group_id, tuple(verdicts), None)


def fail_group(s: State, group_id: int, failure: str) -> State:
    """FailGroup: publish a failure (a FailureKind value); its keys resolve as MISS.

    Raises :class:`ModelError` if the group is not with the worker.
    """
    return _deliver(s, group_id, None, failure)


def time_out(s: State, group_id: int) -> State:
    """TimeOut: publish TIMEOUT; the group stays with the worker for a late answer.

    Raises :class:`ModelError` if the group is not with the worker or already timed out.
    """
    _open(s)
    group = s.taken.get(group_id)
    if group is None or group_id in s.timed_out:
        raise ModelError(f"group {group_id} is not with the worker or already timed out")
    return replace(
        s,
        timed_out=s.timed_out | {group_id},
        inbox=(*s.inbox, Outcome(group, None, TIMEOUT, False)),
        told=_tell(s, group, None),
    )


def worker_dies(s: State) -> State:
    """The worker thread dies with everything it holds (it publishes nothing more).

    Raises :class:`ModelClosedError` after shutdown.
    """
    _open(s)
    return replace(s, worker_dead=True)


def revive(s: State) -> State:
    """What the manager does at its next flush or drain_results after a worker death.

    Applies what was published, then a ``worker_died`` failure to every open
    group (in submission order), and starts a fresh, empty worker.  Does
    nothing while the worker is alive.
    """
    _open(s)
    if not s.worker_dead:
        return s
    s = drain_all(s)
    for group in list(s.outstanding.values()):
        s = replace(s, told=_tell(s, group, None))
        s = apply_outcome(s, Outcome(group, None, "worker_died"))
    return replace(s, queue=(), taken=_frozen_map(), timed_out=frozenset(), worker_dead=False)


# --- invariants ------------------------------------------------------------------------


def TypeOK(s: State) -> bool:
    """Every variable holds values of its type."""
    for key, probe in s.probes.items():
        if type(key) is not bytes or not isinstance(probe, Probe) or not isinstance(probe.phase, LookupPhase):
            return False
        if type(probe.gen) is not int or probe.verdict not in (None, True, False):
            return False
        if not all(type(r) is str for r in probe.waiters):
            return False
    for req, keys in s.requests.items():
        if type(req) is not str or not all(type(k) is bytes for k in keys):
            return False
    groups = [*s.outstanding.values(), *s.taken.values(), *(g for b in s.queue for g in b), *(o.group for o in s.inbox)]
    for group in groups:
        if len(group.keys) != len(group.gens) or not group.keys:
            return False
    for outcome in s.inbox:
        if (outcome.verdicts is None) == (outcome.failure is None):
            return False
        if outcome.verdicts is not None and len(outcome.verdicts) != len(outcome.group.keys):
            return False
    return s.timed_out <= set(s.taken)


def EnqueueOnce(s: State) -> bool:
    """A generation is submitted at most once, only while PENDING; at most one result applied."""
    return (
        all(n <= 1 for n in s.submitted.values())
        and not s.submitted_not_pending
        and all(n <= 1 for n in s.applied.values())
    )


def NoDuplicateProbe(s: State) -> bool:
    """Per key at most one submitted, unanswered generation that has not settled."""
    live: dict[Key, set[int]] = {}
    for group in s.outstanding.values():
        for key, gen in zip(group.keys, group.gens, strict=True):
            if (key, gen) not in s.settled:
                live.setdefault(key, set()).add(gen)
    return all(len(gens) <= 1 for gens in live.values())


def StaleGenerationDropped(s: State) -> bool:
    """No result was ever applied to a state of another generation."""
    return s.stale_applied == 0


def VerdictIffResolved(s: State) -> bool:
    """The verdict is set exactly when the phase is RESOLVED."""
    return all(verdict_iff_resolved(p) for p in s.probes.values())


def ForcedMissSticks(s: State) -> bool:
    """A force-missed generation still held is RESOLVED with verdict False."""
    for key, probe in s.probes.items():
        if (key, probe.gen) in s.forced and not (probe.phase is RESOLVED and probe.verdict is False):
            return False
    return True


def VerdictProvenance(s: State) -> bool:
    """A RESOLVED state's verdict is False if forced, else the first outcome published for its generation."""
    for key, probe in s.probes.items():
        if probe.phase is RESOLVED:
            want = False if (key, probe.gen) in s.forced else s.told.get((key, probe.gen))
            if probe.verdict is not want:
                return False
    return True


def ReverseIndexConsistent(s: State) -> bool:
    """Every remembered (request, key) points at a live state listing it, and vice versa."""
    for req, keys in s.requests.items():
        if not keys:
            return False
        for key in keys:
            probe = s.probes.get(key)
            if probe is None or req not in probe.waiters:
                return False
    for key, probe in s.probes.items():
        for req in probe.waiters:
            if key not in s.requests.get(req, ()):
                return False
    return True


def NothingLeaks(s: State) -> bool:
    """Safety part of nothing-leaks.

    No PENDING or RESOLVED state without waiters; every IN_FLIGHT state has an
    open (outstanding) group of its generation; and every outstanding group
    is still somewhere in the pipeline (queued, with the worker, or its
    outcome published), so it will be answered.
    """
    open_pairs = {(k, g) for grp in s.outstanding.values() for k, g in zip(grp.keys, grp.gens, strict=True)}
    for key, probe in s.probes.items():
        if probe.phase is IN_FLIGHT:
            if (key, probe.gen) not in open_pairs:
                return False
        elif not probe.waiters:
            return False
    queued = {g.group_id for batch in s.queue for g in batch}
    published = {o.group.group_id for o in s.inbox}
    return all(gid in queued or gid in s.taken or gid in published for gid in s.outstanding)


def Reclaimed(s: State) -> bool:
    """The end state EventuallyReclaimed promises: nothing held, nothing open."""
    return not s.probes and not s.requests and not s.outstanding and not s.step_batch


#: The safety invariants by their shared names (docs/properties.md).
INVARIANTS: dict[str, Callable[[State], bool]] = {
    "TypeOK": TypeOK,
    "EnqueueOnce": EnqueueOnce,
    "NoDuplicateProbe": NoDuplicateProbe,
    "StaleGenerationDropped": StaleGenerationDropped,
    "VerdictIffResolved": VerdictIffResolved,
    "ForcedMissSticks": ForcedMissSticks,
    "VerdictProvenance": VerdictProvenance,
    "ReverseIndexConsistent": ReverseIndexConsistent,
    "NothingLeaks": NothingLeaks,
}


def broken_invariants(s: State) -> list[str]:
    """Names of the invariants that do not hold in ``s`` (empty when all hold)."""
    return [name for name, holds in INVARIANTS.items() if not holds(s)]
