"""The manual machine reaches every action of the model, and the worker's
Saturate and death-marker paths work as the model says.

The shipped machine (kvprobe.testing.stateful, manual worker) is searched,
derandomized, for runs that together hold every action of the model (the
trace event names), including Saturate, a Die with the death marker (logged
by the worker) and one without (logged by the manager when it notices), the
marker drained both by a lookup and by a flush/drain_results (Revive
follows), and the late answer of a call that was stuck when its worker
died.  Read from the recorded traces (what happened), not from which rules
Hypothesis chose.  The search stops at the run that completes the set (as
tests/mutants stop at the run that fails), so it costs what the rarest
situation costs.  The shortest run holding Saturate, and the shortest
holding a dead worker's late answer, are also checked by TLC
(tla/Trace.tla).
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import pytest
from hypothesis.stateful import run_state_machine_as_test

from kvprobe.backends.memory import InMemoryBackend
from kvprobe.check import EXIT_OK, EXIT_TRACE_REJECTED
from kvprobe.statemachine import AsyncLookupManager, ManualWorker, ReqContext
from kvprobe.statemachine.types import FailureKind, InvalidValueError
from kvprobe.testing.search import check_trace, search_settings
from kvprobe.testing.stateful import lookup_machine
from kvprobe.tlc import CORE_EVENTS, WORKER_EVENTS

Events = list[dict[str, Any]]

#: The search: derandomized, at most as many runs as the mutant searches, no shrinking.
SEARCH = search_settings()

#: What the runs must reach together, besides every action of the model.
SITUATIONS = frozenset(
    {
        "Die with marker",
        "Die without marker",
        "marker drained, then Lookup",  # by a lookup
        "marker drained, then Revive",  # by flush or drain_results, which then revive
        "LateAnswer of a dead worker's stuck call",
    }
)
WANTED = SITUATIONS | set(CORE_EVENTS) | set(WORKER_EVENTS)


def situations(events: Events) -> set[str]:
    """The actions of one trace, plus the worker situations the new rules are for."""
    found = {str(e["action"]) for e in events}
    stuck: set[int] = set()  # groups timed out and not answered yet
    stray: set[int] = set()  # of those, the ones whose worker died since
    marker = False  # a death marker is published and not drained yet
    for n, event in enumerate(events):
        action = event["action"]
        if action == "TimeOut":
            stuck.add(int(event["group"]))
        elif action == "LateAnswer":
            if int(event["group"]) in stray:
                found.add("LateAnswer of a dead worker's stuck call")
            stuck.discard(int(event["group"]))
            stray.discard(int(event["group"]))
        elif action in ("Die", "Revive"):
            stray |= stuck
            if action == "Die":
                marker = event.get("by") != "manager"
                found.add("Die with marker" if marker else "Die without marker")
        elif action == "Drain" and event["group"] == 0:
            if marker and n + 1 < len(events):
                found.add(f"marker drained, then {events[n + 1]['action']}")
            marker = False
        elif action == "Shutdown":
            marker = False  # the inbox, marker included, is discarded
    return found


class AllReached(Exception):
    """Raised by the run that completes the set: it ends the search."""


@pytest.fixture(scope="module")
def reached() -> tuple[int, dict[str, int], dict[str, Events]]:
    """Runs searched, runs per action or situation, and the shortest run holding each."""
    runs = 0
    seen: dict[str, int] = {}
    shortest: dict[str, Events] = {}
    machine: Any = lookup_machine()

    class Watched(machine):  # type: ignore[misc, valid-type]
        def teardown(self) -> None:
            nonlocal runs
            events = list(self.ghosts.events)
            super().teardown()
            runs += 1
            for name in situations(events):
                seen[name] = seen.get(name, 0) + 1
                if name not in shortest or len(events) < len(shortest[name]):
                    shortest[name] = events
            if WANTED <= set(seen):
                raise AllReached(f"every action and situation reached after {runs} runs")

    with contextlib.suppress(AllReached):
        run_state_machine_as_test(Watched, settings=SEARCH)
    return runs, seen, shortest


def test_the_machine_fires_every_model_action(reached: tuple[int, dict[str, int], dict[str, Events]]) -> None:
    runs, seen, _ = reached
    print(f"after {runs} runs, runs per action or situation:", dict(sorted(seen.items())))
    missing = WANTED - set(seen)
    assert not missing, f"no run of {runs} reached {sorted(missing)}"


@pytest.mark.tlc
@pytest.mark.parametrize("situation", ["Saturate", "LateAnswer of a dead worker's stuck call"])
def test_the_shortest_run_reaching_it_is_accepted_by_tlc(
    situation: str, reached: tuple[int, dict[str, int], dict[str, Events]], tmp_path: Path
) -> None:
    _, _, shortest = reached
    assert situation in shortest, f"no run reached {situation}"
    events = shortest[situation]
    status, output = check_trace(events, tmp_path / "run.ndjson")
    assert status == EXIT_OK, output
    assert f"ACCEPTED, all {len(events)} events" in output


@pytest.mark.tlc
def test_a_saturate_below_the_bound_is_rejected_by_tlc(
    reached: tuple[int, dict[str, int], dict[str, Events]], tmp_path: Path
) -> None:
    # The same run, recorded as if the worker's bound were one call higher: its
    # Saturate then happens while too few calls are stuck, which the model forbids.
    events = [dict(e) for e in reached[2]["Saturate"]]
    for event in events:
        if "max_stuck" in event:
            event["max_stuck"] = int(event["max_stuck"]) + 1
    status, output = check_trace(events, tmp_path / "below-bound.ndjson")
    assert status == EXIT_TRACE_REJECTED, output
    first = next(e for e in events if e["action"] == "Saturate")
    assert f"event seq={first['seq']} (Saturate)" in output


# --- the ManualWorker's Saturate and marker death, one step at a time -------------------------

K1, K2 = b"k1" * 4, b"k2" * 4
A, B = ReqContext("a"), ReqContext("b")


def _two_running_groups(worker: ManualWorker) -> tuple[AsyncLookupManager, list[Any]]:
    m = AsyncLookupManager(InMemoryBackend([K1, K2]), worker=worker)
    m.lookup(K1, A)
    m.lookup(K2, B)
    m.flush()
    batch = worker.take_batch()
    assert batch is not None and len(batch.groups) == 2
    return m, list(batch.groups)


def test_saturate_needs_the_bound_and_a_running_group() -> None:
    with pytest.raises(InvalidValueError, match="max_stuck_calls"):
        ManualWorker(max_stuck_calls=0)
    unbounded = ManualWorker()
    m, (first, second) = _two_running_groups(unbounded)
    unbounded.time_out(first)
    with pytest.raises(ValueError, match="bound is None"):
        unbounded.saturate(second)
    m.shutdown()

    worker = ManualWorker(max_stuck_calls=1)
    m, (first, second) = _two_running_groups(worker)
    with pytest.raises(ValueError, match="0 calls stuck"):
        worker.saturate(second)  # nothing stuck yet
    worker.time_out(first)
    with pytest.raises(ValueError, match="already timed out"):
        worker.saturate(first)  # a stuck call is not running
    assert m.core.inbox[-1].failure is FailureKind.TIMEOUT  # the refusals published nothing
    outcome = worker.saturate(second)
    assert outcome.failure is FailureKind.SATURATED and not outcome.late
    assert second.group_id not in worker.taken
    assert m.lookup(K2, B) is False  # resolved MISS at once, no backend call counted for it
    assert m.stats.saturated == 1 and m.stats.backend_calls == 1  # the TIMEOUT's call only
    m.shutdown()


def test_a_marker_death_loses_running_calls_and_keeps_stuck_ones() -> None:
    worker = ManualWorker(max_stuck_calls=1)
    m, (first, _) = _two_running_groups(worker)
    worker.time_out(first)
    worker.die(publish_marker=True)
    assert not worker.taken and not worker.timed_out and not worker.submitted
    assert set(worker.stray) == {first.group_id} and worker.stuck_calls == 1
    assert m.lookup(K2, B) is False  # the lookup drained the marker: the open group failed
    late = worker.complete(worker.stray[first.group_id])  # the stuck call answers after its worker died
    assert late.late and not worker.stray
    m.flush()  # revives
    assert worker.is_alive() and not worker.marker_published
    assert m.stats.worker_deaths == 1 and m.stats.late_results == 1
    m.shutdown()


def test_a_revival_keeps_the_stuck_calls_of_a_death_without_marker() -> None:
    worker = ManualWorker(max_stuck_calls=1)
    m, (first, second) = _two_running_groups(worker)
    worker.time_out(first)
    worker.die()
    assert set(worker.taken) == {first.group_id, second.group_id}  # noticed only at the next flush
    m.flush()
    assert set(worker.stray) == {first.group_id} and not worker.taken
    assert m.lookup(K2, B) is False
    m.shutdown()
