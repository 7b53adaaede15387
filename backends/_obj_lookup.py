"""The object store's lookup engine: chunked NIXL queries, retried per chunk, inside a deadline.

Why (theory of operation).  One NIXL OBJ ``query_memory`` call fails as a
whole when any one of its HEADs fails (``503 SlowDown``, ``500``, a reset, a
timeout), and tells nothing about which key failed; and one NIXL agent keeps
about 25 HEADs in flight whatever its ``num_threads`` says (the AWS C++ SDK's
default connection limit).  So a group is never one call:

* the keys are cut into **chunks** of ``agent_threads`` keys (one round of
  parallel HEADs on one agent), run on a shared pool of ``agents`` threads,
  each thread querying with its own NIXL agent: ``agents * agent_threads``
  HEADs in flight per backend, whatever the number of concurrent groups;
* a chunk that fails is **split into single keys**, each retried after a
  **jittered exponential backoff** (``base * 2**attempt``,
  capped, times a uniform factor in [0.5, 1.5]), so one key's failing HEAD
  never decides another key's verdict: retried alone, each key gets its own
  answer (splitting re-sends no more HEADs than retrying the chunk whole,
  and settles every key in one more round);
* everything happens inside the call's **deadline**: at the deadline the
  chunks not yet started are cancelled, the call returns, and each key still
  without an answer reads as MISS, counted by cause.  A call never outlives
  its deadline by more than a scheduling delay, so the manager's
  ``lookup_timeout_s`` (set above it) never strands a caller thread.  A HEAD
  already on the wire finishes in its pool thread (the SDK's own request
  timeout bounds it); its answer is dropped.

This module is pure Python around one callable ``query(names) -> list`` so
its policy is testable without a store.
"""

from __future__ import annotations

import heapq
import random
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Any

__all__ = ["ChunkedLookup", "LookupCounters", "RetryPolicy"]


@dataclass(frozen=True)
class RetryPolicy:
    """Backoff of failed chunks: ``min(cap_s, base_s * 2**attempt) * uniform(0.5, 1.5)``."""

    base_s: float = 0.02
    cap_s: float = 0.5

    def delay(self, attempt: int, rng: random.Random) -> float:
        return float(min(self.cap_s, self.base_s * (2 ** min(attempt, 30))) * rng.uniform(0.5, 1.5))


@dataclass
class LookupCounters:
    """What the object backend's lookups did, summed over calls (read with ``snapshot``).

    ``failed_queries``: NIXL queries that raised (an error answer for at least
    one HEAD: throttling ``503``, ``500``, a reset, ``403``... NIXL does not
    say which); ``retried_keys``: key lookups issued again after such a
    failure; ``miss_failing``: keys answered MISS because their last query
    failed and the deadline came before a retry answered; ``miss_in_flight``:
    MISS because their query was still running at the deadline (a slow or
    frozen server); ``miss_not_started``: MISS because the deadline came
    before their chunk could start (the pool was busy).
    """

    calls: int = 0
    keys: int = 0
    queries: int = 0
    failed_queries: int = 0
    retried_keys: int = 0
    miss_failing: int = 0
    miss_in_flight: int = 0
    miss_not_started: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def add(self, **deltas: int) -> None:
        with self._lock:
            for name, value in deltas.items():
                setattr(self, name, getattr(self, name) + value)

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return {name: getattr(self, name) for name in self.__dataclass_fields__ if not name.startswith("_")}


@dataclass(order=True)
class _Retry:
    ready_at: float
    attempt: int
    start: int = field(compare=False)
    stop: int = field(compare=False)


class ChunkedLookup:
    """Runs ``query`` over chunks of a call's names on a bounded pool, with retries, inside a deadline.

    Args:
        query: ``query(names) -> list`` with one answer per name (``None``
            for absent), raising if any name's lookup failed.  It is called
            from the pool's threads, at most ``agents`` at a time.
        agents: pool threads (concurrent queries).
        chunk: names per first query.
        retry: backoff policy.
        seed: for the jitter (None: from the OS).
    """

    def __init__(
        self,
        query: Callable[[Sequence[str]], list[Any]],
        *,
        agents: int,
        chunk: int,
        retry: RetryPolicy,
        seed: int | None = None,
    ) -> None:
        self._query = query
        self.chunk = chunk
        self.retry = retry
        self.counters = LookupCounters()
        self._rng = random.Random(seed)
        self._pool = ThreadPoolExecutor(max_workers=agents, thread_name_prefix="kvprobe-obj")
        self._closed = False

    def run(self, names: Sequence[str], deadline_s: float) -> tuple[list[bool], int]:
        """One verdict per name (``False`` for a name unanswered at the deadline), and how many were answered.

        Raises:
            RuntimeError: the engine is closed.
        """
        if self._closed:
            raise RuntimeError("the object backend was closed")
        end = time.monotonic() + deadline_s
        n = len(names)
        verdicts: list[bool | None] = [None] * n
        cancelled = threading.Event()
        running: dict[Future[list[Any]], tuple[int, int, int]] = {}
        retries: list[_Retry] = []
        last_failed = [False] * n  # True while a key's latest query failed

        def submit(start: int, stop: int, attempt: int) -> None:
            future = self._pool.submit(self._guarded, cancelled, names[start:stop])
            running[future] = (start, stop, attempt)

        for start in range(0, n, self.chunk):
            submit(start, min(n, start + self.chunk), 0)
        queries = failed = retried = 0
        while running or retries:
            now = time.monotonic()
            while retries and retries[0].ready_at <= now:
                r = heapq.heappop(retries)
                submit(r.start, r.stop, r.attempt)
            if now >= end:
                break
            timeout = end - now
            if retries:
                timeout = min(timeout, max(0.0, retries[0].ready_at - now))
            if not running:
                time.sleep(timeout)
                continue
            done, _ = wait(running, timeout=timeout, return_when=FIRST_COMPLETED)
            for future in done:
                start, stop, attempt = running.pop(future)
                if future.cancelled():
                    continue
                exc = future.exception()
                if isinstance(exc, _NotRun):
                    continue
                queries += 1
                if exc is None:
                    for i, answer in enumerate(future.result(), start):
                        verdicts[i] = answer is not None
                        last_failed[i] = False
                    continue
                failed += 1
                for i in range(start, stop):
                    last_failed[i] = True
                for i in range(start, stop):
                    ready = time.monotonic() + self.retry.delay(attempt, self._rng)
                    heapq.heappush(retries, _Retry(ready, attempt + 1, i, i + 1))
                retried += stop - start
        # The deadline (or every key answered): stop what has not started.
        cancelled.set()
        in_flight: set[int] = set()
        for future, (start, stop, _) in running.items():
            if not future.cancel():  # already running (or just finished: its answer is late)
                in_flight.update(range(start, stop))
        miss_failing = miss_in_flight = miss_not_started = 0
        for i, verdict in enumerate(verdicts):
            if verdict is None:
                if i in in_flight and not last_failed[i]:
                    miss_in_flight += 1
                elif last_failed[i]:
                    miss_failing += 1
                else:
                    miss_not_started += 1
        answered = sum(v is not None for v in verdicts)
        self.counters.add(
            calls=1,
            keys=n,
            queries=queries,
            failed_queries=failed,
            retried_keys=retried,
            miss_failing=miss_failing,
            miss_in_flight=miss_in_flight,
            miss_not_started=miss_not_started,
        )
        return [bool(v) for v in verdicts], answered

    def _guarded(self, cancelled: threading.Event, names: Sequence[str]) -> list[Any]:
        if cancelled.is_set():
            raise _NotRun
        answers = self._query(names)
        if len(answers) != len(names):
            raise RuntimeError(f"NIXL OBJ answered {len(answers)} results for {len(names)} objects")
        return answers

    def close(self) -> None:
        """Cancel queued chunks and let the pool's threads end (a running query finishes first).  Idempotent."""
        self._closed = True
        self._pool.shutdown(wait=False, cancel_futures=True)


class _NotRun(Exception):
    """A chunk whose call had already returned when its turn came."""
