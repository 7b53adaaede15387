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
  concurrent groups take **turns** on the pool (round robin, not first come
  first served), so a small group waits for at most one chunk of each
  larger group ahead of it;
* a chunk that fails is **split into single keys**, each retried (from its
  second retry on through ``query_one`` when given: a client that reports
  why a request failed, slower than NIXL) after a
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
its policy is testable without a store.  The policy itself (which chunks to
query when, what an answer or a failure means, what counts at the deadline)
is :class:`RetryPlan`, which has no clock and no I/O: :class:`ChunkedLookup`
drives it with threads and ``time.monotonic``, and the fleet simulator
(``python -m bench.fleet``) drives the same object on a virtual clock.
"""

from __future__ import annotations

import heapq
import random
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, wait
from dataclasses import dataclass, field
from typing import Any

from kvprobe.backends._fair_pool import FairPool

__all__ = [
    "FAILED_OTHER",
    "FAILURE_CAUSES",
    "Chunk",
    "ChunkedLookup",
    "LookupCounters",
    "RetryPlan",
    "RetryPolicy",
]

#: Why a query failed, as counted in ``failed_<cause>``: a ``503 SlowDown``,
#: another 5xx answer, a connection reset, a request that timed out, or a
#: failure whose cause the client does not report (NIXL raises one
#: ``NIXL_ERR_BACKEND`` for all of the first three).
FAILURE_CAUSES = ("throttled", "server_error", "reset", "timed_out", "other")
FAILED_OTHER = "other"


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
    failed_throttled: int = 0
    failed_server_error: int = 0
    failed_reset: int = 0
    failed_timed_out: int = 0
    failed_other: int = 0
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
    chunk: Chunk = field(compare=False)


@dataclass(frozen=True)
class Chunk:
    """Names ``start:stop`` of a call, queried together; ``attempt`` 0 is the first query."""

    start: int
    stop: int
    attempt: int


class RetryPlan:
    """The retry policy of one call, without I/O or clocks: which chunks to query when, and what answers mean.

    A driver (the thread pool of :class:`ChunkedLookup`, or the fleet
    simulator's virtual clock in ``bench.fleet``) asks :meth:`due` for the
    chunks to query now, reports each query's outcome with :meth:`answered`
    or :meth:`failed`, sleeps until :meth:`next_retry_at` or the next outcome,
    and at the deadline (or when :attr:`finished`) calls :meth:`settle`.

    Args:
        n: names in the call.
        chunk: names per first query.
        retry: backoff of a failed chunk's keys; None: a failed chunk's keys
            are never retried (they read as MISS at the deadline).
        rng: draws the jitter.
        now, deadline_s: the call's start and how long it may take
            (:attr:`end` is the deadline's time on the driver's clock).
    """

    def __init__(
        self, n: int, chunk: int, retry: RetryPolicy | None, rng: random.Random, now: float, deadline_s: float
    ) -> None:
        self.n = n
        self.retry = retry
        self.end = now + deadline_s
        self.verdicts: list[bool | None] = [None] * n
        self.last_failed = [False] * n  # True while a key's latest query failed
        self.queries = self.failed_queries = self.retried = 0
        self.failures: Counter[str] = Counter()  # failed queries by cause
        self._rng = rng
        self._first = [Chunk(start, min(n, start + chunk), 0) for start in range(0, n, chunk)]
        self._retries: list[_Retry] = []
        self._open = n  # names without an answer

    @property
    def finished(self) -> bool:
        """Every name has an answer."""
        return self._open == 0

    def due(self, now: float) -> list[Chunk]:
        """The chunks to query now: the first chunks (once), then retries whose backoff has passed."""
        out, self._first = self._first, []
        while self._retries and self._retries[0].ready_at <= now:
            out.append(heapq.heappop(self._retries).chunk)
        return out

    def next_retry_at(self) -> float | None:
        """When the earliest pending retry becomes due (None: no retry pending)."""
        return self._retries[0].ready_at if self._retries else None

    def answered(self, chunk: Chunk, answers: Sequence[object]) -> None:
        """A query of ``chunk`` answered: ``None`` means absent, anything else stored."""
        self.queries += 1
        verdicts, last_failed = self.verdicts, self.last_failed
        for i, answer in enumerate(answers, chunk.start):
            if verdicts[i] is None:
                self._open -= 1
            verdicts[i] = answer is not None
            last_failed[i] = False

    def failed(self, chunk: Chunk, now: float, cause: str = FAILED_OTHER) -> None:
        """A query of ``chunk`` failed (``cause``: one of :data:`FAILURE_CAUSES`): retry each key alone."""
        self.queries += 1
        self.failed_queries += 1
        self.failures[cause] += 1
        for i in range(chunk.start, chunk.stop):
            self.last_failed[i] = True
        if self.retry is None:
            return
        for i in range(chunk.start, chunk.stop):
            ready = now + self.retry.delay(chunk.attempt, self._rng)
            heapq.heappush(self._retries, _Retry(ready, Chunk(i, i + 1, chunk.attempt + 1)))
        self.retried += chunk.stop - chunk.start

    def settle(self, in_flight: Iterable[Chunk]) -> tuple[list[bool], int, dict[str, int]]:
        """The verdicts (``False`` for a name unanswered), how many names were answered, and the counts.

        ``in_flight``: chunks whose query was running when the call ended
        (their answers will be dropped).  The counts are the
        :class:`LookupCounters` fields this call adds to.
        """
        running = {i for c in in_flight for i in range(c.start, c.stop)}
        miss_failing = miss_in_flight = miss_not_started = 0
        for i, verdict in enumerate(self.verdicts):
            if verdict is None:
                if self.last_failed[i]:
                    miss_failing += 1
                elif i in running:
                    miss_in_flight += 1
                else:
                    miss_not_started += 1
        counts = {
            "calls": 1,
            "keys": self.n,
            "queries": self.queries,
            "failed_queries": self.failed_queries,
            "retried_keys": self.retried,
            "miss_failing": miss_failing,
            "miss_in_flight": miss_in_flight,
            "miss_not_started": miss_not_started,
        }
        for cause, count in self.failures.items():
            counts[f"failed_{cause}"] = count
        return [bool(v) for v in self.verdicts], self.n - self._open, counts


class ChunkedLookup:
    """Runs ``query`` over chunks of a call's names on a bounded pool, with retries, inside a deadline.

    Args:
        query: ``query(names) -> list`` with one answer per name (``None``
            for absent), raising if any name's lookup failed.  It is called
            from the pool's threads, at most ``agents`` at a time.
        agents: pool threads (concurrent queries).
        chunk: names per first query.
        retry: backoff policy (None: a failed chunk's keys are not retried).
        seed: for the jitter (None: from the OS).
        classify: ``classify(exc, elapsed_s) -> cause`` (one of
            :data:`FAILURE_CAUSES`) for a failed query; by default every
            failure is ``other``.
        query_one: ``query_one(name) -> answer`` (``None`` for absent,
            raising on failure) for the retries of a single name from
            attempt ``query_one_from`` on: a client that tells why a request
            failed (the object backend uses boto3, whose errors carry the
            HTTP status) makes the causes of persistent failures countable.
            None: every query goes through ``query``.
        query_one_from: the first attempt sent through ``query_one`` (the
            first retry stays on ``query``, the fast path: under light
            throttling most keys succeed there, and boto3 costs Python CPU
            per request).
    """

    def __init__(
        self,
        query: Callable[[Sequence[str]], list[Any]],
        *,
        agents: int,
        chunk: int,
        retry: RetryPolicy | None,
        seed: int | None = None,
        classify: Callable[[BaseException, float], str] | None = None,
        query_one: Callable[[str], Any] | None = None,
        query_one_from: int = 2,
    ) -> None:
        self._query = query
        self._query_one = query_one
        self._query_one_from = query_one_from
        self.classify = classify or _unknown_cause
        self.chunk = chunk
        self.retry = retry
        self.counters = LookupCounters()
        self._rng = random.Random(seed)
        # Concurrent runs take turns on the pool (not FIFO): a small group
        # never waits behind every chunk of a large one (see _fair_pool).
        self._pool = FairPool(agents, "kvprobe-obj")
        self._closed = False

    def run(self, names: Sequence[str], deadline_s: float) -> tuple[list[bool], int]:
        """One verdict per name (``False`` for a name unanswered at the deadline), and how many were answered.

        Raises:
            RuntimeError: the engine is closed.
        """
        if self._closed:
            raise RuntimeError("the object backend was closed")
        plan = RetryPlan(len(names), self.chunk, self.retry, self._rng, time.monotonic(), deadline_s)
        cancelled = threading.Event()
        running: dict[Future[list[Any]], tuple[Chunk, float]] = {}
        while True:
            now = time.monotonic()
            for chunk in plan.due(now):
                single = chunk.attempt >= self._query_one_from and chunk.stop - chunk.start == 1
                future = self._pool.submit(plan, self._guarded, cancelled, names[chunk.start : chunk.stop], single)
                running[future] = (chunk, now)
            if now >= plan.end or plan.finished or not (running or plan.next_retry_at() is not None):
                break
            timeout = plan.end - now
            ready_at = plan.next_retry_at()
            if ready_at is not None:
                timeout = min(timeout, max(0.0, ready_at - now))
            if not running:
                time.sleep(timeout)
                continue
            done, _ = wait(running, timeout=timeout, return_when=FIRST_COMPLETED)
            for future in done:
                chunk, started = running.pop(future)
                if future.cancelled():
                    continue
                exc = future.exception()
                if isinstance(exc, _NotRun):
                    continue
                if exc is None:
                    plan.answered(chunk, future.result())
                else:
                    plan.failed(chunk, time.monotonic(), self.classify(exc, time.monotonic() - started))
        # The deadline (or every key answered): stop what has not started.
        cancelled.set()
        in_flight = [chunk for future, (chunk, _) in running.items() if not future.cancel()]
        verdicts, answered, counts = plan.settle(in_flight)
        self.counters.add(**counts)
        return verdicts, answered

    def _guarded(self, cancelled: threading.Event, names: Sequence[str], single: bool) -> list[Any]:
        if cancelled.is_set():
            raise _NotRun
        if single and self._query_one is not None:
            return [self._query_one(names[0])]
        answers = self._query(names)
        if len(answers) != len(names):
            raise RuntimeError(f"NIXL OBJ answered {len(answers)} results for {len(names)} objects")
        return answers

    def close(self) -> None:
        """Cancel queued chunks and let the pool's threads end (a running query finishes first).  Idempotent."""
        self._closed = True
        self._pool.shutdown()


def _unknown_cause(exc: BaseException, elapsed_s: float) -> str:
    del exc, elapsed_s
    return FAILED_OTHER


class _NotRun(Exception):
    """A chunk whose call had already returned when its turn came."""
