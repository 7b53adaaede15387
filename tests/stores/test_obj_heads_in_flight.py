"""Issue 39: the object backend's HEADs in flight do not collapse when failures shrink its queries.

NIXL fails a whole query when one of its HEADs fails, so under a random
loss of 20 % the backend's queries shrink to 1 or 2 keys.  With the pool
counting queries (4 agents), that left 8 HEADs in flight where 64 are
allowed, and a run of 2,000 keys could not fit its retries in the deadline
(94.1 % of the stored keys True in one real run).  The pool counts HEADs
now: small queries run many at once, large ones few, never more than
``num_threads`` HEADs in flight.

The concurrency is read from counts: a barrier in the fake store holds
each small query until ``parties`` of them run at once (its timeout only
keeps a failing run from hanging; nothing is timed).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import pytest
from integ_harness import requires_nixl

from kvprobe.backends._fair_pool import FairPool


class _ShrinkingStore:
    """Fails every query of more than ``small`` keys; holds each small one at a barrier of ``parties``.

    Records the most queries and HEADs it saw in flight at once.
    """

    def __init__(self, small: int, parties: int) -> None:
        self.small = small
        self.barrier = threading.Barrier(parties)
        self._lock = threading.Lock()
        self.queries = self.heads = 0
        self.peak_queries = self.peak_heads = 0

    def query(self, names: Sequence[str]) -> list[Any]:
        with self._lock:
            self.queries += 1
            self.heads += len(names)
            self.peak_queries = max(self.peak_queries, self.queries)
            self.peak_heads = max(self.peak_heads, self.heads)
        try:
            if len(names) > self.small:
                raise RuntimeError("NIXL_ERR_BACKEND")  # one HEAD of it failed: the query fails whole
            try:
                self.barrier.wait(timeout=3.0)
            except threading.BrokenBarrierError:
                pass  # fewer than `parties` ever ran at once: the peak says so
            return [{} for _ in names]
        finally:
            with self._lock:
                self.queries -= 1
                self.heads -= len(names)


@requires_nixl
def test_the_backend_runs_more_queries_at_once_when_failures_shrink_them() -> None:
    from kvprobe.backends.nixl_obj import NixlObjBackend

    # 16 queries of 2 keys must run at once: 32 HEADs (of 64 allowed); with
    # 4 agents (the pool counting queries) at most 8 did.
    store = _ShrinkingStore(small=2, parties=16)
    backend = NixlObjBackend("kvblocks", endpoint_url="http://127.0.0.1:9", check=False, pace_scope="process")
    try:
        engine = backend._engine
        engine._query = store.query  # the fake store in place of NIXL
        engine._query_one = None
        engine.pacer = None  # the pool alone is under test
        keys = [f"k{i}".encode() for i in range(400)]
        verdicts = backend.batch_lookup(keys, None)
        assert store.peak_queries >= 16, (store.peak_queries, store.peak_heads)
        assert store.peak_heads <= backend.num_threads, store.peak_heads
        assert all(verdicts), verdicts.count(False)
    finally:
        backend.close()


def test_a_weighted_pool_never_runs_more_weight_than_its_capacity() -> None:
    """Tasks of weight 16 run 4 at a time under a capacity of 64, though 16 threads are free."""
    pool = FairPool(16, "test-weight", capacity=64)
    lock = threading.Lock()
    running = [0, 0]  # weight now, peak
    gate = threading.Barrier(4)

    def task(weight: int) -> int:
        with lock:
            running[0] += weight
            running[1] = max(running[1], running[0])
        try:
            gate.wait(timeout=3.0)  # 4 at once fill the capacity; a fifth would break nothing but the peak
        except threading.BrokenBarrierError:
            pass
        with lock:
            running[0] -= weight
        return weight

    try:
        futures = [pool.submit("caller", task, 16, weight=16) for _ in range(12)]
        assert sum(f.result(timeout=30) for f in futures) == 12 * 16
        assert running[1] == 64, running
    finally:
        pool.shutdown()


def test_a_task_heavier_than_the_capacity_still_runs() -> None:
    """It runs when nothing else does (else it would wait for ever)."""
    pool = FairPool(4, "test-heavy", capacity=8)
    order: list[str] = []
    try:
        futures = [pool.submit(owner, order.append, owner, weight=w) for owner, w in (("a", 20), ("b", 1))]
        for f in futures:
            f.result(timeout=30)
        assert sorted(order) == ["a", "b"]
    finally:
        pool.shutdown()


def test_a_pool_refuses_a_capacity_below_one() -> None:
    with pytest.raises(ValueError, match="capacity"):
        FairPool(2, "test-bad", capacity=0)
