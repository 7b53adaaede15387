"""The object store's lookup engine: chunked NIXL queries, retried per chunk, inside a deadline.

Why (theory of operation).  One NIXL OBJ ``query_memory`` call fails as a
whole when any one of its HEADs fails (``503 SlowDown``, ``500``, a reset, a
timeout), and tells nothing about which key failed; and one NIXL agent keeps
about 25 HEADs in flight whatever its ``num_threads`` says (the AWS C++ SDK's
default connection limit).  So a group is never one call:

* the keys are cut into **chunks** of at most ``agent_threads`` keys (one
  round of parallel HEADs on one agent), run on a shared pool of threads,
  each thread querying with its own NIXL agent.  The pool counts **HEADs**,
  not queries: at most ``heads`` HEADs in flight per backend, whatever the
  number of concurrent groups, in at most ``agents`` queries.  When queries
  shrink (below), more of them run at once, so the HEADs in flight do not
  shrink with them: 4 queries of 2 keys would leave 8 HEADs in flight where
  64 are allowed, and under a random loss of 20 % the retries would not fit
  the deadline.  Concurrent groups take **turns** on the pool (round robin,
  not first come first served), so a small group waits for at most one
  chunk of each larger group ahead of it;
* a chunk that fails is **split** and only its parts are retried, after a
  **jittered exponential backoff** (``base * 2**attempt``, capped, times a
  uniform factor in [0.5, 1.5]).  NIXL keeps no answer of a failed query
  (the store answered, and billed, its other HEADs), so the size of a query
  **adapts** (:class:`QuerySize`): it halves after a failure and grows by one
  key after a full-size success, and a failed query's keys are retried in
  parts of that size, at most half of it.  Under rare failures a query stays
  large (few queries, every pool thread carrying many HEADs, as the first
  round did); under frequent ones queries shrink until most succeed, so
  fewer answers are lost with each failure, and a key that keeps failing is
  isolated in ``log2(size)`` rounds while the keys around it are answered.
  A single key's retries from attempt ``query_one_from`` on go through
  ``query_one`` when given (a client that reports why a request failed);
* every query waits for the **pace** of the store
  (:mod:`kvprobe.backends._pacing`): a rate shared with every other call,
  backend and manager of the process on the same store, adjusted to the
  store's throttling.  A call reserves its next query's HEADs when it is
  about to submit it, one reservation ahead at a time, so concurrent calls
  interleave; a query the pace cannot start before the deadline (less a
  query's usual duration, at most half the call's time) is **shed**: its keys, and the call's other
  queries not yet started, are answered MISS at once and counted, instead
  of waiting for the deadline;
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
is :class:`~kvprobe.backends._obj_plan.RetryPlan`, which has no clock and no
I/O (re-exported here with the rest of :mod:`kvprobe.backends._obj_plan`),
and so are :class:`~kvprobe.backends._obj_plan.QuerySize` and the pace's
:class:`~kvprobe.backends._pacing.PaceCore`:
:class:`ChunkedLookup` drives them with threads and ``time.monotonic``, and
the fleet simulator (``python -m bench.fleet``) drives the same objects on a
virtual clock.  Each failed query is logged at DEBUG on this module's logger
(``kvprobe.backends._obj_lookup``), with its size and cause.
"""

from __future__ import annotations

import logging
import math
import random
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, wait
from dataclasses import dataclass
from typing import Any, NamedTuple

from kvprobe.backends._fair_pool import FairPool
from kvprobe.backends._obj_plan import (
    FAILED_OTHER,
    FAILURE_CAUSES,
    Chunk,
    LookupCounters,
    QuerySize,
    RetryPlan,
    RetryPolicy,
)
from kvprobe.backends._pacing import Pacer

__all__ = [
    "DEADLINE_MARGIN_S",
    "FAILED_OTHER",
    "FAILURE_CAUSES",
    "Chunk",
    "ChunkedLookup",
    "LookupCounters",
    "QuerySize",
    "RetryPlan",
    "RetryPolicy",
    "RunResult",
    "deadline_under",
    "shed_margin",
    "usual_query_s",
]

_log = logging.getLogger(__name__)


def usual_query_s(previous_s: float, elapsed_s: float) -> float:
    """A successful query's usual duration, smoothed, after one more that took ``elapsed_s``."""
    return 0.8 * previous_s + 0.2 * elapsed_s


#: How long before the manager's lookup timeout a fitted call gives up (at
#: most a quarter of the timeout): time for the call to return its verdicts
#: and for the worker to deliver them before the timeout takes the group.
DEADLINE_MARGIN_S = 0.5


def deadline_under(timeout_s: float) -> float:
    """The longest deadline a call may have under a caller's timeout of ``timeout_s``: a margin less.

    Why: a deadline equal to the timeout makes the two race, and when the
    timeout wins, the keys the call did answer are lost with the rest.
    """
    return timeout_s - min(DEADLINE_MARGIN_S, timeout_s / 4)


def shed_margin(usual_s: float, deadline_s: float) -> float:
    """How long before a call's deadline its queries must start: their usual duration, at most half the call's time.

    At most half, so that a call's first query always starts unless the
    pace itself holds it back: durations are learnt only from queries that
    run, and a few slow ones (an outage's, answered at the thaw, just inside
    their deadline) would otherwise shed every later call whole, for ever,
    with nothing left to re-learn from.
    """
    return min(usual_s, deadline_s / 2)


class RunResult(NamedTuple):
    """A call's verdicts, how many names the store answered, how many were shed (MISS at once), and which were not.

    ``unanswered``: the indices of the names whose ``False`` is no answer of
    the store (shed, failing or unanswered at the deadline), as opposed to
    "not stored".
    """

    verdicts: list[bool]
    answered: int
    shed: int
    unanswered: frozenset[int]


@dataclass
class _Outcome:
    """One query as its pool thread saw it: when it ran, and its answers or its error."""

    started: float
    ended: float
    answers: list[Any] | None = None
    error: BaseException | None = None


class ChunkedLookup:
    """Runs ``query`` over chunks of a call's names on a bounded pool, paced, with retries, inside a deadline.

    Args:
        query: ``query(names) -> list`` with one answer per name (``None``
            for absent), raising if any name's lookup failed.  It is called
            from the pool's threads, at most ``agents`` at a time.
        agents: pool threads (the most queries at once, per backend and per call).
        chunk: names per query at most (and at first: see :class:`QuerySize`).
        heads: the most HEADs in flight (names in running queries), per
            backend and per call; None: ``agents * chunk`` (the pool then
            bounds queries alone).
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
        pacer: the store's pace, shared (None: unpaced, never shed).
        retry_after: ``retry_after(exc) -> seconds | None``, the store's
            ``Retry-After`` carried by a failure, for the pacer.
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
        pacer: Pacer | None = None,
        retry_after: Callable[[BaseException], float | None] | None = None,
        heads: int | None = None,
    ) -> None:
        self._query = query
        self._query_one = query_one
        self._query_one_from = query_one_from
        self.classify = classify or _unknown_cause
        self.chunk = chunk
        self.retry = retry
        self.pacer = pacer
        self._retry_after = retry_after
        self.counters = LookupCounters()
        self.sizes = QuerySize(chunk)
        self._agents = agents
        self._heads = heads if heads is not None else agents * chunk
        self._rng = random.Random(seed)
        self._lock = threading.Lock()  # the shared QuerySize and query duration
        self._query_s = 0.0  # a successful query's usual duration (smoothed): a shed's margin
        # Concurrent runs take turns on the pool (not FIFO): a small group
        # never waits behind every chunk of a large one (see _fair_pool).
        self._pool = FairPool(agents, "kvprobe-obj", capacity=self._heads)
        self._closed = False

    def run(self, names: Sequence[str], deadline_s: float) -> RunResult:
        """One verdict per name (``False`` for a name unanswered at the deadline, or shed), with counts.

        Raises:
            RuntimeError: the engine is closed.
        """
        if self._closed:
            raise RuntimeError("the object backend was closed")
        plan = RetryPlan(len(names), self.chunk, self.retry, self._rng, time.monotonic(), deadline_s)
        call = _Call(self, names, plan, deadline_s)
        try:
            self._drive(call)
        except BaseException:
            # A fault of ours (the pace, a reader of the store's answers):
            # the call's queries still queued must not run for a caller
            # that is gone, nor its reservation stay taken.
            call.end()
            raise
        # The deadline (or every key answered or shed): stop what has not started.
        verdicts, answered, counts = call.end()
        self.counters.add(**counts)
        unanswered = frozenset(i for i, verdict in enumerate(plan.verdicts) if verdict is None)
        return RunResult(verdicts, answered, counts["shed"], unanswered)

    def _drive(self, call: _Call) -> None:
        """Submit, wait and record until the deadline, or until every key is answered or shed."""
        plan = call.plan
        while True:
            now = time.monotonic()
            call.backlog.extend(plan.due_retries(now))
            call.dispatch(now)
            if now >= plan.end or plan.finished or not call.pending():
                return
            wake = min(plan.end, plan.next_retry_at() or math.inf, call.held[0] if call.held else math.inf)
            timeout = max(0.0, wake - now)
            if not call.running:
                time.sleep(timeout)
                continue
            done, _ = wait(call.running, timeout=timeout, return_when=FIRST_COMPLETED)
            for future in done:
                chunk = call.running.pop(future)
                call.running_heads -= chunk.stop - chunk.start
                outcome = None if future.cancelled() else future.result()
                if outcome is not None:
                    self._record(plan, chunk, outcome)

    def query_size(self) -> int:
        """Keys per query now (see :class:`QuerySize`)."""
        with self._lock:
            return self.sizes.size

    def _record(self, plan: RetryPlan, chunk: Chunk, outcome: _Outcome) -> None:
        keys = chunk.stop - chunk.start
        if outcome.error is None:
            assert outcome.answers is not None
            plan.answered(chunk, outcome.answers)
            with self._lock:
                self.sizes.answered(keys)
                self._query_s = usual_query_s(self._query_s, outcome.ended - outcome.started)
            if self.pacer is not None:
                self.pacer.answered(outcome.started, keys)
            return
        cause = self.classify(outcome.error, outcome.ended - outcome.started)
        _log.debug("a query of %d keys failed (%s): %s", keys, cause, outcome.error)
        with self._lock:
            if cause != "timed_out":
                self.sizes.failed(keys)
            part = self.sizes.size
        if self.pacer is not None and cause != "timed_out":
            self.pacer.failed(outcome.started, keys, self._read_retry_after(outcome.error))
        plan.failed(chunk, time.monotonic(), cause, part)

    def _read_retry_after(self, error: BaseException) -> float | None:
        """The failure's ``Retry-After`` in seconds, or None (none, or the reader failed on what the store sent)."""
        if self._retry_after is None:
            return None
        try:
            return self._retry_after(error)
        except Exception:  # the header is the server's text: a reader's bug must not cost the call its answers
            _log.warning("could not read the Retry-After of a failed query (%s)", error, exc_info=True)
            return None

    def _guarded(self, cancelled: threading.Event, names: Sequence[str], single: bool) -> _Outcome | None:
        if cancelled.is_set():
            return None  # its call has returned: never sent
        started = time.monotonic()
        try:
            if single and self._query_one is not None:
                answers = [self._query_one(names[0])]
            else:
                answers = self._query(names)
                if len(answers) != len(names):
                    raise RuntimeError(f"NIXL OBJ answered {len(answers)} results for {len(names)} objects")
        except Exception as exc:  # the query's failure is its outcome, retried by the plan
            return _Outcome(started, time.monotonic(), error=exc)
        return _Outcome(started, time.monotonic(), answers=answers)

    def close(self) -> None:
        """Cancel queued chunks and let the pool's threads end (a running query finishes first).  Idempotent."""
        self._closed = True
        self._pool.shutdown()


class _Call:
    """One ``run``'s chunks between the plan and the pool: queued, held for the pace, running."""

    def __init__(self, engine: ChunkedLookup, names: Sequence[str], plan: RetryPlan, deadline_s: float) -> None:
        self.engine = engine
        self.deadline_s = deadline_s
        self.names = names
        self.plan = plan
        self.cancelled = threading.Event()
        self.backlog: deque[Chunk] = deque()  # due, not yet reserved
        self.held: tuple[float, Chunk] | None = None  # reserved for a start in the future
        self.running: dict[Future[_Outcome | None], Chunk] = {}
        self.running_heads = 0  # names in `running`
        self.paced = 0

    def pending(self) -> bool:
        """Something is running, held, queued, not yet sent or waiting for its backoff."""
        plan = self.plan
        return bool(self.running or self.held or self.backlog) or plan.unsent or plan.next_retry_at() is not None

    def dispatch(self, now: float) -> None:
        """Submit what the pace allows: at most ``agents`` queries and ``heads`` HEADs of this call in the pool.

        One reservation is held ahead at most.

        Every key is asked once before any is asked again (the next first
        query, of the size queries have now, then the retries due): under an
        outage or heavy throttling a key never asked would otherwise wait
        behind retries that keep failing.
        """
        engine = self.engine
        if self.held is not None:
            if self.held[0] > now:
                return
            self._submit(self.held[1])
            self.held = None
        while len(self.running) < engine._agents and self.running_heads < engine._heads:
            chunk = self.plan.next_first(engine.query_size()) if self.plan.unsent else None
            if chunk is None and self.backlog:
                chunk = self.backlog.popleft()
            if chunk is None:
                return
            if engine.pacer is None:
                self._submit(chunk)
                continue
            at = engine.pacer.reserve(
                chunk.stop - chunk.start, not_after=self.plan.end - shed_margin(engine._query_s, self.deadline_s)
            )
            if at is None:  # later ones would start later still: answer them now
                for given_up in (chunk, *self.backlog):
                    self.plan.shed(given_up)
                self.backlog.clear()
                self.plan.shed_unsent()
                return
            if at > time.monotonic():  # the pace's clock has moved on since `now`
                self.held = (at, chunk)
                self.paced += 1
                return
            self._submit(chunk)

    def _submit(self, chunk: Chunk) -> None:
        engine = self.engine
        single = chunk.attempt >= engine._query_one_from and chunk.stop - chunk.start == 1
        names = self.names[chunk.start : chunk.stop]
        future = engine._pool.submit(self.plan, engine._guarded, self.cancelled, names, single, weight=len(names))
        self.running[future] = chunk
        self.running_heads += len(names)

    def end(self) -> tuple[list[bool], int, dict[str, int]]:
        """Cancel what has not started, give back a held reservation, and settle the plan."""
        self.cancelled.set()
        if self.held is not None and self.engine.pacer is not None:
            self.engine.pacer.release(self.held[1].stop - self.held[1].start)
        in_flight = [chunk for future, chunk in self.running.items() if not future.cancel()]
        verdicts, answered, counts = self.plan.settle(in_flight)
        counts["paced_queries"] = self.paced
        return verdicts, answered, counts


def _unknown_cause(exc: BaseException, elapsed_s: float) -> str:
    del exc, elapsed_s
    return FAILED_OTHER
