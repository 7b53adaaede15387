"""Small queries run more at once: the HEADs in flight stay at ``agents * chunk`` while queries shrink.

Issue 39: under 20 % random 503s a NIXL query fails whole with any one of
its HEADs, so queries shrink to about 2 keys; with the pool still running
``agents`` queries at once, 8 HEADs were in flight instead of 64, and a
loaded host's run outlasted its deadline (keys answered MISS,
``miss_failing``).  A fake store, no NIXL: counts, not times.
"""

from __future__ import annotations

import threading
from typing import Any

from obj_fakes import FakeStore

from kvprobe.backends._obj_lookup import ChunkedLookup, RetryPolicy


def _engine(store: FakeStore, **kw: Any) -> ChunkedLookup:
    options: dict[str, Any] = {"agents": 2, "chunk": 8, "retry": RetryPolicy(0.001, 0.01), "seed": 3}
    options.update(kw)
    return ChunkedLookup(store.query, **options)


def _shrink_to(engine: ChunkedLookup, size: int) -> None:
    """Queries of ``size`` keys, as failures would leave them (a failed query of 2 * size keys halves it)."""
    while engine.query_size() > size:
        engine.sizes.failed(2 * size)


def test_queries_shrunk_by_failures_run_more_at_once_within_the_heads_budget() -> None:
    names = [f"k{i}" for i in range(96)]
    store = FakeStore(set(names[::3]), {}, delay_s=0.2)  # the first 8 queries all start before one ends
    engine = _engine(store, max_queries=8)
    try:
        _shrink_to(engine, 2)
        verdicts, answered, _, _ = engine.run(names, deadline_s=10)
        assert answered == 96 and verdicts == [i % 3 == 0 for i in range(96)]
        # 2 agents of 8 HEADs: 16 HEADs in flight, in 8 queries of 2 (not 2 queries of 2).
        assert store.peak == 8, store.peak
        assert store.peak_names == 16, store.peak_names
    finally:
        engine.close()


def test_full_size_queries_keep_to_the_agents_and_the_heads_budget_holds_across_calls() -> None:
    names = [f"k{i}" for i in range(8 * 12)]
    store = FakeStore(set(), {}, delay_s=0.02)
    engine = _engine(store, max_queries=8)
    try:
        others = [threading.Thread(target=engine.run, args=(names, 5)) for _ in range(3)]
        for t in others:
            t.start()
        engine.run(names, 5)
        for t in others:
            t.join()
        assert store.peak <= 2 and store.peak_names <= 16, (store.peak, store.peak_names)
    finally:
        engine.close()


def test_small_queries_of_concurrent_calls_share_one_heads_budget() -> None:
    names = [f"k{i}" for i in range(64)]
    store = FakeStore(set(), {}, delay_s=0.1)
    engine = _engine(store, max_queries=8)
    try:
        _shrink_to(engine, 1)
        others = [threading.Thread(target=engine.run, args=(names, 5)) for _ in range(3)]
        for t in others:
            t.start()
        engine.run(names, 5)
        for t in others:
            t.join()
        # 4 calls of 1-key queries (growing by one key after each full-size
        # success): 8 queries at once at most, 16 names in them, not 4 x 16.
        assert store.peak == 8 and store.peak_names <= 16, (store.peak, store.peak_names)
    finally:
        engine.close()
