"""Trace validation: real traces replay cleanly; a tampered trace is rejected where it was tampered."""

from __future__ import annotations

import copy
import io
import json
from pathlib import Path

import pytest
from hypothesis import assume, given, strategies as st

from kvprobe.backends import InMemoryBackend
from kvprobe.spec import replay as replay_mod
from kvprobe.spec.replay import TraceDivergence, check_trace, replay
from kvprobe.statemachine import AsyncLookupManager, FailureKind, NdjsonTrace, ReqContext
from kvprobe.statemachine.trace import WORKER_ACTIONS, read_ndjson

KEYS = [b"\x01" * 8, b"\x02" * 8, b"\x03" * 8]
REQS = ["a", "b"]

OPS = st.lists(
    st.one_of(
        st.tuples(st.just("lookup"), st.sampled_from(KEYS), st.sampled_from(REQS)),
        st.tuples(st.just("flush")),
        st.tuples(st.just("drain")),
        st.tuples(st.just("cleanup"), st.sampled_from(REQS)),
        st.tuples(st.just("mark_miss"), st.sampled_from(KEYS)),
        st.tuples(st.just("take")),
        st.tuples(st.just("complete"), st.integers(0, 3)),
        st.tuples(st.just("fail"), st.integers(0, 3)),
        st.tuples(st.just("time_out"), st.integers(0, 3)),
    ),
    min_size=1,
    max_size=40,
)


def record(ops: list[tuple[object, ...]], *, shutdown: bool = True) -> list[dict[str, object]]:
    """Drive a real manager (manual worker) and return its NDJSON trace, parsed."""
    stream = io.StringIO()
    m = AsyncLookupManager(InMemoryBackend([KEYS[0]]), worker="manual", trace=NdjsonTrace(stream))
    worker = m.worker
    for op in ops:
        taken = sorted(worker.taken)  # type: ignore[attr-defined]
        kind = op[0]
        if kind == "lookup":
            m.lookup(op[1], ReqContext(op[2]))  # type: ignore[arg-type]
        elif kind == "flush":
            m.flush()
        elif kind == "drain":
            m.drain_results()
        elif kind == "cleanup":
            m.cleanup(op[1])  # type: ignore[arg-type]
        elif kind == "mark_miss":
            m.mark_miss([op[1]])  # type: ignore[list-item]
        elif kind == "take":
            worker.take_batch()  # type: ignore[attr-defined]
        elif kind in ("complete", "fail") and taken:
            group = worker.taken[taken[op[1] % len(taken)]]  # type: ignore[attr-defined,operator]
            if kind == "complete":
                worker.complete(group)  # type: ignore[attr-defined]
            else:
                worker.fail(group, FailureKind.RAISED, "test")  # type: ignore[attr-defined]
        elif kind == "time_out":
            fresh = [g for g in taken if g not in worker.timed_out]  # type: ignore[attr-defined]
            if fresh:
                worker.time_out(worker.taken[fresh[op[1] % len(fresh)]])  # type: ignore[attr-defined,operator]
    m.drain_results()
    if shutdown:
        m.shutdown()
    return read_ndjson(stream.getvalue().splitlines())


@given(OPS)
def test_a_real_trace_replays_cleanly(ops: list[tuple[object, ...]]) -> None:
    events = record(ops)
    report = replay(events)
    assert report.events == len(events)
    assert report.final.closed and not report.final.probes


def _tamper(event: dict[str, object], how: int) -> bool:
    """Change one event so that it cannot be what the implementation did; False if not applicable."""
    action = event["action"]
    if how == 0:
        event["size"] = int(event["size"]) + 1  # type: ignore[call-overload]
    elif how == 1 and action == "Lookup":
        event["verdict"] = {None: False, False: True, True: None}[event["verdict"]]  # type: ignore[index]
    elif how == 2 and action == "Flush" and event["groups"]:
        event["groups"][0]["gens"][0] += 100  # type: ignore[index]
    elif how == 3 and action == "Drain":
        event["group"] = int(event["group"]) + 100  # type: ignore[call-overload]
    elif how == 4 and action == "Drain" and event["verdicts"] is not None:
        event["late"] = not event["late"]
    else:
        return False
    return True


@given(OPS, st.data())
def test_a_tampered_trace_is_rejected_at_the_tampered_event(ops: list[tuple[object, ...]], data: st.DataObject) -> None:
    events = record(ops)
    # The replay checks the core's events; the worker's are checked by TLC
    # (tests/tla/test_tla_trace*.py), the replay infers worker steps from the Drains.
    core = [i for i, e in enumerate(events) if e["action"] not in WORKER_ACTIONS]
    index = data.draw(st.sampled_from(core), label="event")
    how = data.draw(st.integers(0, 4), label="how")
    tampered = copy.deepcopy(events)
    if not _tamper(tampered[index], how):
        how = 0
        _tamper(tampered[index], how)
    divergence = check_trace(tampered)
    assert divergence is not None, f"tampering {how} at {index} went unnoticed"
    assert divergence.seq == index, f"first divergence reported at {divergence.seq}, tampered at {index}"
    assert f"seq={index}" in str(divergence)


@given(OPS, st.data())
def test_a_missing_event_is_reported(ops: list[tuple[object, ...]], data: st.DataObject) -> None:
    events = record(ops)
    assume(len(events) >= 2)
    index = data.draw(st.integers(0, len(events) - 2), label="dropped")
    del events[index]
    divergence = check_trace(events)
    assert divergence is not None and divergence.seq == index + 1 and "missing" in divergence.detail


def test_replay_command_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    events = record([("lookup", KEYS[0], "a"), ("flush",), ("take",), ("complete", 0), ("lookup", KEYS[0], "a")])
    good = tmp_path / "good.ndjson"
    good.write_text("".join(json.dumps(e) + "\n" for e in events))
    assert replay_mod.main([str(good)]) == 0
    assert "replay cleanly" in capsys.readouterr().out
    events[-2]["verdict"] = False  # the hit was reported as a miss
    bad = tmp_path / "bad.ndjson"
    bad.write_text("".join(json.dumps(e) + "\n" for e in events))
    assert replay_mod.main([str(bad)]) == 1
    assert "seq=" in capsys.readouterr().out
    assert replay_mod.main([str(tmp_path / "absent.ndjson")]) == 2


def test_divergence_names_the_event() -> None:
    events = record([("lookup", KEYS[1], "b"), ("flush",)])
    events[0]["phase"] = "RESOLVED"
    with pytest.raises(TraceDivergence) as caught:
        replay(events)
    assert caught.value.seq == 0 and caught.value.action == "Lookup" and "phase" in caught.value.detail


def test_worker_events_are_in_the_trace_and_skipped_by_the_replay() -> None:
    events = record([("lookup", KEYS[0], "a"), ("flush",), ("take",), ("complete", 0), ("lookup", KEYS[0], "a")])
    actions = [e["action"] for e in events]
    assert actions == ["Lookup", "Flush", "TakeBatch", "CompleteGroup", "Drain", "Lookup", "Shutdown"]
    assert events[3]["verdicts"] == [True] and events[3]["held"] == []
    assert replay(events).by_action["CompleteGroup"] == 1
