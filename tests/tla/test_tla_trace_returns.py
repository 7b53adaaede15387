"""Trace validation rejects a worker that holds an answer it has (issue 41).

The threaded worker records each backend call's return (``CallReturned``)
apart from the answer's publication; ``tla/Trace.tla`` requires the worker's
next event to publish that answer, as KVProbe's worker publishes in the step
its call returns.

The mutant ``HoldsUntilIdle`` is the code form of the spec mutant
``worker-holds-until-idle``: the threaded worker with one rule changed, a
returned call's answer is held while another call of the worker runs, and
everything held is published once none does (the variant issue 29
describes).  It subclasses the worker's private ``_send`` (where the worker
publishes), so the return is still recorded where the real worker records
it.  One scenario (a fast group beside a slow one of the same batch) runs on
both workers: the real worker's trace is ACCEPTED, the mutant's is REJECTED
at the slow call's return, the first worker event while the fast answer is
held.
"""

from __future__ import annotations

import shutil
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from kvprobe.backends import Backend
from kvprobe.check import EXIT_OK, EXIT_TRACE_REJECTED
from kvprobe.spec.actions import CALL_RETURNED
from kvprobe.spec.lifecycle import LookupPhase
from kvprobe.statemachine import AsyncLookupManager, GroupOutcome, ReqContext, ThreadedWorker
from kvprobe.statemachine.worker_base import Publish
from kvprobe.testing.search import check_trace

pytestmark = [pytest.mark.tlc, pytest.mark.skipif(shutil.which("java") is None, reason="TLC needs Java")]

Events = list[dict[str, object]]
SLOW_KEY, FAST_KEY = b"\xb0" * 8, b"\xb2" * 8
STORED = {FAST_KEY}
SLOW, FAST = ReqContext("slow"), ReqContext("fast")
BOUND_S = 10.0


class SlowGate:
    """Answers from STORED; the request "slow" waits on ``gate``; counts the calls inside it."""

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.lock = threading.Lock()
        self.running = 0

    def batch_lookup(self, keys: Sequence[bytes], req_context: Any) -> list[bool]:
        with self.lock:
            self.running += 1
        try:
            if req_context.req_id == "slow":
                self.gate.wait(30)
            return [k in STORED for k in keys]
        finally:
            with self.lock:
                self.running -= 1


class HoldsUntilIdle(ThreadedWorker):
    """The mutant: a returned call's answer is held while another call runs."""

    def __init__(self, counter: SlowGate) -> None:
        super().__init__(max_concurrent_groups=2)
        self.counter = counter
        self.held: list[tuple[str, GroupOutcome]] = []

    def start(self, backend: Backend, publish: Publish) -> None:
        self.held = []
        super().start(backend, publish)

    def _send(self, action: str, outcome: GroupOutcome) -> None:
        if action in ("CompleteGroup", "FailGroup") and self.counter.running > 0:
            self.held.append((action, outcome))
            return
        held, self.held = self.held, []
        for earlier in held:
            super()._send(*earlier)
        super()._send(action, outcome)


def wait_for(condition: Any, what: str) -> None:
    deadline = time.monotonic() + BOUND_S
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.002)


def fast_beside_slow(backend: SlowGate, worker: ThreadedWorker) -> Events:
    """A fast and a slow group in one batch; the slow call is released once the fast one returned."""
    events: Events = []
    m = AsyncLookupManager(backend, worker=worker, trace=events.append)
    try:
        m.lookup(SLOW_KEY, SLOW)
        m.lookup(FAST_KEY, FAST)
        m.flush()
        wait_for(lambda: any(e["action"] == CALL_RETURNED for e in list(events)), "the fast call did not return")
        m.drain_results()
        backend.gate.set()
        wait_for(
            lambda: m.phase(SLOW_KEY) is not LookupPhase.IN_FLIGHT and m.phase(FAST_KEY) is not LookupPhase.IN_FLIGHT,
            "the worker did not answer",
        )
        assert m.lookup(FAST_KEY, FAST) is True
        assert m.lookup(SLOW_KEY, SLOW) is False
        m.cleanup("slow")
        m.cleanup("fast")
    finally:
        backend.gate.set()
        m.shutdown()
    return events


def seq_of(events: Events, action: str, nth: int) -> int:
    found = [e for e in events if e["action"] == action]
    return int(str(found[nth]["seq"]))


def published_at(events: Events, returned: int) -> int:
    """The seq of the event publishing the answer whose return is event ``returned``."""
    group = events[returned]["group"]
    later = range(returned + 1, len(events))
    return next(i for i in later if events[i].get("group") == group and "after" not in events[i])


def test_the_real_worker_publishes_each_answer_as_its_next_event(tmp_path: Path) -> None:
    backend = SlowGate()
    events = fast_beside_slow(backend, ThreadedWorker(max_concurrent_groups=2))
    worker_events = [e for e in events if "after" not in e]
    returns = [i for i, e in enumerate(worker_events) if e["action"] == CALL_RETURNED]
    assert len(returns) == 2
    for i in returns:
        assert worker_events[i + 1]["action"] == "CompleteGroup"
        assert worker_events[i + 1]["group"] == worker_events[i]["group"]
    status, output = check_trace(events, tmp_path / "real.ndjson")
    assert status == EXIT_OK, output


def test_a_worker_holding_an_answer_is_rejected_at_its_next_event(tmp_path: Path) -> None:
    backend = SlowGate()
    events = fast_beside_slow(backend, HoldsUntilIdle(backend))
    slow_return = seq_of(events, CALL_RETURNED, 1)
    # The mutant did hold: the fast answer is published after the slow call returned.
    assert seq_of(events, "CompleteGroup", 0) > slow_return
    status, output = check_trace(events, tmp_path / "holds.ndjson")
    assert status == EXIT_TRACE_REJECTED, output
    assert f"none continues with event seq={slow_return} ({CALL_RETURNED})" in output
    # Without its returns the trace is what the worker recorded before it logged
    # them, and that is a behaviour of the model: the return is what catches it.
    published_only = [{**e, "seq": n} for n, e in enumerate(e for e in events if e["action"] != CALL_RETURNED)]
    status, output = check_trace(published_only, tmp_path / "published-only.ndjson")
    assert status == EXIT_OK, output


def test_a_trace_ending_with_an_unpublished_return_is_rejected(tmp_path: Path) -> None:
    backend = SlowGate()
    events = fast_beside_slow(backend, ThreadedWorker(max_concurrent_groups=2))
    first = seq_of(events, CALL_RETURNED, 0)
    published = published_at(events, first)
    status, output = check_trace(events[:published], tmp_path / "cut.ndjson")
    assert status == EXIT_TRACE_REJECTED, output
    status, output = check_trace(events[: published + 1], tmp_path / "whole.ndjson")
    assert status == EXIT_OK, output


def test_a_return_published_with_another_answer_is_rejected(tmp_path: Path) -> None:
    backend = SlowGate()
    events = fast_beside_slow(backend, ThreadedWorker(max_concurrent_groups=2))
    first = seq_of(events, CALL_RETURNED, 0)
    tampered = [dict(e) for e in events]
    tampered[first]["verdicts"] = [not v for v in tampered[first]["verdicts"]]  # type: ignore[attr-defined]
    status, output = check_trace(tampered, tmp_path / "other.ndjson")
    assert status == EXIT_TRACE_REJECTED, output
    assert f"none continues with event seq={published_at(events, first)} (CompleteGroup)" in output
