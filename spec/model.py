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

This module holds the scheduler's actions (and :func:`revive`, what the
manager does for a dead worker) and gathers the public names of the model's
other parts (import them from here):

* :mod:`~kvprobe.spec.model_state`: the immutable :class:`State` and its
  records (:class:`Probe`, :class:`Group`, :class:`Outcome`,
  :class:`Counts`), the failure names and the errors;
* :mod:`~kvprobe.spec.model_probe`: the per-probe functions
  (:func:`probe_lookup`, :func:`probe_drain`, ...), :func:`transition` and
  :func:`partition_batch`, with the PEP 316 contracts (``pre:``/``post:``
  in their docstrings) that CrossHair checks (``crosshair check
  kvprobe.spec.model_probe``);
* :mod:`~kvprobe.spec.model_worker`: the worker's actions;
* :mod:`~kvprobe.spec.model_invariants`: the invariants and
  :data:`INVARIANTS`.

The scheduler's actions call the per-probe functions through this module's
names, so a test can slip a defect into one of them here
(``monkeypatch.setattr(model, "probe_drain", ...)``) and see the replay of
TLC's graph diverge.

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

Errors: scheduler actions (and :func:`worker_dies`) raise
:class:`ModelClosedError` after :func:`shutdown`; the stopped worker's calls
may still answer (their outcomes are discarded).  Every action raises
:class:`ModelError` when called where the model's relation has no step (an
action's enabling condition is false, e.g. taking a batch from an empty
queue); the state passed in is never changed (it is immutable).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace

from kvprobe.spec.lifecycle import ABSENT, RECALL_RULE, Event
from kvprobe.spec.model_cache import forget, recall, remember, tick
from kvprobe.spec.model_invariants import (
    INVARIANTS,
    AfterShutdownEmpty,
    EnqueueOnce,
    ForcedMissSticks,
    LookupAnswers,
    LookupReturnsVerdict,
    NoDuplicateProbe,
    NothingLeaks,
    Reclaimed,
    ReverseIndexConsistent,
    StaleGenerationDropped,
    TypeOK,
    VerdictFromBackend,
    VerdictIffResolved,
    VerdictProvenance,
    broken_invariants,
    coming,
)
from kvprobe.spec.model_probe import (
    partition_batch,
    probe_cleanup,
    probe_drain,
    probe_lookup,
    probe_mark_miss,
    transition,
    verdict_iff_resolved,
)
from kvprobe.spec.model_state import (
    DEAD,
    DEATH_MARKER,
    IN_FLIGHT,
    PENDING,
    RESOLVED,
    SATURATED,
    STOPPED,
    TIMEOUT,
    UP,
    WORKER_DIED,
    Counts,
    Group,
    Key,
    ModelClosedError,
    ModelError,
    Outcome,
    Probe,
    State,
    begin,
    bump,
    frozen_map,
    initial,
    is_death_marker,
    tell,
)
from kvprobe.spec.model_worker import (
    complete_group,
    fail_group,
    late_answer,
    saturate,
    take_batch,
    time_out,
    worker_dies,
)

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
    "LookupReturnsVerdict",
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
    "VerdictFromBackend",
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
    "tick",
    "time_out",
    "transition",
    "verdict_iff_resolved",
    "worker_dies",
]

# Failure names that count as backend errors (FailureKind values).
_BACKEND_ERRORS = frozenset({"raised", "raised_while_iterating", "short_result", "long_result", "bad_verdict"})


def lookup(s: State, key: Key, req: str, *, fresh: bool | None = None) -> tuple[State, bool | None]:
    """Lookup: apply published outcomes, then the verdict if known, else None.

    A key without a state gets a new PENDING generation that joins the step
    batch, unless the verdict cache serves a remembered answer for it
    (:func:`kvprobe.spec.model_cache.recall`, ``fresh`` as it takes it):
    then the new generation is RESOLVED at once with that verdict.  The
    answer is also left in ``out`` (:func:`LookupAnswers` reads it).  Raises
    :class:`ModelClosedError` after shutdown, :class:`ModelError` when
    ``fresh`` is True and nothing is remembered for the key.
    """
    s = drain_all(begin(s))
    probe = s.probes.get(key)
    counts = s.counts
    if probe is None and s.cache is not None:
        s, entry = recall(s, key, fresh)
        if entry is not None:
            return _recalled(s, key, req, entry.verdict, entry.gen)
    if probe is None:
        declared, dest = transition(ABSENT, Event.LOOKUP, True)
        assert declared and dest is PENDING
        gen = s.next_gen
        probes = {**s.probes, key: Probe(dest, gen, frozenset({req}), None)}
        s = replace(
            s,
            probes=frozen_map(probes),
            requests=_remember(s.requests, req, key),
            step_batch=(*s.step_batch, (key, gen, req)),
            next_gen=gen + 1,
            counts=bump(counts, probes_created=1),
            out=(key, req, None),
        )
        return s, None
    if req in probe.waiters:
        return replace(s, out=(key, req, probe.verdict)), probe.verdict
    if probe.phase is PENDING:
        counts = bump(counts, joins=1)
    elif probe.phase is IN_FLIGHT:
        counts = bump(counts, in_flight_reuses=1)
    joined = probe_lookup(probe, req)
    s = replace(
        s,
        probes=frozen_map({**s.probes, key: joined}),
        requests=_remember(s.requests, req, key),
        counts=counts,
        out=(key, req, joined.verdict),
    )
    return s, joined.verdict


def _recalled(s: State, key: Key, req: str, verdict: bool, source: int) -> tuple[State, bool]:
    """A new generation of ``key`` answered from memory: RESOLVED at once, never probed."""
    dest = RECALL_RULE.dest
    assert dest is RESOLVED
    gen = s.next_gen
    probes = {**s.probes, key: Probe(dest, gen, frozenset({req}), verdict)}
    s = replace(
        s,
        probes=frozen_map(probes),
        requests=_remember(s.requests, req, key),
        next_gen=gen + 1,
        out=(key, req, verdict),
        told=frozen_map({**s.told, (key, gen): verdict}),
        recalled=frozen_map({**s.recalled, (key, gen): source}),
    )
    return s, verdict


def _remember(requests: Mapping[str, frozenset[Key]], req: str, key: Key) -> Mapping[str, frozenset[Key]]:
    return frozen_map({**requests, req: requests.get(req, frozenset()) | {key}})


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
    s = drain_all(begin(s))
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
        probes=frozen_map(probes),
        outstanding=frozen_map({**s.outstanding, **{g.group_id: g for g in groups}}),
        queue=(*s.queue, groups),
        next_batch=batch_id + 1,
        next_group=s.next_group + len(groups),
        counts=bump(s.counts, probes_submitted=sum(len(g.keys) for g in groups), batches=1),
        submitted=frozen_map(submitted),
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
    s = begin(s)
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
        s = replace(s, told=tell(s, group, None))
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
        counts = bump(counts, late_results=1)
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
            counts = bump(counts, stale_results_dropped=1)
            continue
        if outcome.failure is None and probe.phase is IN_FLIGHT and probe.gen == gen:
            # The backend's own answer for the generation asked: the cache may keep it.
            s = remember(s, key, gen, bool(verdict))
        if after is None:
            del probes[key]
            counts = bump(counts, orphans_reclaimed=1)
        else:
            probes[key] = after
            counts = bump(counts, hits=1) if verdict else bump(counts, misses=1)
        applied[(key, gen)] = applied.get((key, gen), 0) + 1
        if probe.gen != gen:
            stale += 1
    return replace(
        s,
        probes=frozen_map(probes),
        outstanding=frozen_map(outstanding),
        counts=counts,
        applied=frozen_map(applied),
        stale_applied=stale,
    )


def _count_call(counts: Counts, failure: str | None) -> Counts:
    if failure in (SATURATED, WORKER_DIED):
        return counts
    counts = bump(counts, backend_calls=1)
    if failure in _BACKEND_ERRORS:
        counts = bump(counts, backend_errors=1)
    elif failure == TIMEOUT:
        counts = bump(counts, timeouts=1)
    return counts


def cleanup(s: State, req: str) -> State:
    """Cleanup: ``req`` finished; release its interest in every key.

    An unknown request id is counted and ignored.  Raises
    :class:`ModelClosedError` after shutdown.
    """
    s = begin(s)
    keys = s.requests.get(req)
    deferred = frozenset(d for d in s.deferred if d[0] != req)  # its positioned keys are forgotten too
    if keys is None:
        return replace(s, counts=bump(s.counts, unknown_cleanups=1), deferred=deferred)
    probes = dict(s.probes)
    counts = s.counts
    for key in keys:
        probe = probes[key]
        after = probe_cleanup(probe, req)
        if after is None:
            del probes[key]
            if probe.phase is PENDING:
                counts = bump(counts, never_probed=1)
        else:
            probes[key] = after
    requests = {r: ks for r, ks in s.requests.items() if r != req}
    return replace(
        s,
        probes=frozen_map(probes),
        requests=frozen_map(requests),
        counts=counts,
        deferred=deferred,
    )


def mark_miss(s: State, keys: Iterable[Key], *, skip_unresolved: bool = False) -> State:
    """MarkMiss: force MISS for each key that has a state (others are counted).

    ``skip_unresolved`` is the vLLM drop-in's flavour (vLLM 0.33's
    ``mark_miss``; TLA+ ``MarkMissFlavour = "vllm"``): only a RESOLVED state
    is forced; a PENDING or IN_FLIGHT one is left to its own outcome, and
    not counted.  Raises :class:`ModelClosedError` after shutdown.
    """
    s = begin(s)
    keys = list(keys)
    probes = dict(s.probes)
    counts = s.counts
    forced = set(s.forced)
    moot = set(s.moot)
    for key in keys:
        probe = probes.get(key)
        if probe is None:
            counts = bump(counts, unknown_mark_miss=1)
            continue
        if skip_unresolved and probe.phase is not RESOLVED:
            continue
        counts = bump(counts, forced_misses=1)
        forced.add((key, probe.gen))
        if probe.phase is IN_FLIGHT:
            moot.add((key, probe.gen))
        after = probe_mark_miss(probe)
        if after is None:
            del probes[key]
            counts = bump(counts, orphans_reclaimed=1)
        else:
            probes[key] = after
    return replace(
        forget(s, keys),
        probes=frozen_map(probes),
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
        probes=frozen_map(),
        requests=frozen_map(),
        step_batch=(),
        outstanding=frozen_map(),
        queue=(),
        taken=frozen_map(),
        timed_out=frozenset(),
        stray=frozen_map(s.stuck()),
        stopped_taken=frozen_map(running),
        discarded=(*s.discarded, *s.inbox),
        inbox=(),
        deferred=frozenset(),
        closed=True,
        worker=STOPPED,
        death_unannounced=False,
        out=None,
        memory=(),
    )


def revive(s: State) -> State:
    """What the manager does at its next flush or drain_results: drain, then Revive.

    While the worker is dead: applies what was published (a death marker
    fails every open group);
    after a death without a marker, fails every open group with WORKER_DIED
    (in submission order); then starts a fresh, empty worker (stuck calls of
    the dead one live on in ``stray``).  Does nothing while the worker is
    up.  Raises :class:`ModelClosedError` after shutdown.
    """
    s = begin(s)
    if s.worker != DEAD:
        return s
    s = drain_all(s)
    if s.death_unannounced:
        s = _fail_open(s)
    return replace(
        s,
        queue=(),
        taken=frozen_map(),
        timed_out=frozenset(),
        stray=frozen_map(s.stuck()),
        worker=UP,
        death_unannounced=False,
    )
