"""Trace validation by TLC: traces recorded through the manual worker are behaviours of KVProbe.

Each scenario drives an AsyncLookupManager with ``worker="manual"`` and a
trace sink, writes the NDJSON trace, and runs ``kvprobe check --trace`` on
it (tla/Trace.tla).  A corrupted trace must be rejected.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from kvprobe.backends.memory import InMemoryBackend
from kvprobe.check import EXIT_OK, EXIT_TRACE_REJECTED, EXIT_USAGE, main
from kvprobe.statemachine import AsyncLookupManager, FailureKind, ManualWorker, ReqContext
from kvprobe.tlc import trace_to_tla

pytestmark = pytest.mark.tlc

K1, K2, K3 = b"\x01" * 4, b"\x02" * 4, b"\x03" * 4
R1, R2 = ReqContext("r1"), ReqContext("r2")
Events = list[dict[str, object]]


def record(scenario: Callable[[AsyncLookupManager, ManualWorker], None]) -> Events:
    events: Events = []
    m = AsyncLookupManager(InMemoryBackend([K1]), worker="manual", trace=events.append)
    assert isinstance(m.worker, ManualWorker)
    scenario(m, m.worker)
    m.shutdown()
    return events


def timeout_then_late_answer(m: AsyncLookupManager, w: ManualWorker) -> None:
    m.lookup(K1, R1)
    m.lookup(K2, R1)
    m.lookup(K2, R2)
    m.flush()
    batch = w.take_batch()
    assert batch is not None
    (group,) = batch.groups
    w.time_out(group)
    assert m.lookup(K1, R1) is False  # the timeout resolved it as MISS
    w.complete(group)  # the late answer (K1 is stored) must be dropped
    assert m.lookup(K1, R1) is False
    m.cleanup("r1")
    m.cleanup("r2")


def mark_miss_in_flight_and_orphan(m: AsyncLookupManager, w: ManualWorker) -> None:
    m.lookup(K1, R1)
    m.lookup(K2, R2)
    m.flush()
    batch = w.take_batch()
    assert batch is not None
    m.mark_miss([K1])  # forced MISS while in flight: its result is dropped later
    m.cleanup("r2")  # K2 stays IN_FLIGHT with nobody waiting
    for group in batch.groups:
        w.complete(group)
    m.drain_results()  # K2's result reclaims the orphan; K1's is dropped
    assert m.lookup(K1, R1) is False
    assert m.phase(K2) is None
    m.cleanup("r1")


def reuse_failure_and_never_probed(m: AsyncLookupManager, w: ManualWorker) -> None:
    m.lookup(K1, R1)
    m.flush()
    m.cleanup("r1")  # K1 in flight, nobody waits
    m.lookup(K1, R2)  # joins the in-flight probe
    m.lookup(K3, R2)
    m.cleanup("r2")  # K3 was PENDING: reclaimed, never probed
    m.flush()  # its batch entry is skipped: nothing to submit
    m.lookup(K2, R1)
    m.flush()
    while (batch := w.take_batch()) is not None:
        for group in batch.groups:
            w.fail(group, FailureKind.RAISED, "backend down")
    m.drain_results()
    m.mark_miss([K3])  # no state: ignored
    m.cleanup("nobody")  # unknown request: ignored


SCENARIOS = {
    "timeout-late-answer": timeout_then_late_answer,
    "mark-miss-orphan": mark_miss_in_flight_and_orphan,
    "reuse-failure-never-probed": reuse_failure_and_never_probed,
}


def write(events: Events, path: Path) -> Path:
    path.write_text("".join(json.dumps(e) + "\n" for e in events))
    return path


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_recorded_trace_is_accepted(name: str, tmp_path: Path) -> None:
    events = record(SCENARIOS[name])
    assert len(events) > 8
    assert main(["--quiet", "--trace", str(write(events, tmp_path / f"{name}.ndjson"))]) == EXIT_OK


def test_corrupted_trace_is_rejected(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    events = record(timeout_then_late_answer)
    # The last lookup of K1 answered False; claim the late answer (True) won.
    index = max(i for i, e in enumerate(events) if e["action"] == "Lookup" and e["key"] == K1.hex())
    assert events[index]["verdict"] is False
    events[index] = {**events[index], "verdict": True}
    assert main(["--quiet", "--trace", str(write(events, tmp_path / "bad.ndjson"))]) == EXIT_TRACE_REJECTED
    assert "REJECTED" in capsys.readouterr().out


def test_trace_with_a_dropped_event_is_rejected(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    events = record(mark_miss_in_flight_and_orphan)
    first_drain = next(i for i, e in enumerate(events) if e["action"] == "Drain")
    without_drain = events[:first_drain] + events[first_drain + 1 :]
    assert main(["--quiet", "--trace", str(write(without_drain, tmp_path / "nodrain.ndjson"))]) == EXIT_TRACE_REJECTED
    # Without the Flush, the worker's events name groups no flush submitted: not a trace at all.
    without_flush = [e for e in events if e["action"] != "Flush"]
    assert main(["--quiet", "--trace", str(write(without_flush, tmp_path / "noflush.ndjson"))]) == EXIT_USAGE
    assert "was not submitted by an earlier Flush" in capsys.readouterr().err


def test_trace_module_names_the_log_and_bounds() -> None:
    module, cfg = trace_to_tla(record(timeout_then_late_answer))
    assert "EXTENDS Trace" in module
    assert f'"{K1.hex()}"' in module
    assert "Log <- TraceLog" in cfg
    assert "INVARIANT TraceUnfinished" in cfg


def test_malformed_event_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown action"):
        trace_to_tla([{"seq": 0, "action": "Teleport", "size": 0}])
    with pytest.raises(ValueError, match="cannot be written"):
        trace_to_tla([{"seq": 0, "action": "Cleanup", "req": 'a"b', "size": 0}])


def test_trace_module_sizes_its_constants_from_the_trace() -> None:
    def dies_twice(m: AsyncLookupManager, w: ManualWorker) -> None:
        m.lookup(K1, R1)
        m.flush()
        w.take_batch()
        w.die(publish_marker=True)
        m.lookup(K2, R1)
        m.flush()
        w.take_batch()
        w.die()  # no marker: the manager logs the Die when the next flush notices
        m.flush()

    events = record(dies_twice)
    assert [e["action"] for e in events].count("Die") == 2
    assert [e["action"] for e in events].count("Revive") == 2
    _, cfg = trace_to_tla(events)
    assert "MaxDeaths = 2" in cfg
    assert "WorkerLogged = TRUE" in cfg
    assert "FlushOwners <- TraceFlushOwners" in cfg
    assert "MaxStuck = " in cfg


def test_a_sink_failing_on_a_worker_thread_is_raised_on_the_scheduler() -> None:
    seen: Events = []

    def sink(event: dict[str, object]) -> None:
        if event["action"] == "CompleteGroup":
            raise RuntimeError("sink full")
        seen.append(event)

    m = AsyncLookupManager(InMemoryBackend([K1]), trace=sink)
    try:
        m.lookup(K1, R1)
        m.flush()
        deadline = time.monotonic() + 10
        while not m.core.inbox:  # the worker published although its event was lost
            assert time.monotonic() < deadline
            time.sleep(0.002)
        with pytest.raises(RuntimeError, match="sink full"):
            m.lookup(K1, R1)
        assert m.lookup(K1, R1) is True  # the outcome was applied; the worker goes on
    finally:
        m.shutdown()


README = Path(__file__).resolve().parents[2] / "tla" / "README.md"


def test_the_readmes_recording_steps_give_an_accepted_trace(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # tla/README.md "Recording a trace": its script, run as written, then `kvprobe check --trace run.ndjson`.
    section = README.read_text().split("## Recording a trace", 1)[1]
    script = re.search(r"```python\n(.*?)```", section, re.DOTALL)
    commands = re.search(r"```\n(python record_trace\.py\n.*?)```", section, re.DOTALL)
    assert script is not None and commands is not None
    (tmp_path / "record_trace.py").write_text(script.group(1))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(README.parents[1]), os.environ.get("PYTHONPATH", "")])}
    subprocess.run([sys.executable, "record_trace.py"], cwd=tmp_path, check=True, env=env, timeout=120)
    check_line = commands.group(1).splitlines()[1].split("#")[0].split()
    assert check_line == ["kvprobe", "check", "--trace", "run.ndjson"]
    monkeypatch.chdir(tmp_path)
    assert main(["--quiet", *check_line[2:]]) == EXIT_OK
    out = capsys.readouterr().out
    assert re.search(r"ACCEPTED, all \d+ events", out), out
