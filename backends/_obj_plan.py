"""The object store lookup engine's policy, without threads, clocks or I/O (see :mod:`kvprobe.backends._obj_lookup`).

:class:`RetryPlan` decides, for one call, which chunks of names to query when,
what an answer or a failure means, and what counts at the deadline;
:class:`QuerySize` sizes queries from the outcomes so far; :class:`LookupCounters`
sums what the calls did.  :class:`~kvprobe.backends._obj_lookup.ChunkedLookup`
drives them with threads and ``time.monotonic``; the fleet simulator
(``python -m bench.fleet``) drives the same objects on a virtual clock.
"""

from __future__ import annotations

import heapq
import random
import threading
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

__all__ = [
    "FAILED_OTHER",
    "FAILURE_CAUSES",
    "Chunk",
    "LookupCounters",
    "QuerySize",
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
    before their chunk could start (the pool was busy); ``shed``: MISS at
    once, never asked, because the store's pace could not start their query
    before the deadline (a key that had failed and whose retry is given up
    so stays ``miss_failing``); ``paced_queries``: queries that waited for
    the pace.
    """

    calls: int = 0
    keys: int = 0
    queries: int = 0
    failed_queries: int = 0
    retried_keys: int = 0
    miss_failing: int = 0
    miss_in_flight: int = 0
    miss_not_started: int = 0
    shed: int = 0
    paced_queries: int = 0
    failed_throttled: int = 0
    failed_server_error: int = 0
    failed_reset: int = 0
    failed_timed_out: int = 0
    failed_other: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def add(self, **deltas: int) -> None:
        """Add to the named counters (each name a field)."""
        with self._lock:
            for name, value in deltas.items():
                setattr(self, name, getattr(self, name) + value)

    def snapshot(self) -> dict[str, int]:
        """Every counter, by name."""
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
    chunks to query now (or, to size each first query when it is sent,
    :meth:`due_retries` and :meth:`next_first`), reports each query's outcome
    with :meth:`answered` or :meth:`failed` (or gives chunks up with
    :meth:`shed` and :meth:`shed_unsent`), sleeps until :meth:`next_retry_at`
    or the next outcome, and at the deadline (or when :attr:`finished`) calls
    :meth:`settle`.

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
        self.shed_keys = [False] * n  # given up before the deadline: no query could start in time
        self.queries = self.failed_queries = self.retried = 0
        self.failures: Counter[str] = Counter()  # failed queries by cause
        self._rng = rng
        self.chunk = chunk
        self._unsent = 0  # names from here on have not been handed out for a first query
        self._retries: list[_Retry] = []
        self._open = n  # names neither answered nor shed

    @property
    def finished(self) -> bool:
        """Every name has an answer or was shed."""
        return self._open == 0

    def due(self, now: float) -> list[Chunk]:
        """The chunks to query now: the first chunks of ``chunk`` names (once), then the retries due."""
        out = []
        while (first := self.next_first(self.chunk)) is not None:
            out.append(first)
        return out + self.due_retries(now)

    def next_first(self, size: int) -> Chunk | None:
        """The next ``size`` names not yet queried, as a first chunk (None: every name was handed out)."""
        if self._unsent >= self.n:
            return None
        start, self._unsent = self._unsent, min(self.n, self._unsent + max(1, size))
        return Chunk(start, self._unsent, 0)

    @property
    def unsent(self) -> bool:
        """Some names were never handed out for a first query."""
        return self._unsent < self.n

    def due_retries(self, now: float) -> list[Chunk]:
        """The retries whose backoff has passed, earliest first."""
        out = []
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

    def failed(self, chunk: Chunk, now: float, cause: str = FAILED_OTHER, part: int | None = None) -> None:
        """A query of ``chunk`` failed (``cause``: one of :data:`FAILURE_CAUSES`): retry its keys in parts.

        ``part``: the most keys per retry (None: no limit); a part never
        exceeds half the chunk, so a key that keeps failing is isolated while
        the others are answered.  A single key is retried alone.
        """
        self.queries += 1
        self.failed_queries += 1
        self.failures[cause] += 1
        size = chunk.stop - chunk.start
        for i in range(chunk.start, chunk.stop):
            self.last_failed[i] = True
        if self.retry is None:
            return
        step = max(1, min(-(-size // 2), part if part is not None else size))
        for start in range(chunk.start, chunk.stop, step):
            ready = now + self.retry.delay(chunk.attempt, self._rng)
            heapq.heappush(self._retries, _Retry(ready, Chunk(start, min(chunk.stop, start + step), chunk.attempt + 1)))
        self.retried += size

    def shed(self, chunk: Chunk) -> None:
        """Give ``chunk`` up: its keys read as MISS (counted ``shed``) without waiting for the deadline."""
        for i in range(chunk.start, chunk.stop):
            if self.verdicts[i] is None and not self.shed_keys[i]:
                self.shed_keys[i] = True
                self._open -= 1

    def shed_unsent(self) -> None:
        """Give up every name not yet handed out for a first query."""
        if self.unsent:
            self.shed(Chunk(self._unsent, self.n, 0))
            self._unsent = self.n

    def settle(self, in_flight: Iterable[Chunk]) -> tuple[list[bool], int, dict[str, int]]:
        """The verdicts (``False`` for a name unanswered), how many names were answered, and the counts.

        ``in_flight``: chunks whose query was running when the call ended
        (their answers will be dropped).  The counts are the
        :class:`LookupCounters` fields this call adds to.
        """
        running = {i for c in in_flight for i in range(c.start, c.stop)}
        missing: Counter[str] = Counter()
        for i, verdict in enumerate(self.verdicts):
            if verdict is None:
                if self.last_failed[i]:  # its HEADs kept failing (a last retry may have been shed)
                    missing["miss_failing"] += 1
                elif self.shed_keys[i]:  # never asked: the pace could not start it in time
                    missing["shed"] += 1
                elif i in running:
                    missing["miss_in_flight"] += 1
                else:
                    missing["miss_not_started"] += 1
        counts = {
            "calls": 1,
            "keys": self.n,
            "queries": self.queries,
            "failed_queries": self.failed_queries,
            "retried_keys": self.retried,
            "miss_failing": missing["miss_failing"],
            "miss_in_flight": missing["miss_in_flight"],
            "miss_not_started": missing["miss_not_started"],
            "shed": missing["shed"],
        }
        for cause, count in self.failures.items():
            counts[f"failed_{cause}"] = count
        answered = sum(verdict is not None for verdict in self.verdicts)
        return [bool(v) for v in self.verdicts], answered, counts


class QuerySize:
    """How many keys one query asks for: halved by a failure, one more after a full-size success (pure).

    Args:
        top: the largest size (and the first).
    """

    def __init__(self, top: int) -> None:
        self.top = top
        self.size = top

    def answered(self, keys: int) -> None:
        """A query of ``keys`` keys answered."""
        if keys >= self.size:
            self.size = min(self.top, self.size + 1)

    def failed(self, keys: int) -> None:
        """A query of ``keys`` keys failed (not a timeout: a slow store fails every size alike)."""
        self.size = max(1, min(self.size, -(-keys // 2)))
