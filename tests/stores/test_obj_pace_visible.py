"""The pace, visible to an operator (issue 39 part 4): its state in the snapshot and Prometheus, its recent decisions.

``Pacer.trace()`` keeps the pace's last decisions (a decrease, one undone,
a Retry-After hold), each with when it was made and the rate before and
after it, bounded in length; ``snapshot()`` adds the rate the pace measured;
:mod:`kvprobe.metrics` exports the rates as gauges.  No S3, no NIXL.  The
pacers whose windows are judged run on a virtual clock: on the wall clock a
loaded machine moved sends across windows, and a test failed once.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from kvprobe.backends._host_pace import HostPacer
from kvprobe.backends._pacing import TRACE_LEN, PaceCore, Pacer


class _Clock:
    """A virtual ``time.monotonic``: moves only when told to."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _overloaded_window(pacer: Pacer, clock: _Clock, *, queries: int = 200, heads: int = 1) -> None:
    """Single-HEAD queries sent as they are made, a quarter of them failed: one window judged, one decrease.

    A quarter of the HEADs failed, not of 16-HEAD queries (under 2 % of the
    HEADs, which the pace reads as a store's noise); sent now, not in the past
    (a quiet window is judged after a second, and sends older than the window
    that follows are not judged again).
    """
    for i in range(queries):
        sent = clock()
        if i % 4 == 3:
            pacer.failed(sent, heads)
        else:
            pacer.answered(sent, heads)
        clock.now += 0.002


def _aged_pacer(clock: _Clock) -> Pacer:
    # Its first window opened before the sends below.
    return Pacer(PaceCore(clock() - 10.0), clock=clock)


def test_a_decrease_is_traced_with_the_rate_before_and_after() -> None:
    clock = _Clock()
    pacer = _aged_pacer(clock)
    assert pacer.trace() == []
    started = clock()
    _overloaded_window(pacer, clock)
    (event,) = pacer.trace()
    assert event["decision"] == "decrease" and event["rate_before"] is None  # from unpaced
    assert isinstance(event["rate_after"], float) and event["rate_after"] == pytest.approx(pacer.snapshot()["rate"])
    assert started < float(event["at"]) < clock()  # made during the window, on the pacer's clock
    assert pacer.snapshot()["decreases"] == 1


def test_a_hold_is_traced_with_its_length_and_the_trace_is_bounded() -> None:
    pacer = Pacer()
    for i in range(TRACE_LEN + 10):
        pacer.failed(time.monotonic(), 1, retry_after_s=0.1 * (i + 1))  # each one holds longer: a new hold
    trace = pacer.trace()
    assert len(trace) == TRACE_LEN and {e["decision"] for e in trace} == {"hold"}
    assert float(trace[-1]["hold_s"]) == pytest.approx(0.1 * (TRACE_LEN + 10), abs=0.05)  # the newest kept, last
    assert pacer.snapshot()["holds"] == TRACE_LEN + 10  # the counters keep counting


def test_answers_that_change_nothing_trace_nothing() -> None:
    clock = _Clock()
    pacer = _aged_pacer(clock)
    for _ in range(5):
        pacer.answered(clock() - 0.5, 16)
    pacer.reserve(16)
    assert pacer.trace() == []


def test_the_snapshot_has_the_measured_rate() -> None:
    clock = _Clock()
    pacer = _aged_pacer(clock)
    assert pacer.snapshot()["measured"] == 0.0
    _overloaded_window(pacer, clock)
    measured = pacer.snapshot()["measured"]
    assert isinstance(measured, float) and measured > 0.0


def test_a_host_pace_traces_the_decisions_of_this_process(tmp_path: Path) -> None:
    pacer = HostPacer(tmp_path / "pace.json")
    pacer.failed(time.monotonic(), 1, retry_after_s=5.0)
    other = HostPacer(tmp_path / "pace.json")
    assert [e["decision"] for e in pacer.trace()] == ["hold"] and other.trace() == []  # made here, not there
    assert other.snapshot()["holds"] == 1  # while the counters are the host's


class _Tier:
    def __init__(self, pacer: Pacer) -> None:
        self.pacer = pacer

    @property
    def pacing(self) -> dict[str, Any]:
        return self.pacer.snapshot()

    def batch_lookup(self, keys: list[bytes], req_context: object) -> list[bool]:
        return [False] * len(keys)


def test_the_pace_rates_are_exported_as_gauges() -> None:
    pytest.importorskip("prometheus_client")
    from prometheus_client import CollectorRegistry

    from kvprobe.metrics import LookupMetrics
    from kvprobe.statemachine import AsyncLookupManager

    clock = _Clock()
    pacer = _aged_pacer(clock)
    _overloaded_window(pacer, clock)
    registry = CollectorRegistry()
    with AsyncLookupManager(_Tier(pacer), name="obj") as m:
        LookupMetrics(m).register(registry)
        snap = pacer.snapshot()
        for name in ("rate", "w_max", "measured"):
            value = registry.get_sample_value(f"kvprobe_backend_pace_{name}", {"tier": "obj"})
            assert value == pytest.approx(snap[name], rel=0.01), name
        assert registry.get_sample_value("kvprobe_backend_pace_decreases_total", {"tier": "obj"}) == 1


def test_the_heads_the_store_failed_and_answered_are_counted_and_exported() -> None:
    # A failed query of several HEADs is one failed query but several HEADs
    # the store turned away: the operator sees the HEADs, and the rate the
    # store answered at (not only the rate of outcomes, failed ones included).
    pytest.importorskip("prometheus_client")
    from prometheus_client import CollectorRegistry

    from kvprobe.metrics import LookupMetrics
    from kvprobe.statemachine import AsyncLookupManager

    clock = _Clock()
    pacer = _aged_pacer(clock)
    _overloaded_window(pacer, clock, queries=200, heads=3)  # 50 queries of 3 HEADs failed, 150 answered
    snap = pacer.snapshot()
    assert (snap["failed_heads"], snap["answered_heads"]) == (150, 450)
    served, measured = snap["served"], snap["measured"]
    assert isinstance(served, float) and isinstance(measured, float)
    assert 0.0 < served < measured  # a quarter of the queries failed: fewer HEADs answered than came back
    registry = CollectorRegistry()
    with AsyncLookupManager(_Tier(pacer), name="obj") as m:
        LookupMetrics(m).register(registry)
        assert registry.get_sample_value("kvprobe_backend_pace_failed_heads_total", {"tier": "obj"}) == 150
        assert registry.get_sample_value("kvprobe_backend_pace_answered_heads_total", {"tier": "obj"}) == 450
        assert registry.get_sample_value("kvprobe_backend_pace_served", {"tier": "obj"}) == pytest.approx(served)
