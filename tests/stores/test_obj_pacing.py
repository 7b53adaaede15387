"""Pacing to the store (issue 27 part 2): the pure pace on a virtual clock, then the lookup engine driving it.

No S3 and no NIXL.  :class:`PaceCore` takes its clock as an argument, so its
steps (CUBIC's decrease and regrowth, the floor, Retry-After, the check that
a decrease helped) are asserted exactly, and its behaviour against two store
models is simulated without sleeping: a store with a fixed capacity (a
partition: HEADs beyond its rate fail) and a store failing a fixed fraction
of HEADs whatever the rate (the fault proxy's model, and a gateway's noise).
"""

from __future__ import annotations

import gc
import heapq
import math
import os
import random
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from obj_fakes import FakeStore

from kvprobe.backends._host_pace import PACE_SCOPES, HostPacer, host_pacer, pace_dir
from kvprobe.backends._obj_lookup import ChunkedLookup, RetryPolicy
from kvprobe.backends._pacing import PaceCore, Pacer, parse_retry_after, shared_pacer

# --- the pure pace ------------------------------------------------------------------


def _window(core: PaceCore, start: float, *, queries: int, every_s: float, failing: set[int], heads: int = 16) -> float:
    """Send ``queries`` queries of ``heads`` HEADs ``every_s`` apart from ``start``, each answered 10 ms later."""
    t = start
    for i in range(queries):
        t = start + i * every_s
        if i in failing:
            core.failed(t + 0.01, t, heads)
        else:
            core.answered(t + 0.01, t, heads)
    return t + 0.01


def test_unpaced_until_the_store_pushes_back() -> None:
    core = PaceCore(0.0)
    assert core.rate(0.0) is None
    assert [core.reserve(0.0, 1000) for _ in range(5)] == [0.0] * 5  # a store that never throttles costs nothing
    _window(core, 0.0, queries=40, every_s=0.01, failing=set())
    assert core.rate(1.0) is None and core.reserve(1.0, 1000) == 1.0
    assert core.stats.decreases == 0


def test_a_window_with_failures_sets_the_rate_to_beta_times_the_rate_achieved_then_cubic_regrowth() -> None:
    core = PaceCore(0.0, window_min_s=0.5)
    # 32 queries of 16 HEADs every 16 ms: 1,000 HEAD/s; one in four failed.  The
    # window is judged at the last answer (0.506 s after the first send).
    end = _window(core, 0.0, queries=32, every_s=0.016, failing={3, 7, 11, 15, 19, 23, 27, 31})
    assert core.stats.decreases == 1
    k = (1000.0 * (1 - 0.7) / 0.4) ** (1 / 3)
    assert core.rate(end) == core.rate(end + k) == pytest.approx(0.7 * 1000.0)  # held while being checked
    # The first reservation after a decrease has no burst credit: the next window measures the new rate.
    assert core.reserve(end, 16) == pytest.approx(end)
    assert core.reserve(end, 16) == pytest.approx(end + 16 / 700.0)
    # The next windows have no failures.  The chain begun unpaced pools
    # them but the first (a drained bucket may still refill then), and one
    # says little of a share of 2 %: the rate is held.
    quiet = end
    for _ in range(2):
        quiet = _window(core, quiet + 0.1, queries=23, every_s=0.023, failing=set())
        assert core.rate(quiet) == core.rate(quiet + k) == pytest.approx(700.0)
    # Two pooled: their share fell beyond chance, the decrease stands, and
    # CUBIC's regrowth starts at that window's judgement.
    checked = _window(core, quiet + 0.1, queries=23, every_s=0.023, failing=set())  # judged at its last answer
    assert core.stats.decreases == 1 and core.stats.undone == 0
    assert core.rate(checked) == pytest.approx(700.0)
    assert core.rate(checked + k) == pytest.approx(1000.0)  # back at w_max after K seconds
    assert core.rate(checked + k + 2.0) == pytest.approx(1000.0 + 0.4 * 2.0**3)  # then convex growth
    # Never above twice the measured rate (nor w_max): an idle process grows no rate it never used.
    assert core.rate(checked + 1000.0) == pytest.approx(max(2 * core.measured, 1000.0))


def _demand_limited_window(
    core: PaceCore, start: float, failing: set[int], *, queries: int, heads: int
) -> tuple[float | None, float]:
    """``queries`` queries of ``heads`` HEADs at 150 HEAD/s from ``start``, the last one judging the window.

    Returns the pace just before that last answer, and the window's end.
    """
    every_s = heads / 150.0
    _window(core, start, queries=queries - 1, every_s=every_s, failing=failing, heads=heads)
    t = start + (queries - 1) * every_s
    before = core.rate(t + 0.01)
    assert core.stats.decreases == 0
    _window(core, t, queries=1, every_s=every_s, failing={0} if queries - 1 in failing else set(), heads=heads)
    return before, t + 0.01


def test_a_few_failures_while_the_demand_is_below_the_pace_step_it_down_from_its_rate() -> None:
    """Not down to the demand: on Ceph RGW, a decrease to a quiet moment's demand (the pace from 378 to ~130 HEAD/s,
    CUBIC's plateau at 184) held a host's pace under the next moments' demand for seconds, and long walks waited out
    their deadlines."""
    core = PaceCore(0.0, start_rate=500.0, window_heads=128, window_min_s=0.5)
    before, end = _demand_limited_window(core, 1.0, failing={3}, queries=8, heads=16)
    assert before is not None and before > 300.0
    assert core.stats.decreases == 1
    assert core.w_max == pytest.approx(before)  # CUBIC's plateau: the rate it had, not the 150 HEAD/s sent
    assert core.rate(end) == pytest.approx(0.7 * before)


def test_many_failures_while_the_demand_is_below_the_pace_cut_it_to_what_the_store_served() -> None:
    core = PaceCore(0.0, start_rate=500.0, window_heads=128, window_min_s=0.5)
    # Single-HEAD queries (as the backend's adapt to failures), 40 % of them failed: the store, not bursts, limits.
    _, end = _demand_limited_window(core, 1.0, failing={i for i in range(128) if i % 5 < 2}, queries=128, heads=1)
    assert core.stats.decreases == 1
    assert core.rate(end) == pytest.approx(150.0 * 0.6, rel=0.05)  # what it served: 60 % of 150 HEAD/s


def _kept_up_at_400(core: PaceCore) -> float:
    """14 queries of 16 HEADs every 40 ms, none failed (one window: the store served 400 HEAD/s): its end."""
    end = _window(core, 0.0, queries=14, every_s=0.04, failing=set())
    assert core.rate(end) is None and core.stats.decreases == 0
    return end


def test_the_first_decrease_in_a_quiet_moment_starts_from_what_the_store_served_of_late_not_from_the_demand() -> None:
    """From unpaced no rate says what the store took; on Ceph RGW the first decrease, set by a quiet moment's
    demand, held a host's pace below the demand that followed (seed 7 missed its targets twice that way)."""
    core = PaceCore(0.0, window_heads=128, window_min_s=0.5)
    _kept_up_at_400(core)
    _, end = _demand_limited_window(core, 1.0, failing={3}, queries=8, heads=16)
    assert core.stats.decreases == 1
    assert core.w_max == pytest.approx(400.0)  # not the 150 HEAD/s sent
    assert core.rate(end) == pytest.approx(0.7 * 400.0)


def test_an_old_rate_served_is_no_anchor_and_many_failures_are_cut_to_what_was_served() -> None:
    late = PaceCore(0.0, window_heads=128, window_min_s=0.5)
    kept_up = _kept_up_at_400(late)
    start = kept_up + PaceCore.KEPT_UP_S + 0.1  # the store's 400 HEAD/s are too old to say what it takes now
    _, end = _demand_limited_window(late, start, failing={3}, queries=8, heads=16)
    assert late.stats.decreases == 1 and late.rate(end) == pytest.approx(0.7 * 150.0, rel=0.01)
    heavy = PaceCore(0.0, window_heads=128, window_min_s=0.5)
    _kept_up_at_400(heavy)
    _, end = _demand_limited_window(heavy, 1.0, failing={i for i in range(128) if i % 5 < 2}, queries=128, heads=1)
    assert heavy.stats.decreases == 1 and heavy.rate(end) == pytest.approx(150.0 * 0.6, rel=0.05)


def test_the_rate_never_goes_below_its_floor() -> None:
    core = PaceCore(0.0, start_rate=0.6, window_heads=2, window_min_s=0.01)
    t = 0.0
    for _ in range(10):  # a window with a failed and an answered HEAD, then one without failures: it helped
        t = _window(core, t + 0.001, queries=2, every_s=0.015, failing={0}, heads=1)
        assert core.rate(t) == pytest.approx(0.5)  # 0.7 times the rate before would be below it
        t = _window(core, t + 0.001, queries=2, every_s=0.015, failing=set(), heads=1)
    assert core.stats.decreases == 10
    assert all(rate is not None and rate >= 0.5 for rate in (core.rate(t + dt / 10) for dt in range(100)))


def test_a_pause_in_the_demand_is_not_measured_as_the_rate_achieved() -> None:
    """Idle time between two bursts once made a 30 HEAD/s 'rate' out of a 1,000 HEAD/s store."""
    core = PaceCore(0.0, window_min_s=0.5)
    for i in range(16):  # a burst: reserved and answered at 1,000 HEAD/s
        core.reserve(i * 0.016, 16)
        core.answered(i * 0.016 + 0.01, i * 0.016, 16)
    resume = 0.016 * 16 + 2.0  # two idle seconds
    for i in range(32):
        t = resume + i * 0.016
        core.reserve(t, 16)
        if i % 4 == 3:
            core.failed(t + 0.01, t, 16)
        else:
            core.answered(t + 0.01, t, 16)
    assert core.stats.decreases == 1
    assert core.rate(resume + 1.0) == pytest.approx(0.7 * 1000.0)


def test_failures_of_queries_sent_before_a_decrease_are_not_judged_again() -> None:
    core = PaceCore(0.0, window_min_s=0.5)
    end = _window(core, 0.0, queries=32, every_s=0.016, failing={5, 25})
    assert core.stats.decreases == 1
    # Late failures of queries sent before the decrease: one decrease per round trip, not one per failure.
    for i in range(100):
        core.failed(end + 0.3 + i * 0.01, end - 0.1, 16)
    assert core.stats.decreases == 1
    # Failures of queries sent at the new rate do count: a few in the window right after the decrease
    # keep it (the store is still recovering from the rate that was cut); a few more in the next one step down.
    checked = _window(core, end + 1.5, queries=32, every_s=0.016, failing={5, 25})
    assert core.stats.decreases == 1 and core.stats.undone == 0
    _window(core, checked + 0.1, queries=32, every_s=0.016, failing={5, 25})
    assert core.stats.decreases == 2


def test_a_few_failures_right_after_a_decrease_do_not_step_the_pace_down_again() -> None:
    """On Ceph RGW, three windows in a row with a few 503s each (the store's bucket, drained by the first, refilling)
    took a host's pace from 578 to 198 HEAD/s within a second, 0.7 cubed, and held it under the demand for seconds:
    requests needing 6 to 8 windows waited out their deadlines."""
    core = PaceCore(0.0, start_rate=400.0, window_min_s=0.25)
    t, decreases, plateaus = 0.0, [], []
    for _ in range(3):  # windows of 21 queries of 4 HEADs at 320 HEAD/s, 2 of them failed (a few per HEAD)
        before = core.rate(t + 0.001 + 20 * 4 / 320.0 + 0.01)  # at the last answer, which judges the window
        t = _window(core, t + 0.001, queries=21, every_s=4 / 320.0, failing={4, 14}, heads=4)
        decreases.append(core.stats.decreases)
        plateaus.append((before, core.w_max))
    assert decreases == [1, 1, 2]  # the second window checked the first decrease, and kept it
    (first_rate, first_plateau), _, (third_rate, third_plateau) = plateaus
    assert first_plateau == pytest.approx(first_rate, rel=0.01)  # each a step down from the rate it had
    assert third_plateau == pytest.approx(third_rate, rel=0.01) and third_rate < first_rate
    # A window the pace held, failing 2 of 21 queries of 4 HEADs: the cut is the share of HEADs that failed.
    assert core.rate(t) == pytest.approx((19 / 21) ** (1 / 4) * third_plateau)
    # Heavier failures right after a decrease still cut at once: the store, not its recovery, is the limit.
    heavy = PaceCore(0.0, start_rate=400.0, window_min_s=0.25)
    t = _window(heavy, 0.001, queries=24, every_s=4 / 320.0, failing={4, 14}, heads=4)
    _window(heavy, t + 0.001, queries=96, every_s=1 / 320.0, failing={i for i in range(96) if i % 2}, heads=1)
    assert heavy.stats.decreases == 2


def test_a_503_counts_as_throttling_whether_or_not_it_has_a_body() -> None:
    pytest.importorskip("botocore")
    from botocore.exceptions import ClientError

    from kvprobe.backends.nixl_obj import classify_failure

    # A HEAD's 503 has no body: botocore reports the code as "503", not "SlowDown".
    bodiless = ClientError({"Error": {"Code": "503"}, "ResponseMetadata": {"HTTPStatusCode": 503}}, "HeadObject")
    empty = ClientError({"Error": {}, "ResponseMetadata": {"HTTPStatusCode": 503}}, "HeadObject")
    assert classify_failure(bodiless, 0.01) == classify_failure(empty, 0.01) == "throttled"
    # And the engine hands every failure but a timeout to the pace (see test_the_engine_reports_outcomes...).


def test_retry_after_holds_every_reservation_until_then_capped() -> None:
    core = PaceCore(0.0, max_hold_s=30.0)
    core.failed(10.0, 9.9, 1, retry_after_s=3.0)
    assert core.reserve(10.5, 1) == 13.0 and core.stats.holds == 1
    assert core.reserve(10.5, 1, not_after=12.0) is None and core.stats.refused == 1  # would start too late
    core.failed(11.0, 10.9, 1, retry_after_s=1e9)
    assert core.reserve(11.0, 1) == 11.0 + 30.0  # capped at max_hold_s
    core.failed(12.0, 11.9, 1, retry_after_s=1.0)  # an earlier end never shortens a hold
    assert core.hold_until == 41.0 and core.stats.holds == 2
    assert core.reserve(12.0, 1) == 12.0  # the hold's probe, HOLD_PROBE_S after it was set
    assert core.reserve(12.5, 1) == 41.0  # the next reservations wait: the probe is not answered yet


def test_retry_after_values_are_parsed_as_seconds_or_http_dates() -> None:
    assert parse_retry_after("120") == 120.0
    assert parse_retry_after(" 7 ") == 7.0
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:10 GMT", now_epoch_s=1445412480.0) == 10.0
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT", now_epoch_s=1445412490.0) == 0.0
    for bad in (None, "", "soon", "-3", "1.5e3x"):
        assert parse_retry_after(bad) is None


def test_retry_after_is_read_from_a_boto3_error() -> None:
    pytest.importorskip("botocore")
    from botocore.exceptions import ClientError

    from kvprobe.backends.nixl_obj import retry_after_of

    def error(headers: dict[str, str]) -> ClientError:
        meta = {"HTTPStatusCode": 503, "HTTPHeaders": headers}
        return ClientError({"Error": {"Code": "503"}, "ResponseMetadata": meta}, "HeadObject")

    assert retry_after_of(error({"retry-after": "4"})) == 4.0
    assert retry_after_of(error({"Retry-After": "2"})) == 2.0
    assert retry_after_of(error({})) is None
    assert retry_after_of(RuntimeError("NIXL_ERR_BACKEND")) is None


@pytest.mark.parametrize(
    ("params", "match"),
    [
        ({"beta": 1.0}, "beta"),
        ({"c": float("nan")}, "c must"),
        ({"floor": 0.0}, "floor"),
        ({"window_heads": 0}, "window_heads"),
        ({"max_hold_s": float("inf")}, "max_hold_s"),
        ({"start_rate": -1.0}, "start_rate"),
    ],
)
def test_bad_parameters_are_refused(params: dict[str, Any], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        PaceCore(0.0, **params)


@pytest.mark.parametrize("scope", PACE_SCOPES)
def test_one_pace_per_store_shared_and_none_across_stores(
    scope: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KVPROBE_PACE_DIR", str(tmp_path))
    pacer_of = shared_pacer if scope == "process" else host_pacer
    a = pacer_of("http://127.0.0.1:9000", "kvblocks", "tier/")
    assert pacer_of("http://127.0.0.1:9000", "kvblocks", "tier/") is a
    others = [
        pacer_of("http://127.0.0.1:9001", "kvblocks", "tier/"),
        pacer_of("http://127.0.0.1:9000", "kvother", "tier/"),
        pacer_of("http://127.0.0.1:9000", "kvblocks", "other/"),
    ]
    assert all(p is not a for p in others) and len({id(p) for p in others}) == 3
    a.failed(time.monotonic(), 1, retry_after_s=30.0)  # the store said: wait
    assert pacer_of("http://127.0.0.1:9000", "kvblocks", "tier/").reserve(1, time.monotonic() + 5) is None
    assert all(p.reserve(1, time.monotonic() + 5) is not None for p in others)
    if scope == "host":  # one file per store and user, in the pace directory
        assert pace_dir() == tmp_path
        paths = {p.path for p in [a, *others] if isinstance(p, HostPacer)}
        assert len(paths) == 4 and all(p.parent == tmp_path and f"-{os.getuid()}-" in p.name for p in paths)
    del a
    gc.collect()
    fresh = pacer_of("http://127.0.0.1:9000", "kvblocks", "tier/")
    if scope == "process":  # nobody held it: a new one, unpaced
        assert fresh.snapshot()["holds"] == 0
    else:  # the file outlives the process's pacer: the store's word still holds
        assert fresh.reserve(1, time.monotonic() + 5) is None


# --- the pace against store models, on a virtual clock --------------------------------


def _simulate(
    fails: Callable[[float, int, random.Random], bool], *, paced: bool = True, seconds: float = 60.0
) -> dict[str, Any]:
    """A client with 64 HEADs in flight, queries sized as the engine sizes them, against ``fails(now, heads, rng)``.

    Returns HEADs sent per second (overall and over the last half) and the
    fraction of HEADs in failed queries, and the core.
    """
    from kvprobe.backends._obj_lookup import QuerySize

    rng = random.Random(5)
    core = PaceCore(0.0)
    size = QuerySize(16)
    now, busy, held = 0.0, 0, None
    events: list[tuple[float, float, bool, int]] = []
    sent = failed = late_sent = 0

    def send(heads: int) -> None:
        nonlocal busy, sent, late_sent
        busy += heads
        sent += heads
        late_sent += heads if now >= seconds / 2 else 0
        heapq.heappush(events, (now + 0.02 * rng.uniform(0.5, 1.5), now, fails(now, heads, rng), heads))

    while now < seconds:
        if held is not None and held[0] <= now:
            send(held[1])
            held = None
        while held is None and busy + size.size <= 64:
            start = core.reserve(now, size.size) if paced else now
            assert start is not None
            if start > now:
                held = (start, size.size)
            else:
                send(size.size)
        now = min(events[0][0] if events else math.inf, held[0] if held else math.inf)
        while events and events[0][0] <= now:
            t, sent_at, failing, heads = heapq.heappop(events)
            busy -= heads
            if failing:
                failed += heads
                size.failed(heads)
                core.failed(t, sent_at, heads)
            else:
                size.answered(heads)
                core.answered(t, sent_at, heads)
    return {"rate": sent / seconds, "late_rate": late_sent / (seconds / 2), "failed": failed / sent, "core": core}


def _random_failures(p: float) -> Callable[[float, int, random.Random], bool]:
    return lambda now, heads, rng: any(rng.random() < p for _ in range(heads))


def _capacity(per_s: Callable[[float], float]) -> Callable[[float, int, random.Random], bool]:
    """A partition: a token bucket of ``per_s(now)`` HEADs/s, 0.1 s deep; a query fails if any HEAD finds none."""
    state = {"tokens": 0.0, "at": 0.0}

    def fails(now: float, heads: int, rng: random.Random) -> bool:
        del rng
        rate = per_s(now)
        tokens = min(0.1 * rate, state["tokens"] + (now - state["at"]) * rate)
        state["at"] = now
        served = min(heads, int(tokens))
        state["tokens"] = tokens - served
        return served < heads

    return fails


@pytest.mark.parametrize("p", [0.05, 0.20])
def test_failures_that_do_not_depend_on_the_rate_do_not_slow_it_down(p: float) -> None:
    """A loss-based limiter alone drives itself to its floor here; each decrease is checked and undone."""
    unpaced = _simulate(_random_failures(p), paced=False)
    paced = _simulate(_random_failures(p))
    assert paced["rate"] >= 0.9 * unpaced["rate"], (paced["rate"], unpaced["rate"])
    stats = paced["core"].stats
    # Tried, judged, undone, and the share that kept failing learnt as noise: not tried again and again.
    assert 1 <= stats.decreases <= 3 and stats.undone >= stats.decreases - 1, stats
    assert paced["core"].noise >= 0.5 * p, paced["core"].noise
    # Back to unpaced after each, unless the last decrease is still being checked.
    assert paced["core"].rate(60.0) is None or stats.decreases == stats.undone + 1


@pytest.mark.parametrize("capacity", [300.0, 1000.0])
def test_a_store_at_its_capacity_is_paced_near_it_with_few_failures(capacity: float) -> None:
    unpaced = _simulate(_capacity(lambda now: capacity), paced=False)
    paced = _simulate(_capacity(lambda now: capacity))
    assert unpaced["failed"] > 0.6  # unpaced: most HEADs go in queries the store fails
    assert 0.6 * capacity <= paced["late_rate"] <= 1.4 * capacity, paced["late_rate"]
    assert paced["failed"] < 0.3, paced["failed"]
    assert paced["failed"] < unpaced["failed"] / 3


def test_the_rate_grows_when_the_capacity_does() -> None:
    """A partition split doubles the capacity, twice: the rate follows (CUBIC's convex growth), within seconds."""
    paced = _simulate(_capacity(lambda now: 500.0 if now < 30.0 else 2000.0))
    assert paced["late_rate"] >= 1.5 * 500.0, paced["late_rate"]


# --- the engine driving a pace ------------------------------------------------------


def _engine(store: FakeStore, pacer: Pacer | None, **kw: Any) -> ChunkedLookup:
    options: dict[str, Any] = {"agents": 4, "chunk": 16, "retry": RetryPolicy(0.001, 0.01), "seed": 3, "pacer": pacer}
    options.update(kw)
    return ChunkedLookup(store.query, **options)


def test_a_group_the_pace_cannot_serve_before_its_deadline_is_shed_at_once() -> None:
    names = [f"k{i}" for i in range(64)]
    store = FakeStore(set(names), {})
    pacer = Pacer()
    pacer.failed(time.monotonic(), 1, retry_after_s=30.0)  # the store said: not before 30 s
    engine = _engine(store, pacer)
    try:
        started = time.monotonic()
        verdicts, answered, shed, _ = engine.run(names, deadline_s=20.0)
        assert time.monotonic() - started < 10.0, "the call waited for its deadline"
        assert verdicts == [False] * 64 and answered == 0 and shed == 64
        assert store.sizes == [], "a shed key was queried"
        c = engine.counters.snapshot()
        assert c["shed"] == 64 and c["miss_not_started"] == c["miss_failing"] == c["miss_in_flight"] == 0, c
    finally:
        engine.close()


def test_a_group_is_served_as_far_as_the_pace_allows_and_the_rest_is_shed() -> None:
    names = [f"k{i}" for i in range(320)]
    store = FakeStore(set(names[::2]), {})
    engine = _engine(store, Pacer(PaceCore(time.monotonic(), start_rate=32.0)))
    try:
        verdicts, answered, shed, _ = engine.run(names, deadline_s=1.0)
        c = engine.counters.snapshot()
        assert answered >= 16 and shed >= 160 and answered + shed + c["miss_in_flight"] == 320, c
        assert sum(store.sizes) == answered + c["miss_in_flight"], "a shed key was asked"
        assert verdicts[:answered] == [i % 2 == 0 for i in range(answered)]  # served in order, correctly
        assert not any(verdicts[answered:])
        assert c["paced_queries"] >= 1
    finally:
        engine.close()


def test_a_store_that_was_slow_is_asked_again_and_its_answers_come_back() -> None:
    # The chaos campaign's Ceph RGW freeze: queries on the wire during the
    # outage are answered at the thaw, just inside their call's deadline, and
    # teach the engine that a query lasts about as long as a call may.  Shed
    # on that alone, every later call was answered MISS whole and nothing ran
    # to re-learn the duration: a stored key stayed MISS for 34 s.
    names = [f"k{i}" for i in range(256)]
    store = FakeStore(set(names), {}, delay_s=0.3)
    engine = _engine(store, Pacer())  # never throttled: the pace holds nothing back
    try:
        slow = engine.run(names, deadline_s=5.0)
        assert slow.answered == 256 and all(slow.verdicts)
        assert engine._query_s > 0.25  # the slow queries' duration is what a query usually takes now
        store.delay_s = 0.0  # the store answers at once again
        # A call with less time than that duration: its first query still starts.
        for _ in range(3):
            after = engine.run(names[:1], deadline_s=0.2)
            if after.answered:
                break
        assert after.verdicts == [True] and after.shed == 0, engine.counters.snapshot()
        assert engine.pacer is not None and engine.pacer.snapshot()["refused"] == 0
    finally:
        engine.close()


def test_the_pace_is_shared_by_engines_on_the_same_store() -> None:
    names = [f"k{i}" for i in range(16)]
    pacer = shared_pacer("http://127.0.0.1:1", "shared-bucket", "p/")
    first = _engine(FakeStore(set(), {}), pacer)
    second_store = FakeStore(set(), {})
    second = _engine(second_store, shared_pacer("http://127.0.0.1:1", "shared-bucket", "p/"))
    other_store = FakeStore(set(), {})
    other = _engine(other_store, shared_pacer("http://127.0.0.1:1", "shared-bucket", "q/"))
    try:
        assert first.pacer is second.pacer
        pacer.failed(time.monotonic(), 1, retry_after_s=30.0)  # one engine's store said: wait
        assert second.run(names, deadline_s=5.0).shed == 16 and second_store.sizes == []
        assert other.run(names, deadline_s=5.0).answered == 16 and sum(other_store.sizes) == 16
    finally:
        for engine in (first, second, other):
            engine.close()


class _RecordingPacer(Pacer):
    def __init__(self) -> None:
        super().__init__()
        self.events: list[tuple[str, int, float | None]] = []

    def answered(self, sent_at: float, heads: int) -> None:
        self.events.append(("answered", heads, None))

    def failed(self, sent_at: float, heads: int, retry_after_s: float | None = None) -> None:
        self.events.append(("failed", heads, retry_after_s))


def test_the_engine_reports_every_outcome_but_timeouts_to_the_pace() -> None:
    names = [f"k{i}" for i in range(16)]
    store = FakeStore(set(names), {"k0": 1})
    pacer = _RecordingPacer()
    engine = _engine(store, pacer, retry_after=lambda exc: 2.5)
    try:
        assert engine.run(names, deadline_s=5.0).answered == 16
        assert pacer.events[0] == ("failed", 16, 2.5)
        assert sorted(pacer.events[1:]) == [("answered", 8, None), ("answered", 8, None)]
    finally:
        engine.close()
    timed_out = FakeStore(set(names), {"k0": 1})
    pacer = _RecordingPacer()
    engine = _engine(timed_out, pacer, classify=lambda exc, elapsed: "timed_out")
    try:
        assert engine.run(names, deadline_s=5.0).answered == 16
        assert [e[0] for e in pacer.events] == ["answered", "answered"]  # a slow store is not a congested one
    finally:
        engine.close()


def test_concurrent_calls_take_turns_on_the_pace() -> None:
    """Each call holds at most one reservation ahead: a call arriving later is not queued behind all of another's."""
    big = [f"big{i}" for i in range(16 * 80)]
    small = [f"small{i}" for i in range(16)]
    store = FakeStore(set(small), {})
    engine = _engine(store, Pacer(PaceCore(time.monotonic(), start_rate=160.0)))
    try:
        results: list[Any] = []
        runner = threading.Thread(target=lambda: results.append(engine.run(big, 3.0)))
        runner.start()
        while len(store.sizes) < 2:
            time.sleep(0.001)
        verdicts, answered, shed, _ = engine.run(small, 3.0)
        assert answered == 16 and all(verdicts) and shed == 0
        runner.join()
        big_result = results[0]
        assert big_result.shed > 0  # 1,280 keys at ~200 HEAD/s do not fit in 3 s: the rest was shed
    finally:
        engine.close()
