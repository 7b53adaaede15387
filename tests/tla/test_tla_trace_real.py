"""Real runs validated by TLC, and the actions their traces cover.

Each run drives a real manager with a trace sink and checks the recorded
trace with ``kvprobe check --trace`` (tla/Trace.tla):

- the ThreadedWorker on FsBackend and on NIXL POSIX (a tier in a tmp dir):
  several scheduler steps of three requests sharing keys, cleanups, a
  forced miss, a chain lookup; scheduler and worker events come from
  different threads, so this is where the recorded order must be a
  linearization;
- the ThreadedWorker with a timeout: a call that hangs (TimeOut), a group
  answered SATURATED while it is stuck, a call that raises (FailGroup), and
  the hung call's late answer (LateAnswer);
- the ManualWorker dying, with and without its death marker (Die, the Drain
  that fails its open groups, Revive);
- a sample of runs of the shipped Hypothesis machine
  (kvprobe.testing.stateful), manual worker, each run's whole trace (the
  richest of a few dozen derandomized runs).

Every trace must be ACCEPTED, and together they must cover every action of
the model that the code can produce (the coverage line each check prints).

Two runs pin where code and model once differed: concurrent calls that
time out together (more stuck than ``max_stuck_calls``: the model now lets
any running call time out, as the code does), and a stuck call's late
answer queued behind a death marker (the core now drains the marker first,
as the model's queue does; a running call's answer after its dispatcher
died is not published, as the model's Die loses it).
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis.stateful import run_state_machine_as_test

from kvprobe.backends import FsBackend
from kvprobe.backends._nixl_import import nixl_unavailable
from kvprobe.backends.memory import InMemoryBackend
from kvprobe.check import EXIT_OK, EXIT_TRACE_REJECTED
from kvprobe.spec.actions import CALL_RETURNED
from kvprobe.spec.lifecycle import LookupPhase
from kvprobe.statemachine import AsyncLookupManager, ManualWorker, ReqContext, VerdictCache
from kvprobe.testing.search import check_trace
from kvprobe.testing.stateful import lookup_machine
from kvprobe.tlc import CORE_EVENTS, WORKER_EVENTS

pytestmark = pytest.mark.tlc

Events = list[dict[str, object]]
KEYS = [bytes([0xA0 + i]) * 8 for i in range(10)]
STORED = set(KEYS[::2])
R0, R1, R2 = ReqContext("r0"), ReqContext("r1"), ReqContext("r2")
STATEFUL_RUNS = 5
SAMPLED_FROM = 8


def settle(m: AsyncLookupManager, keys: Sequence[bytes], timeout_s: float = 10.0) -> None:
    """Drain until none of ``keys`` is in flight (the threaded worker answers on its own)."""
    deadline = time.monotonic() + timeout_s
    while any(m.phase(k) is LookupPhase.IN_FLIGHT for k in keys):
        assert time.monotonic() < deadline, "the threaded worker did not answer"
        time.sleep(0.002)


def steps_on(backend: Any) -> Events:
    """Three requests over several steps on a real tier, through the ThreadedWorker."""
    for key in KEYS:
        if key in STORED:
            backend.store(key)
    events: Events = []
    m = AsyncLookupManager(backend, trace=events.append, max_concurrent_groups=2)
    try:
        for key in KEYS[0:4]:
            m.lookup(key, R0)
        for key in KEYS[2:6]:
            m.lookup(key, R1)  # joins r0's probes of keys 2 and 3
        m.flush()
        settle(m, KEYS[:6])
        assert [m.lookup(k, R0) for k in KEYS[0:4]] == [k in STORED for k in KEYS[0:4]]
        m.mark_miss([KEYS[2]])  # loading it failed: MISS from now on
        assert m.lookup(KEYS[2], R1) is False
        m.cleanup("r0")
        for key in KEYS[4:8]:
            m.lookup(key, R2)
        m.lookup(KEYS[6], R1)
        m.flush()
        m.cleanup("r1")  # key 6 in flight, still wanted by r2
        settle(m, KEYS[4:8])
        answer = m.lookup_chain(KEYS[6:10], R2)  # stops at the first miss
        assert answer.looked_up >= 1
        m.flush()
        settle(m, KEYS)
        assert [m.lookup(k, R2) for k in KEYS[4:8]] == [k in STORED for k in KEYS[4:8]]
        m.cleanup("r2")
        assert len(m) == 0
    finally:
        m.shutdown()
    return events


class GatedBackend:
    """Answers from STORED; request "slow" blocks on a gate, request "broken" raises."""

    def __init__(self) -> None:
        self.gate = threading.Event()

    def batch_lookup(self, keys: Sequence[bytes], req_context: Any) -> list[bool]:
        if req_context.req_id == "slow":
            self.gate.wait(30)
        if req_context.req_id == "broken":
            raise RuntimeError("tier unreachable")
        return [k in STORED for k in keys]


def timeouts() -> Events:
    """TimeOut, Saturate, FailGroup and LateAnswer from the ThreadedWorker."""
    backend = GatedBackend()
    events: Events = []
    m = AsyncLookupManager(backend, trace=events.append, lookup_timeout_s=2.0, max_stuck_calls=1)
    slow, broken = ReqContext("slow"), ReqContext("broken")
    try:
        m.lookup(KEYS[0], slow)
        m.lookup(KEYS[1], broken)
        m.lookup(KEYS[2], R0)
        m.flush()
        settle(m, KEYS[:3])
        assert [m.lookup(KEYS[0], slow), m.lookup(KEYS[1], broken), m.lookup(KEYS[2], R0)] == [False, False, True]
        m.lookup(KEYS[4], R0)  # stored, but one call is stuck: the group is answered SATURATED
        m.flush()
        settle(m, [KEYS[4]])
        assert m.lookup(KEYS[4], R0) is False
        backend.gate.set()  # the stuck call returns: its late answer is dropped
        deadline = time.monotonic() + 10
        while m.stats.late_results == 0:
            assert time.monotonic() < deadline, "no late answer"
            m.drain_results()
            time.sleep(0.002)
        assert m.lookup(KEYS[0], slow) is False
        m.lookup(KEYS[6], R0)
        m.flush()
        settle(m, [KEYS[6]])
        assert m.lookup(KEYS[6], R0) is True
        for req in ("slow", "broken", "r0"):
            m.cleanup(req)
    finally:
        m.shutdown()
    return events


def deaths() -> Events:
    """The manual worker dies with its marker, then without one; each time it is revived."""
    events: Events = []
    m = AsyncLookupManager(InMemoryBackend(sorted(STORED)), worker="manual", trace=events.append)
    w = m.worker
    assert isinstance(w, ManualWorker)
    m.lookup(KEYS[0], R0)
    m.lookup(KEYS[1], R1)
    m.flush()
    w.take_batch()
    w.die(publish_marker=True)
    assert m.lookup(KEYS[0], R0) is False  # the marker failed the open groups
    m.lookup(KEYS[2], R0)
    m.flush()  # revives the worker first
    w.run_all()
    assert m.lookup(KEYS[2], R0) is True
    m.lookup(KEYS[3], R1)
    m.flush()
    w.take_batch()
    w.die()  # no marker: the next flush notices
    m.flush()
    assert m.lookup(KEYS[3], R1) is False
    m.cleanup("r0")
    m.cleanup("r1")
    m.shutdown()
    return events


def stateful_runs(count: int, verdict_cache: VerdictCache | None = None) -> list[Events]:
    """``count`` runs of the shipped Hypothesis machine (manual worker), each run's whole trace.

    Hypothesis's first runs are tiny (it starts small), so it makes
    ``SAMPLED_FROM`` times as many (milliseconds each) and the runs kept are
    distinct runs whose traces hold the most different actions, then the longest.
    ``verdict_cache``: the machine's cache (its clock rule ages the entries).
    """
    traces: list[Events] = []
    machine: Any = lookup_machine(verdict_cache=verdict_cache)

    class Recorded(machine):  # type: ignore[misc, valid-type]
        def teardown(self) -> None:
            traces.append(list(self.ghosts.events))
            super().teardown()

    run_state_machine_as_test(
        Recorded,
        settings=settings(
            max_examples=count * SAMPLED_FROM,
            stateful_step_count=30,
            derandomize=True,
            database=None,
            deadline=None,
            suppress_health_check=list(HealthCheck),
        ),
    )
    distinct = {json.dumps(t, sort_keys=True): t for t in traces}  # Hypothesis may repeat a run
    return sorted(distinct.values(), key=lambda t: (len({e["action"] for e in t}), len(t)), reverse=True)[:count]


def nixl_steps(tmp: Path) -> Events:
    from kvprobe.backends.nixl_posix import NixlPosixBackend

    backend = NixlPosixBackend(tmp / "nixl")
    try:
        return steps_on(backend)
    finally:
        backend.close()


def fs_steps(tmp: Path) -> Events:
    backend = FsBackend(tmp / "fs")
    try:
        return steps_on(backend)
    finally:
        backend.close()


RUNS: dict[str, Callable[[Path], Events]] = {
    "fs-threaded": fs_steps,
    "nixl-posix-threaded": nixl_steps,
    "threaded-timeouts": lambda tmp: timeouts(),
    "manual-deaths": lambda tmp: deaths(),
}
NAMES = [*RUNS, *(f"stateful-{n}" for n in range(STATEFUL_RUNS))]


@pytest.fixture(scope="module")
def validated(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[int, str, Events] | str]:
    """Each run's (exit status, output, events), or a skip reason."""
    tmp = tmp_path_factory.mktemp("real-traces")
    traces: dict[str, Events | str] = {}
    for name, run in RUNS.items():
        if name.startswith("nixl") and (why := nixl_unavailable()) is not None:
            traces[name] = f"NIXL cannot load here: {why}"
            continue
        traces[name] = run(tmp)
    for n, events in enumerate(stateful_runs(STATEFUL_RUNS)):
        traces[f"stateful-{n}"] = events
    results: dict[str, tuple[int, str, Events] | str] = {}
    for name, events in traces.items():
        results[name] = events if isinstance(events, str) else (*check_trace(events, tmp / f"{name}.ndjson"), events)
    return results


def coverage(output: str) -> dict[str, int]:
    """The action counts of the coverage line ``kvprobe check --trace`` printed."""
    line = re.search(r"^coverage: (.*)$", output, re.MULTILINE)
    assert line is not None, output
    fired = line.group(1).split(";")[0]
    return {name: int(count) for name, count in re.findall(r"(\w+) (\d+)", fired)}


@pytest.mark.parametrize("name", NAMES)
def test_real_trace_is_accepted(name: str, validated: dict[str, tuple[int, str, Events] | str]) -> None:
    result = validated[name]
    if isinstance(result, str):
        pytest.skip(result)
    status, output, events = result
    assert status == EXIT_OK, output
    assert f"ACCEPTED, all {len(events)} events" in output
    # The coverage line counts the trace's events by action.
    counts = coverage(output)
    assert sum(counts.values()) == len(events)
    assert counts == {a: n for a in {str(e["action"]) for e in events} if (n := sum(e["action"] == a for e in events))}


def test_the_threaded_runs_interleave_two_threads(validated: dict[str, tuple[int, str, Events] | str]) -> None:
    # The linearization matters only if worker events land between scheduler ones.
    result = validated["fs-threaded"]
    assert not isinstance(result, str)
    actions = [e["action"] for e in result[2]]
    assert {"TakeBatch", "CompleteGroup"} <= set(actions)
    first_answer = actions.index("CompleteGroup")
    assert "Drain" in actions[first_answer:]


def test_a_reordered_threaded_trace_is_rejected(
    validated: dict[str, tuple[int, str, Events] | str], tmp_path: Path
) -> None:
    # The worker answers a group before it took the batch: not a behaviour of the model.
    result = validated["fs-threaded"]
    assert not isinstance(result, str)
    events = [dict(e) for e in result[2]]
    take = next(i for i, e in enumerate(events) if e["action"] == "TakeBatch")
    answer = next(i for i, e in enumerate(events) if e["action"] == "CompleteGroup")
    events.insert(take, events.pop(answer))
    status, output = check_trace(events, tmp_path / "reordered.ndjson")
    assert status == EXIT_TRACE_REJECTED, output
    # The report names the first event no behaviour can take.
    assert (
        f"the first {take} events match; none continues with event seq={events[take]['seq']} (CompleteGroup)" in output
    )


def test_stateful_sample_exercises_the_worker(validated: dict[str, tuple[int, str, Events] | str]) -> None:
    actions: set[str] = set()
    for n in range(STATEFUL_RUNS):
        result = validated[f"stateful-{n}"]
        assert not isinstance(result, str)
        assert len(result[2]) >= 10
        actions |= {str(e["action"]) for e in result[2]}
    assert {"TakeBatch", "Drain"} <= actions
    assert actions & {"CompleteGroup", "FailGroup", "TimeOut"}


class HangingBackend:
    """Every call blocks until ``gate`` is set."""

    def __init__(self) -> None:
        self.gate = threading.Event()

    def batch_lookup(self, keys: Sequence[bytes], req_context: Any) -> list[bool]:
        self.gate.wait(30)
        return [False] * len(keys)


def test_simultaneous_timeouts_beyond_the_stuck_bound_are_a_behaviour_of_the_model(tmp_path: Path) -> None:
    backend = HangingBackend()
    events: Events = []
    m = AsyncLookupManager(
        backend, trace=events.append, lookup_timeout_s=0.3, max_stuck_calls=1, max_concurrent_groups=2
    )
    try:
        m.lookup(KEYS[0], R0)
        m.lookup(KEYS[1], R1)
        m.flush()
        settle(m, KEYS[:2])
        backend.gate.set()
        deadline = time.monotonic() + 10
        while m.stats.late_results < 2 and time.monotonic() < deadline:
            m.drain_results()
            time.sleep(0.002)
    finally:
        backend.gate.set()
        m.shutdown()
    assert [e["action"] for e in events].count("TimeOut") == 2
    status, output = check_trace(events, tmp_path / "stuck.ndjson")
    assert status == EXIT_OK, output


def test_outcomes_behind_a_death_marker_are_drained_after_it(tmp_path: Path) -> None:
    events: Events = []
    m = AsyncLookupManager(InMemoryBackend([KEYS[0]]), worker="manual", trace=events.append)
    w = m.worker
    assert isinstance(w, ManualWorker)
    m.lookup(KEYS[0], R0)
    m.lookup(KEYS[1], R1)
    m.flush()
    batch = w.take_batch()
    assert batch is not None
    stuck, _ = batch.groups
    w.time_out(stuck)  # its call is stuck
    w.die(publish_marker=True)  # the other group is lost
    w.complete(stuck)  # the stuck call answers late, behind the marker
    assert m.lookup(KEYS[1], R1) is False
    m.shutdown()
    status, output = check_trace(events, tmp_path / "marker.ndjson")
    assert status == EXIT_OK, output


def test_a_group_answered_beside_a_running_group_of_its_batch_is_applied_at_the_next_drain(tmp_path: Path) -> None:
    # Issue 29: the fast group's verdict is visible while the slow group of the same batch
    # still runs (its call waits on a gate the test releases); the trace of that run is a
    # behaviour of the model (reach.cfg's NeverAppliedBesideRunning witness is its shape).
    backend = GatedBackend()
    events: Events = []
    m = AsyncLookupManager(backend, trace=events.append, max_concurrent_groups=2)
    slow = ReqContext("slow")
    try:
        m.lookup(KEYS[0], slow)
        m.lookup(KEYS[2], R0)
        m.flush()
        settle(m, [KEYS[2]])
        assert m.lookup(KEYS[2], R0) is True
        assert m.phase(KEYS[0]) is LookupPhase.IN_FLIGHT, "the slow group's call is still running"
        backend.gate.set()
        settle(m, [KEYS[0]])
        assert m.lookup(KEYS[0], slow) is True
        m.cleanup("slow")
        m.cleanup("r0")
    finally:
        backend.gate.set()
        m.shutdown()
    (flush,) = [e for e in events if e["action"] == "Flush" and e["groups"]]
    groups = {str(g["req"]): g["group"] for g in flush["groups"]}  # type: ignore[attr-defined]
    assert set(groups) == {"slow", "r0"}, "both groups in one batch"
    order = [(e["action"], e.get("group")) for e in events]
    assert order.index(("Drain", groups["r0"])) < order.index(("CompleteGroup", groups["slow"]))
    status, output = check_trace(events, tmp_path / "beside.ndjson")
    assert status == EXIT_OK, output


def test_validated_traces_cover_every_action(validated: dict[str, tuple[int, str, Events] | str]) -> None:
    covered: dict[str, int] = {}
    for result in validated.values():
        if isinstance(result, str):
            continue
        status, output, _ = result
        assert status == EXIT_OK
        for action, count in coverage(output).items():
            covered[action] = covered.get(action, 0) + count
    print("actions covered by the validated traces:", dict(sorted(covered.items())))
    recorded = {*CORE_EVENTS, *WORKER_EVENTS, CALL_RETURNED}
    assert set(covered) == recorded, recorded - set(covered)
