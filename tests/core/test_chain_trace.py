"""Chain traces are behaviours of the TLA+ model, checked by TLC (tla/Trace.tla).

A chain is a sequence of Lookup actions: the tracing core records one Lookup
event per key looked up, and ``kvprobe check --trace`` must accept the trace
unchanged (and reject it when one of the chain's verdicts is corrupted).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvprobe.backends.memory import InMemoryBackend
from kvprobe.check import EXIT_OK, EXIT_TRACE_REJECTED, main
from kvprobe.statemachine import AsyncLookupManager, ChainAnswer, ManualWorker, ReqContext
from kvprobe.tlc import CheckerMissing, find_jar, find_java

try:
    find_jar()
    find_java()
except CheckerMissing as exc:  # pragma: no cover - Java and the pinned jar are in the dev venv
    pytest.skip(f"TLC cannot run here: {exc}", allow_module_level=True)

# Each test runs TLC on a recorded trace: make test's TLC stage.
pytestmark = pytest.mark.tlc

K1, K2, K3 = b"\x01" * 4, b"\x02" * 4, b"\x03" * 4
R1, R2 = ReqContext("r1"), ReqContext("r2")


def record() -> list[dict[str, object]]:
    events: list[dict[str, object]] = []
    m = AsyncLookupManager(InMemoryBackend([K1]), worker="manual", trace=events.append)
    worker = m.worker
    assert isinstance(worker, ManualWorker)
    assert m.lookup_chain([K1, K2, K3], R1) == ChainAnswer(0, False, True, 3)
    assert m.lookup_chain([K1, K2], R2) == ChainAnswer(0, False, True, 2)  # joins two pending probes
    m.flush()
    worker.run_all()
    # K1 stored, K2 not: both walks stop at K2; K3 is never asked by r2.
    assert m.lookup_chain([K1, K2, K3], R1) == ChainAnswer(1, True, False, 2)
    assert m.lookup_chain([K1, K2, K3], R2) == ChainAnswer(1, True, False, 2)
    m.cleanup("r1")
    m.cleanup("r2")
    m.shutdown()
    return events


def _write(events: list[dict[str, object]], path: Path) -> Path:
    path.write_text("".join(json.dumps(e) + "\n" for e in events))
    return path


def test_chain_trace_is_accepted_by_tlc(tmp_path: Path) -> None:
    events = record()
    lookups = [e for e in events if e["action"] == "Lookup"]
    assert len(lookups) == 3 + 2 + 2 + 2  # one event per key looked up, none after a stop
    assert main(["--quiet", "--trace", str(_write(events, tmp_path / "chain.ndjson"))]) == EXIT_OK


def test_corrupted_chain_trace_is_rejected(tmp_path: Path) -> None:
    events = record()
    # The last walk of r2 met K2 resolved as MISS; claim it was stored.
    index = max(i for i, e in enumerate(events) if e["action"] == "Lookup" and e["key"] == K2.hex())
    assert events[index]["verdict"] is False
    events[index] = {**events[index], "verdict": True}
    assert main(["--quiet", "--trace", str(_write(events, tmp_path / "bad.ndjson"))]) == EXIT_TRACE_REJECTED


def test_an_inferred_walk_and_its_exact_rewalk_trace_as_lookups_accepted_by_tlc(tmp_path: Path) -> None:
    # A hole at K3 of four keys: the search checks positions 0, 1, 3 (all
    # stored) and infers K3; the failed load's mark_miss makes the next walk
    # exact, which checks K3.
    k4 = b"\x04" * 4
    keys = [K1, K2, K3, k4]
    events: list[dict[str, object]] = []
    m = AsyncLookupManager(InMemoryBackend([K1, K2, k4]), worker="manual", trace=events.append, chain_mode="inferred")
    worker = m.worker
    assert isinstance(worker, ManualWorker)
    answers = []
    for _ in range(4):
        answers.append(m.lookup_chain(keys, R1))
        m.flush()
        worker.run_all()
    assert answers[-1] == ChainAnswer(4, False, False, 3, 1)  # K3 inferred
    m.mark_miss([K3])
    for _ in range(2):
        answers.append(m.lookup_chain(keys, R1))
        m.flush()
        worker.run_all()
    assert answers[-1] == ChainAnswer(2, True, False, 3, 0)
    m.cleanup("r1")
    m.shutdown()
    lookups = [(bytes.fromhex(str(e["key"])), e.get("index")) for e in events if e["action"] == "Lookup"]
    searched = [K1, K1, K2, K1, K2, k4, K1, K2, k4]  # one new position per step, the rest re-read
    assert lookups[: len(searched)] == [(k, None) for k in searched]
    # Exact: K3 is asked (and K4, in its window), then the walk stops at K3.
    assert lookups[len(searched) :] == [(K1, 0), (K2, 1), (K3, 2), (k4, 3), (K1, 0), (K2, 1), (K3, 2)]
    assert main(["--quiet", "--trace", str(_write(events, tmp_path / "inferred.ndjson"))]) == EXIT_OK
