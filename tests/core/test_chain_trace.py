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
