"""The reference model: the TLA+ next-state relation transcribed into pure Python.

This module is the oracle of the property suite.  Its vocabulary is fixed by
``docs/properties.md``: one pure function per model action (scheduler:
:func:`Lookup`-style :func:`lookup`, :func:`flush`, :func:`drain`,
:func:`cleanup`, :func:`mark_miss`, :func:`shutdown`; worker:
:func:`take_batch`, :func:`complete_group`, :func:`fail_group`,
:func:`time_out`, :func:`saturate`, :func:`late_answer`,
:func:`worker_dies`; and :func:`revive`) and one pure predicate per
invariant, named exactly as in that document and in ``tla/KVProbe.tla``
(:func:`TypeOK`, :func:`EnqueueOnce`, ...), with the same meaning:
``tests/tla/test_model_replay.py`` replays every edge of TLC's state graph
through these functions and compares successors and invariant verdicts.

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

Errors: scheduler actions (and :func:`worker_dies`) raise
:class:`ModelClosedError` after :func:`shutdown`; the stopped worker's calls
may still answer (their outcomes are discarded).  Every action raises
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
    "DEATH_MARKER",
    "INVARIANTS",
    "SATURATED",
    "TIMEOUT",
    "WORKER_DIED",
    "AfterShutdownEmpty",
    "Counts",
    "EnqueueOnce",
    "ForcedMissSticks",
    "Group",
    "LookupAnswers",
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
    "apply_outcome",
    "broken_invariants",
    "cleanup",
    "coming",
    "complete_group",
    "drain",
    "drain_all",
    "fail_group",
    "flush",
    "initial",
    "is_death_marker",
    "late_answer",
    "lookup",
    "mark_miss",
    "partition_batch",
    "probe_cleanup",
    "probe_drain",
    "probe_lookup",
    "probe_mark_miss",
    "revive",
    "saturate",
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
#: The failure name of a group answered at once while too many calls are stuck.
SATURATED = "saturated"
#: The failure name of a dead worker's open groups (``FailureKind.WORKER_DIED.value``).
WORKER_DIED = "worker_died"

# Worker states (docs/worker.md).
UP = "up"
DEAD = "dead"
STOPPED = "stopped"
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


#: The death marker a dying worker publishes: group id 0, no keys (as
#: ``kvprobe.statemachine.types.death_marker``).  Draining it fails every
#: open group with WORKER_DIED.
DEATH_MARKER = Outcome(Group(0, 0, "", (), ()), None, WORKER_DIED)


def is_death_marker(outcome: Outcome) -> bool:
    """Whether ``outcome`` is the :data:`DEATH_MARKER` rather than a group's outcome."""
    return outcome.group.group_id == 0 and not outcome.group.keys


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

    The worker (``docs/worker.md``): ``worker`` is ``"up"``, ``"dead"`` or
    ``"stopped"``; ``timed_out`` are the current worker's stuck calls (still
    in ``taken``, as the code's ManualWorker keeps them); ``stray`` are stuck
    calls of a worker that died or stopped (they may still answer late);
    ``stopped_taken`` are calls the stopped worker was running at shutdown
    (they may still publish); ``discarded`` is what was published but will
    never be applied (the inbox at shutdown and everything published after).
    ``death_unannounced`` marks a death without a marker (the code's
    ``ManualWorker.die()``), noticed only by :func:`revive`; the TLA+ model's
    ``Die`` always publishes the marker (``worker_dies(s, marker=True)``).
    ``out`` is what the last action, if a lookup, answered:
    ``(key, req, verdict)``, else None.

    History variables (read only by invariants): ``submitted`` (times each
    ``(key, gen)`` was submitted), ``submitted_not_pending`` (generations
    submitted while their state was not PENDING of that generation),
    ``applied`` (results applied per ``(key, gen)``), ``stale_applied``
    (outcomes that changed a state of another generation), ``forced``
    (generations hit by a forced miss), ``moot`` (IN_FLIGHT generations a
    forced miss made moot) and ``told`` (per ``(key, gen)``, the first
    outcome published for it: the backend's verdict, False for a failure,
    timeout or saturation, and the manager's False for a dead worker's open
    groups).
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
    worker: str = "up"
    death_unannounced: bool = False
    stray: Mapping[int, Group] = field(default_factory=_frozen_map)
    stopped_taken: Mapping[int, Group] = field(default_factory=_frozen_map)
    discarded: tuple[Outcome, ...] = ()
    out: tuple[Key, str, bool | None] | None = None
    counts: Counts = Counts()
    submitted: Mapping[tuple[Key, int], int] = field(default_factory=_frozen_map)
    submitted_not_pending: frozenset[tuple[Key, int]] = frozenset()
    applied: Mapping[tuple[Key, int], int] = field(default_factory=_frozen_map)
    stale_applied: int = 0
    forced: frozenset[tuple[Key, int]] = frozenset()
    moot: frozenset[tuple[Key, int]] = frozenset()
    told: Mapping[tuple[Key, int], bool] = field(default_factory=_frozen_map)

    @property
    def worker_dead(self) -> bool:
        """Whether the worker died and was not revived yet."""
        return self.worker == DEAD

    def stuck(self) -> Mapping[int, Group]:
        """Every stuck call, of this worker or of one that died or stopped."""
        return {**self.stray, **{gid: self.taken[gid] for gid in self.timed_out}}


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


def _begin(s: State, *, scheduler: bool = True) -> State:
    """Start an action: scheduler actions raise after shutdown; ``out`` is cleared."""
    if scheduler:
        _open(s)
    return s if s.out is None else replace(s, out=None)


def lookup(s: State, key: Key, req: str) -> tuple[State, bool | None]:
    """Lookup: apply published outcomes, then the verdict if known, else None.

    A key without a state gets a new PENDING generation that joins the step
    batch.  The answer is also left in ``out`` (:func:`LookupAnswers` reads
    it).  Raises :class:`ModelClosedError` after shutdown.
    """
    s = drain_all(_begin(s))
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
            out=(key, req, None),
        )
        return s, None
    if req in probe.waiters:
        return replace(s, out=(key, req, probe.verdict)), probe.verdict
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
        out=(key, req, joined.verdict),
    )
    return s, joined.verdict


def _remember(requests: Mapping[str, frozenset[Key]], req: str, key: Key) -> Mapping[str, frozenset[Key]]:
    return _frozen_map({**requests, req: requests.get(req, frozenset()) | {key}})


def flush(s: State, owners: Mapping[Key, str] | None = None) -> tuple[State, tuple[Group, ...]]:
    """Flush: submit this step's PENDING probes, one group per request.

    A key goes to the group of the request that asked for it; if that one
    left, to ``owners[key]`` when given (any request still waiting on the
    key: the TLA+ model lets any of them own it), else to the least waiting
    request id (what the code does).  Returns the new state and the
    submitted groups (empty when nothing was submitted; then no batch id is
    used).  Raises :class:`ModelClosedError` after shutdown and
    :class:`ModelError` while the worker is dead (:func:`revive` first) or
    when an owner does not wait on its key.
    """
    s = drain_all(_begin(s))
    if s.worker != UP:
        raise ModelError("Flush: the worker is dead (revive it first)")
    entries = s.step_batch
    s = replace(s, step_batch=())
    pending = {k: (p.gen, p.waiters) for k, p in s.probes.items() if p.phase is PENDING}
    if owners:
        for key, owner in owners.items():
            if key in pending and owner not in pending[key][1]:
                raise ModelError(f"Flush: {owner!r} does not wait on {key!r}")
        entries = tuple(
            (k, g, r if k not in pending or r in pending[k][1] else owners.get(k, r)) for k, g, r in entries
        )
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

    The death marker fails every open group, in submission order, with
    WORKER_DIED (each of their keys MISS, ``told`` False).  Raises
    :class:`ModelError` when the inbox is empty, :class:`ModelClosedError`
    after shutdown.
    """
    s = _begin(s)
    if not s.inbox:
        raise ModelError("Drain: nothing published")
    outcome, *rest = s.inbox
    s = replace(s, inbox=tuple(rest))
    if is_death_marker(outcome):
        return _fail_open(s)
    return apply_outcome(s, outcome)


def _fail_open(s: State) -> State:
    """Fail every open group with WORKER_DIED (the manager's verdict for a dead worker)."""
    for group in [s.outstanding[gid] for gid in sorted(s.outstanding)]:
        s = replace(s, told=_tell(s, group, None))
        s = apply_outcome(s, Outcome(group, None, WORKER_DIED))
    return s


def drain_all(s: State) -> State:
    """Drain repeated until the inbox is empty (what lookup and flush do first)."""
    while s.inbox:
        s = drain(s)
    return s


def apply_outcome(s: State, outcome: Outcome) -> State:
    """Apply one outcome to the states of the same generation (see :func:`probe_drain`).

    A failure applies MISS to each key.  The first outcome of a group counts
    the backend call; any later one (a late answer) is counted as late and
    changes nothing.  :func:`probe_drain` alone decides whether a state
    changes; the history records what did (``applied``, and
    ``stale_applied`` when the changed state was of another generation).
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
    stale = s.stale_applied
    for key, gen, verdict in zip(group.keys, group.gens, verdicts, strict=False):
        probe = probes.get(key)
        after = None if probe is None else probe_drain(probe, gen, verdict)
        if probe is None or after == probe:
            counts = _bump(counts, stale_results_dropped=1)
            continue
        if after is None:
            del probes[key]
            counts = _bump(counts, orphans_reclaimed=1)
        else:
            probes[key] = after
            counts = _bump(counts, hits=1) if verdict else _bump(counts, misses=1)
        applied[(key, gen)] = applied.get((key, gen), 0) + 1
        if probe.gen != gen:
            stale += 1
    return replace(
        s,
        probes=_frozen_map(probes),
        outstanding=_frozen_map(outstanding),
        counts=counts,
        applied=_frozen_map(applied),
        stale_applied=stale,
    )


def _count_call(counts: Counts, failure: str | None) -> Counts:
    if failure in (SATURATED, WORKER_DIED):
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
    s = _begin(s)
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
    s = _begin(s)
    probes = dict(s.probes)
    counts = s.counts
    forced = set(s.forced)
    moot = set(s.moot)
    for key in keys:
        probe = probes.get(key)
        if probe is None:
            counts = _bump(counts, unknown_mark_miss=1)
            continue
        counts = _bump(counts, forced_misses=1)
        forced.add((key, probe.gen))
        if probe.phase is IN_FLIGHT:
            moot.add((key, probe.gen))
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
        moot=frozenset(moot),
    )


def shutdown(s: State) -> State:
    """Shutdown: reclaim everything and stop the worker; later scheduler actions raise.

    The inbox is discarded; calls the worker had started may still publish
    (to ``discarded``: nothing applies them).  History is kept.  Idempotent.
    """
    if s.closed:
        return s
    running = {} if s.worker == DEAD else {gid: g for gid, g in s.taken.items() if gid not in s.timed_out}
    return replace(
        s,
        probes=_frozen_map(),
        requests=_frozen_map(),
        step_batch=(),
        outstanding=_frozen_map(),
        queue=(),
        taken=_frozen_map(),
        timed_out=frozenset(),
        stray=_frozen_map(s.stuck()),
        stopped_taken=_frozen_map(running),
        discarded=(*s.discarded, *s.inbox),
        inbox=(),
        closed=True,
        worker=STOPPED,
        death_unannounced=False,
        out=None,
    )


# --- worker actions --------------------------------------------------------------------


def take_batch(s: State) -> tuple[State, tuple[Group, ...]]:
    """TakeBatch: the worker (up) takes the oldest submitted batch.

    Raises :class:`ModelError` when nothing is queued or the worker is not up.
    """
    s = _begin(s, scheduler=False)
    if s.worker != UP or not s.queue:
        raise ModelError(f"TakeBatch: nothing submitted, or the worker is {s.worker}")
    batch, *rest = s.queue
    taken = {**s.taken, **{g.group_id: g for g in batch}}
    return replace(s, queue=tuple(rest), taken=_frozen_map(taken)), batch


def _publish(s: State, outcome: Outcome) -> State:
    # A stopped worker's outcomes are never applied: they go to ``discarded``.
    if s.closed:
        return replace(s, discarded=(*s.discarded, outcome))
    return replace(s, inbox=(*s.inbox, outcome))


def _running(s: State, group_id: int, action: str) -> Group:
    """The group whose call the worker (up, or stopped) is running, for its first answer."""
    pool = s.stopped_taken if s.closed else s.taken
    group = pool.get(group_id)
    if s.worker == DEAD or group is None or group_id in s.timed_out:
        raise ModelError(f"{action}: group {group_id} is not running on a live or stopped worker")
    return group


def _answer_first(s: State, group_id: int, verdicts: tuple[bool, ...] | None, failure: str | None) -> State:
    """Publish a running group's first answer; its call is over."""
    group = _running(s, group_id, failure or "CompleteGroup")
    if verdicts is not None and len(verdicts) != len(group.keys):
        raise ModelError(f"{len(verdicts)} verdicts for {len(group.keys)} keys")
    s = replace(
        s,
        told=_tell(s, group, verdicts),
        taken=_frozen_map({gid: g for gid, g in s.taken.items() if gid != group_id}),
        stopped_taken=_frozen_map({gid: g for gid, g in s.stopped_taken.items() if gid != group_id}),
    )
    return _publish(s, Outcome(group, verdicts, failure, False))


def _answer_late(s: State, group_id: int, verdicts: tuple[bool, ...] | None, failure: str | None) -> State:
    """A stuck call returns: its answer is published marked late (it changes nothing)."""
    group = s.stuck().get(group_id)
    if group is None:
        raise ModelError(f"LateAnswer: group {group_id} has no stuck call")
    if verdicts is not None and len(verdicts) != len(group.keys):
        raise ModelError(f"{len(verdicts)} verdicts for {len(group.keys)} keys")
    s = replace(
        s,
        taken=_frozen_map({gid: g for gid, g in s.taken.items() if gid != group_id}),
        timed_out=s.timed_out - {group_id},
        stray=_frozen_map({gid: g for gid, g in s.stray.items() if gid != group_id}),
    )
    return _publish(s, Outcome(group, verdicts, failure, True))


def complete_group(s: State, group_id: int, verdicts: Sequence[bool]) -> State:
    """CompleteGroup: publish one verdict per key (LateAnswer for a stuck call).

    Raises :class:`ModelError` if the group's call is not running (or stuck)
    or the number of verdicts is wrong.
    """
    s = _begin(s, scheduler=False)
    if group_id in s.stuck():
        return _answer_late(s, group_id, tuple(verdicts), None)
    return _answer_first(s, group_id, tuple(verdicts), None)


def late_answer(s: State, group_id: int, verdicts: Sequence[bool]) -> State:
    """LateAnswer: a stuck call returns (also after its worker died or stopped).

    Raises :class:`ModelError` if the group has no stuck call or the number
    of verdicts is wrong.
    """
    return _answer_late(_begin(s, scheduler=False), group_id, tuple(verdicts), None)


def fail_group(s: State, group_id: int, failure: str) -> State:
    """FailGroup: publish a failure (a FailureKind value); its keys resolve as MISS.

    A stuck call that fails publishes a late failure.  Raises
    :class:`ModelError` if the group's call is not running (or stuck).
    """
    s = _begin(s, scheduler=False)
    if group_id in s.stuck():
        return _answer_late(s, group_id, None, failure)
    return _answer_first(s, group_id, None, failure)


def time_out(s: State, group_id: int, max_stuck: int | None = None) -> State:
    """TimeOut: publish TIMEOUT; the call is stuck and may answer late.

    Any running call may time out, however many are stuck already (groups
    run concurrently and may overstay together); ``max_stuck`` (the code's
    ``max_stuck_calls``) 0 means no timeout is configured.  Raises
    :class:`ModelError` if the group's call is not running or there is no timeout.
    """
    s = _begin(s, scheduler=False)
    group = _running(s, group_id, "TimeOut")
    if max_stuck == 0:
        raise ModelError("TimeOut: no timeout is configured (max_stuck 0)")
    s = replace(s, told=_tell(s, group, None))
    if s.closed:
        s = replace(
            s,
            stopped_taken=_frozen_map({gid: g for gid, g in s.stopped_taken.items() if gid != group_id}),
            stray=_frozen_map({**s.stray, group_id: group}),
        )
    else:
        s = replace(s, timed_out=s.timed_out | {group_id})
    return _publish(s, Outcome(group, None, TIMEOUT, False))


def saturate(s: State, group_id: int, max_stuck: int) -> State:
    """Saturate: ``max_stuck`` calls are stuck, so the group is answered SATURATED at once.

    ``max_stuck == 0`` means no timeout is configured: no call is ever stuck
    and nothing saturates.  Raises :class:`ModelError` if the group's call is not running or fewer
    calls are stuck.
    """
    s = _begin(s, scheduler=False)
    if max_stuck == 0 or len(s.stuck()) < max_stuck:
        raise ModelError(f"Saturate: only {len(s.stuck())} calls stuck (max {max_stuck})")
    return _answer_first(s, group_id, None, SATURATED)


def worker_dies(s: State, *, marker: bool = False) -> State:
    """Die: the worker's dispatcher ends.

    With ``marker`` (the TLA+ model's Die, the threaded worker's death): its
    queue and running calls are lost, its stuck calls live on (``stray``),
    and the death marker is published.  Without it (the code's
    ``ManualWorker.die()``), the death is noticed only by :func:`revive`,
    and the dead worker's queue and groups stay as the code leaves them.
    Raises :class:`ModelClosedError` after shutdown, :class:`ModelError`
    when the worker is not up.
    """
    s = _begin(s)
    if s.worker != UP:
        raise ModelError(f"Die: the worker is {s.worker}")
    if not marker:
        return replace(s, worker=DEAD, death_unannounced=True)
    s = replace(s, worker=DEAD, queue=(), taken=_frozen_map(), timed_out=frozenset(), stray=_frozen_map(s.stuck()))
    return _publish(s, DEATH_MARKER)


def revive(s: State) -> State:
    """What the manager does at its next flush or drain_results: drain, then Revive.

    While the worker is dead: applies what was published (a death marker
    fails every open group);
    after a death without a marker, fails every open group with WORKER_DIED
    (in submission order); then starts a fresh, empty worker (stuck calls of
    the dead one live on in ``stray``).  Does nothing while the worker is
    up.  Raises :class:`ModelClosedError` after shutdown.
    """
    s = _begin(s)
    if s.worker != DEAD:
        return s
    s = drain_all(s)
    if s.death_unannounced:
        s = _fail_open(s)
    return replace(
        s,
        queue=(),
        taken=_frozen_map(),
        timed_out=frozenset(),
        stray=_frozen_map(s.stuck()),
        worker=UP,
        death_unannounced=False,
    )


# --- invariants ------------------------------------------------------------------------
# Each is the invariant of the same name in tla/KVProbe.tla, written over this
# module's variables (tests/tla/test_model_replay.py checks they agree on
# every state TLC explores under default.cfg).


def _all_groups(s: State) -> list[Group]:
    return [
        *s.outstanding.values(),
        *s.taken.values(),
        *s.stray.values(),
        *s.stopped_taken.values(),
        *(g for b in s.queue for g in b),
        *(o.group for o in (*s.inbox, *s.discarded) if not is_death_marker(o)),
    ]


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
    for group in _all_groups(s):
        if len(group.keys) != len(group.gens) or not group.keys:
            return False
    for outcome in (*s.inbox, *s.discarded):
        if (outcome.verdicts is None) == (outcome.failure is None):
            return False
        if outcome.verdicts is not None and len(outcome.verdicts) != len(outcome.group.keys):
            return False
    return s.worker in (UP, DEAD, STOPPED) and s.timed_out <= set(s.taken) and s.closed == (s.worker == STOPPED)


def EnqueueOnce(s: State) -> bool:
    """A generation is submitted at most once, only while PENDING; at most one outcome applied."""
    return (
        all(n <= 1 for n in s.submitted.values())
        and not s.submitted_not_pending
        and all(n <= 1 for n in s.applied.values())
    )


def NoDuplicateProbe(s: State) -> bool:
    """Per key at most one open generation not made moot by a forced miss and not RESOLVED now."""
    live: dict[Key, set[int]] = {}
    for group in s.outstanding.values():
        for key, gen in zip(group.keys, group.gens, strict=True):
            probe = s.probes.get(key)
            if (key, gen) in s.moot or (probe is not None and probe.gen == gen and probe.phase is RESOLVED):
                continue
            live.setdefault(key, set()).add(gen)
    return all(len(gens) <= 1 for gens in live.values())


def StaleGenerationDropped(s: State) -> bool:
    """No outcome ever changed a state of another generation."""
    return s.stale_applied == 0


def VerdictIffResolved(s: State) -> bool:
    """The verdict is set exactly when the phase is RESOLVED."""
    return all(verdict_iff_resolved(p) for p in s.probes.values())


def _forced(s: State, key: Key) -> bool:
    # TLA's forced[k]: the key's current state was hit by a forced miss.
    probe = s.probes.get(key)
    return probe is not None and (key, probe.gen) in s.forced


def ForcedMissSticks(s: State) -> bool:
    """A force-missed state still held has verdict MISS."""
    return all(probe.verdict is False for key, probe in s.probes.items() if _forced(s, key))


def VerdictProvenance(s: State) -> bool:
    """A RESOLVED state's verdict is False if forced, else the first outcome published for its generation."""
    for key, probe in s.probes.items():
        if probe.phase is RESOLVED:
            want = False if _forced(s, key) else s.told.get((key, probe.gen))
            if probe.verdict is not want:
                return False
    return True


def LookupAnswers(s: State) -> bool:
    """What the last lookup returned: MISS for a forced state; a verdict once one was published.

    Visibility: if an outcome for the key's current generation has been
    published (``told``), the lookup (which drains first) saw a verdict.
    """
    if s.out is None:
        return True
    key, _, answer = s.out
    probe = s.probes.get(key)
    if _forced(s, key) and answer is not False:
        return False
    return not (probe is not None and (key, probe.gen) in s.told and answer is None)


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


def coming(s: State) -> list[Group]:
    """Groups whose outcome will reach the scheduler (TLA's ``Coming``).

    While a death marker is published (or a death without one awaits
    :func:`revive`), every open group: it will be failed.  Otherwise the
    groups of published first outcomes, and, with the worker up, its queue
    and running calls.
    """
    if s.death_unannounced or any(is_death_marker(o) for o in s.inbox):
        return list(s.outstanding.values())
    groups = [o.group for o in s.inbox if not o.late]
    if s.worker == UP:
        groups += [g for b in s.queue for g in b]
        groups += [g for gid, g in s.taken.items() if gid not in s.timed_out]
    return groups


def NothingLeaks(s: State) -> bool:
    """Safety part of nothing-leaks.

    No PENDING or RESOLVED state without waiters; a PENDING state is in this
    step's batch; an IN_FLIGHT state's outcome is coming (:func:`coming`).
    """
    pairs = {(k, g) for grp in coming(s) for k, g in zip(grp.keys, grp.gens, strict=True)}
    batch = {(k, g) for k, g, _ in s.step_batch}
    for key, probe in s.probes.items():
        if probe.phase is IN_FLIGHT:
            if (key, probe.gen) not in pairs:
                return False
        elif not probe.waiters:
            return False
        elif probe.phase is PENDING and (key, probe.gen) not in batch:
            return False
    return True


def AfterShutdownEmpty(s: State) -> bool:
    """After shutdown the table, batch, queue and open groups are empty and the worker is stopped."""
    if not s.closed:
        return True
    return (
        not s.probes
        and not s.requests
        and not s.step_batch
        and not s.queue
        and not s.outstanding
        and s.worker == STOPPED
    )


def Reclaimed(s: State) -> bool:
    """The end state EventuallyReclaimed promises: nothing held, nothing open."""
    return not s.probes and not s.requests and not s.outstanding and not s.step_batch


#: The safety invariants by their shared names (docs/properties.md, tla/KVProbe.tla).
INVARIANTS: dict[str, Callable[[State], bool]] = {
    "TypeOK": TypeOK,
    "EnqueueOnce": EnqueueOnce,
    "NoDuplicateProbe": NoDuplicateProbe,
    "StaleGenerationDropped": StaleGenerationDropped,
    "VerdictIffResolved": VerdictIffResolved,
    "ForcedMissSticks": ForcedMissSticks,
    "VerdictProvenance": VerdictProvenance,
    "LookupAnswers": LookupAnswers,
    "ReverseIndexConsistent": ReverseIndexConsistent,
    "NothingLeaks": NothingLeaks,
    "AfterShutdownEmpty": AfterShutdownEmpty,
}


def broken_invariants(s: State) -> list[str]:
    """Names of the invariants that do not hold in ``s`` (empty when all hold)."""
    return [name for name, holds in INVARIANTS.items() if not holds(s)]
