"""The object backend's lookup engine on a fake store: chunking, per-key retries, the deadline, counters.

No S3 and no NIXL: ``query(names)`` is a function that answers like NIXL
(one answer per name, ``None`` when absent) and fails the whole query when
any name in it is marked failing.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from obj_fakes import FakeStore

from kvprobe.backends._obj_lookup import ChunkedLookup, RetryPolicy


def _engine(store: FakeStore, **kw: Any) -> ChunkedLookup:
    options: dict[str, Any] = {"agents": 4, "chunk": 16, "retry": RetryPolicy(0.001, 0.01), "seed": 3}
    options.update(kw)
    return ChunkedLookup(store.query, **options)


def test_one_failing_key_decides_no_other_keys_verdict() -> None:
    names = [f"k{i}" for i in range(64)]
    store = FakeStore(set(names[::2]), {"k5": 3})
    engine = _engine(store)
    try:
        verdicts, answered, _, _ = engine.run(names, deadline_s=5)
        assert answered == 64 and verdicts == [i % 2 == 0 for i in range(64)]
        c = engine.counters.snapshot()
        # k5's chunk failed once whole, then the half holding k5, then its
        # quarter; each time the other part answered; then k5's eighth answered.
        assert c["failed_queries"] == 3 and c["retried_keys"] == 16 + 8 + 4, c
        assert c["queries"] == 4 + 2 + 2 + 2, c
        assert c["miss_failing"] == c["miss_in_flight"] == c["miss_not_started"] == c["shed"] == 0
    finally:
        engine.close()


def test_a_key_failing_past_the_deadline_is_miss_by_cause_and_the_rest_answer() -> None:
    names = [f"k{i}" for i in range(40)]
    store = FakeStore(set(names), {"k7": 10**9})
    engine = _engine(store)
    try:
        started = time.monotonic()
        verdicts, answered, _, _ = engine.run(names, deadline_s=0.3)
        assert time.monotonic() - started < 0.3 + 0.2
        assert answered == 39 and verdicts == [n != "k7" for n in names]
        assert engine.counters.snapshot()["miss_failing"] == 1
    finally:
        engine.close()


def test_the_deadline_stops_a_slow_store_and_counts_in_flight_and_not_started() -> None:
    names = [f"k{i}" for i in range(16 * 12)]
    store = FakeStore(set(names), {}, delay_s=0.25)
    engine = _engine(store, agents=2)
    try:
        started = time.monotonic()
        verdicts, answered, _, _ = engine.run(names, deadline_s=0.4)
        assert time.monotonic() - started < 0.4 + 0.2
        c = engine.counters.snapshot()
        # 2 agents: chunks 1-2 answered at 0.25 s, chunks 3-4 still running at 0.4 s.
        assert answered == 32 and sum(verdicts) == 32, c
        assert c["miss_in_flight"] == 32 and c["miss_not_started"] == 16 * 12 - 64, c
        time.sleep(0.3)
        assert max(store.sizes) == 16 and len(store.sizes) == 4, "a cancelled chunk was queried"
    finally:
        engine.close()


def test_queries_in_flight_are_bounded_by_the_pool() -> None:
    names = [f"k{i}" for i in range(16 * 20)]
    store = FakeStore(set(), {}, delay_s=0.02)
    engine = _engine(store, agents=3)
    try:
        for _ in range(2):
            threading.Thread(target=engine.run, args=(names, 5)).start()
        engine.run(names, 5)
        assert store.peak <= 3
    finally:
        engine.close()


def test_a_small_group_does_not_wait_behind_a_large_one() -> None:
    """Concurrent runs take turns on the pool: a 16-key group after a 2,000-key one is queried at once.

    With a first-come-first-served pool its one chunk waited for the large
    group's 125 chunks (about 125 * 0.01 s / 2 agents here).
    """
    big = [f"big{i}" for i in range(2000)]
    small = [f"small{i}" for i in range(16)]
    store = FakeStore(set(small), {}, delay_s=0.01)
    engine = _engine(store, agents=2)
    try:
        done: list[str] = []
        runner = threading.Thread(target=lambda: done.append(str(engine.run(big, 30).answered)))
        runner.start()
        while len(store.sizes) < 2:  # the large group is running, its chunks all queued
            time.sleep(0.001)
        queued_before = len(store.order)
        verdicts, answered, _, _ = engine.run(small, 30)
        assert answered == 16 and all(verdicts)
        position = store.order.index("small0") - queued_before
        # One turn: at most one chunk of the large group per agent goes first.
        assert position <= 2, (position, store.order[queued_before : queued_before + 6])
        assert not done, "the large group finished before the small one was served"
        runner.join()
        assert done == ["2000"]
    finally:
        engine.close()


def test_round_robin_serves_owners_in_turn_and_each_owner_in_order() -> None:
    from kvprobe.backends._fair_pool import RoundRobin

    queue: RoundRobin[str, int] = RoundRobin()
    for i in range(4):
        queue.put("a", i)
    queue.put("b", 10)
    queue.put("b", 11)
    queue.put("c", 20)
    taken = [queue.take() for _ in range(len(queue))]
    assert taken == [("a", 0), ("b", 10), ("c", 20), ("a", 1), ("b", 11), ("a", 2), ("a", 3)]
    with pytest.raises(IndexError):
        queue.take()


def test_closed_engine_refuses() -> None:
    engine = _engine(FakeStore(set(), {}))
    engine.close()
    with pytest.raises(RuntimeError, match="closed"):
        engine.run(["a"], 1)
    engine.close()


def test_retry_plan_on_a_virtual_clock() -> None:
    """RetryPlan alone: first chunks once, a failed chunk's keys retried in halves after their backoff."""
    import random

    from kvprobe.backends._obj_lookup import Chunk, RetryPlan

    plan = RetryPlan(40, 16, RetryPolicy(0.1, 1.0), random.Random(1), now=100.0, deadline_s=5.0)
    first = plan.due(100.0)
    assert first == [Chunk(0, 16, 0), Chunk(16, 32, 0), Chunk(32, 40, 0)] and plan.due(100.0) == []
    plan.answered(first[0], [{}] * 16)
    plan.answered(first[2], [None] * 8)
    plan.failed(first[1], 100.05, "throttled")
    ready = plan.next_retry_at()
    assert ready is not None and 100.05 + 0.05 <= ready <= 100.05 + 0.15  # base * U(0.5, 1.5)
    assert plan.due(ready - 1e-9) == []
    retries = []
    while len(retries) < 2:
        at = plan.next_retry_at()
        assert at is not None
        retries += plan.due(at)
    assert sorted(retries, key=lambda c: c.start) == [Chunk(16, 24, 1), Chunk(24, 32, 1)]
    answered_half, failing_half = sorted(retries, key=lambda c: c.start)
    plan.answered(answered_half, [{}] * 8)
    assert not plan.finished
    plan.failed(failing_half, 101.0, "reset")
    quarters = []
    while len(quarters) < 2:
        at = plan.next_retry_at()
        assert at is not None and at >= 101.0 + 0.1  # attempt 1: base * 2 * U(0.5, 1.5)
        quarters += plan.due(at)
    assert sorted(quarters, key=lambda c: c.start) == [Chunk(24, 28, 2), Chunk(28, 32, 2)]
    verdicts, answered, counts = plan.settle(in_flight=[])
    assert answered == 32
    assert verdicts == [i < 24 for i in range(40)]
    assert counts["failed_throttled"] == 1 and counts["failed_reset"] == 1 and counts["miss_failing"] == 8
    assert counts["retried_keys"] == 16 + 8 and counts["queries"] == 3 + 2


def test_retry_parts_are_no_larger_than_asked_and_a_single_key_is_retried_alone() -> None:
    import random

    from kvprobe.backends._obj_lookup import Chunk, RetryPlan

    plan = RetryPlan(16, 16, RetryPolicy(0.1, 1.0), random.Random(1), now=0.0, deadline_s=5.0)
    (chunk,) = plan.due(0.0)
    plan.failed(chunk, 0.0, "other", part=3)
    parts = plan.due(10.0)
    assert sorted((c.start, c.stop) for c in parts) == [(0, 3), (3, 6), (6, 9), (9, 12), (12, 15), (15, 16)]
    single = next(c for c in parts if c.start == 15)
    plan.failed(single, 10.0, "other", part=8)
    assert plan.due(20.0) == [Chunk(15, 16, 2)]


def test_query_size_halves_on_failure_and_grows_after_full_successes() -> None:
    from kvprobe.backends._obj_lookup import QuerySize

    size = QuerySize(16)
    size.failed(16)
    assert size.size == 8
    size.answered(4)  # a smaller query than the size says nothing about it
    assert size.size == 8
    size.answered(8)
    assert size.size == 9
    size.failed(3)
    assert size.size == 2
    for _ in range(40):
        size.answered(size.size)
    assert size.size == 16
    for _ in range(10):
        size.failed(1)
    assert size.size == 1


def test_a_failed_query_keeps_the_pool_busy_with_large_parts_not_single_keys() -> None:
    """Issue 27: a failed chunk's keys were retried one per query (4 agents: 4 HEADs in flight, not 64)."""
    names = [f"k{i}" for i in range(16)]
    store = FakeStore(set(names), {"k0": 1})  # the whole chunk fails once
    engine = _engine(store)
    try:
        verdicts, answered, _, _ = engine.run(names, deadline_s=5)
        assert answered == 16 and all(verdicts)
        assert store.sizes == [16, 8, 8], store.sizes
    finally:
        engine.close()


def test_no_retry_plan_leaves_a_failed_chunk_missing() -> None:
    import random

    from kvprobe.backends._obj_lookup import RetryPlan

    plan = RetryPlan(4, 16, None, random.Random(1), now=0.0, deadline_s=1.0)
    (chunk,) = plan.due(0.0)
    plan.failed(chunk, 0.01)
    assert plan.next_retry_at() is None and plan.due(10.0) == []
    verdicts, answered, counts = plan.settle([])
    assert verdicts == [False] * 4 and answered == 0 and counts["miss_failing"] == 4 and counts["failed_other"] == 1


def test_failures_are_classified_from_boto3_errors_and_nixl_timing() -> None:
    pytest.importorskip("botocore")
    from botocore.exceptions import ClientError, ConnectionClosedError, ReadTimeoutError

    from kvprobe.backends.nixl_obj import classify_failure

    def client_error(status: int, code: str) -> ClientError:
        return ClientError({"Error": {"Code": code}, "ResponseMetadata": {"HTTPStatusCode": status}}, "HeadObject")

    assert classify_failure(client_error(503, "503"), 0.01) == "throttled"
    assert classify_failure(client_error(503, "SlowDown"), 0.01) == "throttled"
    assert classify_failure(client_error(500, "500"), 0.01) == "server_error"
    assert classify_failure(client_error(403, "403"), 0.01) == "other"
    assert classify_failure(ConnectionClosedError(endpoint_url="http://x"), 0.01) == "reset"
    assert classify_failure(ReadTimeoutError(endpoint_url="http://x"), 2.0) == "timed_out"
    nixl = RuntimeError("NIXL_ERR_BACKEND")
    assert classify_failure(nixl, 0.05) == "other" and classify_failure(nixl, 3.01) == "timed_out"


def test_later_retries_go_through_query_one_and_their_failures_are_classified() -> None:
    names = [f"k{i}" for i in range(32)]
    # k5's chunk, half, quarter and eighth fail (attempts 0-3); then k4 and
    # k5 are single keys at attempt 4, through query_one.
    store = FakeStore(set(names), {"k5": 4})
    single: list[str] = []
    fails = {"k5": 1}  # query_one fails once for k5, and answers

    def query_one(name: str) -> Any:
        single.append(name)
        if fails.get(name, 0) > 0:
            fails[name] -= 1
            raise ConnectionResetError("reset by peer")
        return {} if name in store.stored else None

    def classify(exc: BaseException, elapsed_s: float) -> str:
        return "reset" if isinstance(exc, ConnectionResetError) else "other"

    engine = _engine(store, query_one=query_one, classify=classify)
    try:
        verdicts, answered, _, _ = engine.run(names, deadline_s=5)
        assert answered == 32 and all(verdicts)
        assert sorted(single) == ["k4", "k5", "k5"]  # attempts 4 (both) and 5 (k5): multi-key retries stayed on query
        c = engine.counters.snapshot()
        assert c["failed_other"] == 4 and c["failed_reset"] == 1 and c["failed_queries"] == 5, c
    finally:
        engine.close()
