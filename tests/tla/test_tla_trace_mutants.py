"""Trace validation can see a bug: traces recorded from the mutant cores are REJECTED.

Each scenario drives a manager built on one of the mutant cores of
tests/mutants/mutant_cores.py (with the manual worker) through a run that
exercises its defect, records the trace, and checks it with ``kvprobe check
--trace``.  The same scenario on the correct core is ACCEPTED, so the
rejection is the mutant's doing.  The events carry each touched key's state
and the open groups after the action (statemachine/trace.py), which is what
lets TLC tell, e.g., a second result applied (double-result) from one
dropped.

worker-error-drops-batch is a worker defect (a failed call publishes
nothing): the worker logs its FailGroup, so the trace spec expects the
outcome in the result queue, and the next lookup, which drains first in the
model, finds no Drain to match.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from kvprobe.backends.memory import InMemoryBackend
from kvprobe.check import EXIT_OK, EXIT_TRACE_REJECTED, main
from kvprobe.statemachine import AsyncLookupManager, FailureKind, ManualWorker, ReqContext

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "mutants"))
from mutant_cores import MUTANTS

pytestmark = pytest.mark.tlc

K1, K2 = b"\x01" * 4, b"\x02" * 4
R1, R2 = ReqContext("r1"), ReqContext("r2")
Scenario = Callable[[AsyncLookupManager, ManualWorker], None]


def _take(w: ManualWorker) -> tuple[object, ...]:
    batch = w.take_batch()
    assert batch is not None
    return batch.groups


def submits_cleaned(m: AsyncLookupManager, w: ManualWorker) -> None:
    m.lookup(K1, R1)
    m.cleanup("r1")  # PENDING, reclaimed: never to be submitted
    m.lookup(K2, R2)
    m.flush()


def drops_in_flight(m: AsyncLookupManager, w: ManualWorker) -> None:
    m.lookup(K1, R1)
    m.flush()
    m.cleanup("r1")  # IN_FLIGHT with nobody waiting: kept
    m.lookup(K1, R2)


def stale_result(m: AsyncLookupManager, w: ManualWorker) -> None:
    m.lookup(K1, R1)
    m.flush()
    (first,) = _take(w)
    m.mark_miss([K1])
    m.cleanup("r1")  # generation 1 forced and reclaimed
    m.lookup(K1, R2)  # generation 2
    m.flush()
    _take(w)
    w.complete(first)  # generation 1's answer (K1 stored) arrives
    m.drain_results()  # no lookup after it: only the Drain event's state shows the defect


def double_result(m: AsyncLookupManager, w: ManualWorker) -> None:
    m.lookup(K1, R1)
    m.flush()
    (group,) = _take(w)
    w.time_out(group)
    assert m.lookup(K1, R1) is False
    w.complete(group)  # the late answer (K1 is stored) must be dropped
    m.drain_results()  # no lookup after it: only the Drain event's state shows the defect


def orphan_kept(m: AsyncLookupManager, w: ManualWorker) -> None:
    m.lookup(K1, R1)
    m.flush()
    (group,) = _take(w)
    m.cleanup("r1")
    w.complete(group)
    m.drain_results()


def error_drops_batch(m: AsyncLookupManager, w: ManualWorker) -> None:
    m.lookup(K1, R1)
    m.flush()
    (group,) = _take(w)
    w.fail(group, FailureKind.RAISED, "backend down")  # the mutant publishes nothing
    m.lookup(K1, R1)  # the correct worker's failure is drained first: MISS


def mark_miss_unguarded(m: AsyncLookupManager, w: ManualWorker) -> None:
    m.lookup(K1, R1)
    m.flush()
    _take(w)
    m.mark_miss([K1])  # the MarkMiss event's state shows the defect


SCENARIOS: dict[str, Scenario] = {
    "flush-submits-cleaned": submits_cleaned,
    "cleanup-drops-in-flight": drops_in_flight,
    "stale-result-applied": stale_result,
    "double-result": double_result,
    "worker-error-drops-batch": error_drops_batch,
    "orphan-never-reclaimed": orphan_kept,
    "mark-miss-in-flight-unguarded": mark_miss_unguarded,
}


def _record(
    manager_class: type[AsyncLookupManager], worker_class: type[ManualWorker], scenario: Scenario, path: Path
) -> Path:
    events: list[dict[str, object]] = []
    m = manager_class(InMemoryBackend([K1]), worker=worker_class(), trace=events.append)
    assert isinstance(m.worker, ManualWorker)
    scenario(m, m.worker)
    m.shutdown()
    path.write_text("".join(json.dumps(e) + "\n" for e in events))
    return path


def test_every_named_mutant_has_a_scenario() -> None:
    assert set(SCENARIOS) == set(MUTANTS)


@pytest.mark.parametrize("mutant", sorted(SCENARIOS))
def test_mutant_core_trace_is_rejected(mutant: str, tmp_path: Path) -> None:
    scenario = SCENARIOS[mutant]
    correct = _record(AsyncLookupManager, ManualWorker, scenario, tmp_path / "correct.ndjson")
    assert main(["--quiet", "--trace", str(correct)]) == EXIT_OK
    manager_class, worker_class = MUTANTS[mutant]
    broken = _record(manager_class, worker_class, scenario, tmp_path / f"{mutant}.ndjson")
    assert main(["--quiet", "--trace", str(broken)]) == EXIT_TRACE_REJECTED
