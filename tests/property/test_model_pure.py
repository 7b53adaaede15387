"""@given tests of the reference model's pure functions, and the model against itself."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, strategies as st

from kvprobe.spec import model
from kvprobe.spec.lifecycle import NEXT_PHASE, RULES, Event, LookupPhase, build_machine, machine_next
from kvprobe.spec.model import Probe, State

PHASES = st.sampled_from([None, *LookupPhase])
KEYS = st.sampled_from([b"k0", b"k1", b"k2"])
REQS = st.sampled_from(["a", "b", "c"])


@given(PHASES, st.sampled_from(list(Event)), st.booleans())
def test_transition_is_the_declared_table(phase: LookupPhase | None, event: Event, waiters: bool) -> None:
    declared, dest = model.transition(phase, event, waiters)
    assert declared == ((phase, event, waiters) in NEXT_PHASE)
    if declared:
        assert dest is NEXT_PHASE[(phase, event, waiters)]
        # The transitions machine built from the same rules agrees.
        assert machine_next(_MACHINE, phase, event, waiters) is dest
    else:
        assert dest is phase
        assert machine_next(_MACHINE, phase, event, waiters) == "invalid"


_MACHINE = build_machine(RULES)


def probes() -> st.SearchStrategy[Probe]:
    def make(phase: LookupPhase, gen: int, waiters: frozenset[str], verdict: bool) -> Probe:
        if phase is LookupPhase.PENDING or phase is LookupPhase.RESOLVED:
            waiters = waiters or frozenset({"a"})
        return Probe(phase, gen, waiters, verdict if phase is LookupPhase.RESOLVED else None)

    return st.builds(
        make, st.sampled_from(list(LookupPhase)), st.integers(1, 4), st.frozensets(REQS, max_size=3), st.booleans()
    )


@given(probes(), st.integers(1, 4), st.booleans())
def test_probe_drain(probe: Probe, gen: int, verdict: bool) -> None:
    after = model.probe_drain(probe, gen, verdict)
    if probe.gen != gen or probe.phase is not LookupPhase.IN_FLIGHT:
        assert after == probe  # StaleGenerationDropped; at most one result per generation
    elif probe.waiters:
        assert after == Probe(LookupPhase.RESOLVED, gen, probe.waiters, verdict)
    else:
        assert after is None  # an orphan is reclaimed


@given(probes(), REQS)
def test_probe_cleanup_and_lookup(probe: Probe, req: str) -> None:
    joined = model.probe_lookup(probe, req)
    assert joined.phase is probe.phase and req in joined.waiters and joined.verdict == probe.verdict
    after = model.probe_cleanup(joined, req)
    rest = joined.waiters - {req}
    if rest or probe.phase is LookupPhase.IN_FLIGHT:
        assert after is not None and after.waiters == rest and after.phase is probe.phase
    else:
        assert after is None


@given(probes())
def test_probe_mark_miss(probe: Probe) -> None:
    after = model.probe_mark_miss(probe)
    if probe.waiters:
        assert after == Probe(LookupPhase.RESOLVED, probe.gen, probe.waiters, False)
    else:
        assert after is None


ENTRY = st.tuples(KEYS, st.integers(1, 3), REQS)


@given(st.lists(ENTRY, max_size=8), st.dictionaries(KEYS, st.tuples(st.integers(1, 3), st.frozensets(REQS))))
def test_partition_batch(
    entries: list[tuple[bytes, int, str]], pending: dict[bytes, tuple[int, frozenset[str]]]
) -> None:
    groups = model.partition_batch(entries, pending)
    flat = [(k, g, r) for r, ks, gs in groups for k, g in zip(ks, gs, strict=True)]
    # Each submittable key once, under a request that waits on it, with its live generation.
    assert len({k for k, _, _ in flat}) == len(flat)
    submittable = {k for k, g, _ in entries if k in pending and pending[k][0] == g and pending[k][1]}
    assert {k for k, _, _ in flat} == submittable
    for key, gen, req in flat:
        assert pending[key][0] == gen and req in pending[key][1]
    # Groups and keys keep first-asked order.
    first = {}
    for key, gen, _ in entries:
        if key in submittable and pending[key][0] == gen:
            first.setdefault(key, len(first))
    for _, keys, _ in groups:
        assert [first[k] for k in keys] == sorted(first[k] for k in keys)


ACTIONS = st.lists(
    st.one_of(
        st.tuples(st.just("lookup"), KEYS, REQS),
        st.tuples(st.just("flush")),
        st.tuples(st.just("drain")),
        st.tuples(st.just("cleanup"), REQS),
        st.tuples(st.just("mark_miss"), KEYS),
        st.tuples(st.just("take")),
        st.tuples(st.just("complete"), st.integers(0, 3), st.booleans()),
        st.tuples(st.just("fail"), st.integers(0, 3)),
        st.tuples(st.just("time_out"), st.integers(0, 3)),
        st.tuples(st.just("die"), st.booleans()),
        st.tuples(st.just("revive")),
        st.tuples(st.just("saturate"), st.integers(0, 3)),
        st.tuples(st.just("late"), st.integers(0, 3), st.booleans()),
        st.tuples(st.just("shutdown"), st.integers(0, 9)),
    ),
    max_size=40,
)


#: The bound on stuck calls of the walks (the code's max_stuck_calls).
MAX_STUCK = 2


def _walk(actions: list[tuple[object, ...]]) -> list[State]:
    s = model.initial()
    seen = [s]
    for action in actions:
        kind = action[0]
        # Worker actions need a live (or stopped) worker; a dead one is revived at the next flush.
        pool = s.stopped_taken if s.closed else s.taken
        taken = sorted(pool) if not s.worker_dead else []
        running = [g for g in taken if g not in s.timed_out]
        if s.closed and kind in ("lookup", "flush", "drain", "cleanup", "mark_miss", "take", "die", "revive"):
            continue  # the scheduler is gone; the stopped worker may still answer
        if kind == "lookup":
            s, _ = model.lookup(s, action[1], action[2])  # type: ignore[arg-type]
        elif kind == "flush":
            s, _ = model.flush(model.revive(s))
        elif kind == "drain" and s.inbox:
            s = model.drain(s)
        elif kind == "cleanup":
            s = model.cleanup(s, action[1])  # type: ignore[arg-type]
        elif kind == "mark_miss":
            s = model.mark_miss(s, [action[1]])  # type: ignore[list-item]
        elif kind == "take" and s.queue and not s.worker_dead:
            s, _ = model.take_batch(s)
        elif kind == "complete" and taken:
            gid = taken[action[1] % len(taken)]  # type: ignore[operator]
            s = model.complete_group(s, gid, [bool(action[2])] * len(pool[gid].keys))
        elif kind == "fail" and taken:
            s = model.fail_group(s, taken[action[1] % len(taken)], "raised")  # type: ignore[operator]
        elif kind == "time_out" and running:
            s = model.time_out(s, running[action[1] % len(running)], MAX_STUCK)  # type: ignore[operator]
        elif kind == "die" and not s.worker_dead:
            s = model.worker_dies(s, marker=bool(action[1]))
        elif kind == "revive":
            s = model.revive(s)
        elif kind == "saturate" and running and len(s.stuck()) >= MAX_STUCK:
            s = model.saturate(s, running[action[1] % len(running)], MAX_STUCK)  # type: ignore[operator]
        elif kind == "late" and s.stuck():
            gid = sorted(s.stuck())[action[1] % len(s.stuck())]  # type: ignore[operator]
            s = model.late_answer(s, gid, [bool(action[2])] * len(s.stuck()[gid].keys))
        elif kind == "shutdown" and action[1] == 9:
            s = model.shutdown(s)
        seen.append(s)
    return seen


@given(ACTIONS)
def test_the_model_keeps_its_invariants(actions: list[tuple[object, ...]]) -> None:
    for s in _walk(actions):
        assert model.broken_invariants(s) == [], s


@given(ACTIONS)
def test_the_model_reclaims_everything_when_played_out(actions: list[tuple[object, ...]]) -> None:
    # EventuallyReclaimed: every request leaves, the worker answers everything, all is drained.
    s = _walk(actions)[-1]
    if s.closed:
        assert model.Reclaimed(s), s
        return
    s = model.revive(s)
    for req in sorted(s.requests):
        s = model.cleanup(s, req)
    s, _ = model.flush(s)
    while s.queue or s.taken:
        if s.queue:
            s, _ = model.take_batch(s)
        for gid in sorted(s.taken):
            s = model.complete_group(s, gid, [True] * len(s.taken[gid].keys))
    s = model.drain_all(s)
    assert model.Reclaimed(s), s


def _resolved_by(answer: str) -> State:
    """k0 and k1 asked by one request, submitted in one group, answered (or failed) and drained."""
    s = model.initial()
    for key in (b"k0", b"k1"):
        s, _ = model.lookup(s, key, "a")
    s, _ = model.flush(s)
    s, (group,) = model.take_batch(s)
    if answer == "fail":
        s = model.fail_group(s, group.group_id, "raised")
    else:
        s = model.complete_group(s, group.group_id, [key == b"k0" for key in group.keys])
    return model.drain_all(s)


def test_verdict_provenance_catches_a_failed_group_resolving_hit() -> None:
    s = _resolved_by("fail")
    assert model.VerdictProvenance(s)
    probe = s.probes[b"k0"]
    lying = replace(s, probes={**s.probes, b"k0": replace(probe, verdict=True)})
    assert model.broken_invariants(lying) == ["VerdictProvenance", "VerdictFromBackend"]


def test_verdict_provenance_catches_a_verdict_taken_from_another_key() -> None:
    s = _resolved_by("answer")
    assert (s.probes[b"k0"].verdict, s.probes[b"k1"].verdict) == (True, False)
    swapped = replace(s, probes={**s.probes, b"k1": replace(s.probes[b"k1"], verdict=True)})
    assert model.broken_invariants(swapped) == ["VerdictProvenance", "VerdictFromBackend"]


def test_a_dead_workers_probes_resolve_as_miss_with_provenance() -> None:
    s, _ = model.lookup(model.initial(), b"k0", "a")
    s, _ = model.flush(s)
    s = model.revive(model.worker_dies(s))
    assert s.probes[b"k0"].verdict is False
    assert s.told[(b"k0", s.probes[b"k0"].gen)] is False
    assert model.broken_invariants(s) == []


def test_actions_after_shutdown_raise() -> None:
    s = model.shutdown(model.initial())
    assert model.shutdown(s) is s
    for act in (lambda: model.lookup(s, b"k", "a"), lambda: model.flush(s), lambda: model.cleanup(s, "a")):
        with pytest.raises(model.ModelClosedError):
            act()


def test_guards_of_worker_actions() -> None:
    s = model.initial()
    for act in (lambda: model.take_batch(s), lambda: model.drain(s), lambda: model.time_out(s, 1)):
        with pytest.raises(model.ModelError):
            act()


def _in_flight(keys: tuple[bytes, ...] = (b"k0",)) -> State:
    """``keys`` asked by request a, flushed and taken by the worker."""
    s = model.initial()
    for key in keys:
        s, _ = model.lookup(s, key, "a")
    s, _ = model.flush(s)
    s, _ = model.take_batch(s)
    return s


def test_the_death_marker_fails_every_open_group_when_drained() -> None:
    s = model.worker_dies(_in_flight(), marker=True)
    assert s.inbox == (model.DEATH_MARKER,) and not s.taken and s.worker_dead
    assert model.NothingLeaks(s)  # the marker is coming for the open group
    s = model.drain(s)
    assert s.probes[b"k0"].verdict is False and not s.outstanding
    assert model.broken_invariants(s) == []
    with pytest.raises(model.ModelError):
        model.flush(s)  # a dead worker is revived first
    s = model.revive(s)
    assert s.worker == "up" and model.broken_invariants(s) == []


def test_a_late_answer_after_a_timeout_is_dropped_and_saturation_answers_miss() -> None:
    s = _in_flight()
    (gid,) = s.taken
    s = model.time_out(s, gid, 1)
    s = model.drain(s)
    assert s.probes[b"k0"].verdict is False
    s, _ = model.lookup(s, b"k1", "a")
    s, _ = model.flush(s)
    s, (group,) = model.take_batch(s)
    with pytest.raises(model.ModelError):
        model.time_out(s, group.group_id, 0)  # no timeout configured
    # A call already running may still time out with one stuck (groups run
    # concurrently); a group not started yet saturates.
    assert len(model.time_out(s, group.group_id, 1).stuck()) == 2
    s = model.drain(model.saturate(s, group.group_id, 1))
    assert s.probes[b"k1"].verdict is False and s.told[(b"k1", 2)] is False
    s = model.drain(model.late_answer(s, gid, [True]))
    assert s.probes[b"k0"].verdict is False and not s.stuck()
    assert model.broken_invariants(s) == []


def test_the_stopped_worker_publishes_but_nothing_is_applied() -> None:
    s = model.shutdown(_in_flight())
    (gid,) = s.stopped_taken
    s = model.complete_group(s, gid, [True])
    assert len(s.discarded) == 1 and not s.inbox and not s.probes
    assert model.broken_invariants(s) == []
    with pytest.raises(model.ModelClosedError):
        model.drain(s)


def test_lookup_answers_reads_what_the_lookup_returned() -> None:
    s = _in_flight()
    s = model.complete_group(s, next(iter(s.taken)), [True])
    s, answer = model.lookup(s, b"k0", "b")  # drains first: visible at once
    assert answer is True and s.out == (b"k0", "b", True) and model.LookupAnswers(s)
    assert not model.LookupAnswers(replace(s, out=(b"k0", "b", None)))  # published, yet "ask again"
    s = model.mark_miss(s, [b"k0"])
    assert s.out is None
    s, answer = model.lookup(s, b"k0", "c")
    assert answer is False and model.LookupAnswers(s)
    assert not model.LookupAnswers(replace(s, out=(b"k0", "c", True)))  # forced, yet HIT
