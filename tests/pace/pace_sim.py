"""The object backend's lookups on a virtual clock: its own policy objects, a store model, no threads.

:class:`VirtualLookup` drives what :class:`~kvprobe.backends._obj_lookup.ChunkedLookup`
drives (``RetryPlan``, ``QuerySize``, ``PaceCore``, ``shed_margin``) the way
its ``_Call.dispatch`` does: a pool of ``agents`` workers taken in turn by
the calls, each call with at most ``agents`` queries in the pool and one
reservation held ahead, a failed query split and retried after its backoff,
every key not answered at the deadline read as MISS.  Only the threads and
``time.monotonic`` are replaced, by an event queue, so an operator's run
(8 requests of 250 keys against a store with random 503s) is replayed
exactly and in milliseconds.

Store models:

* :class:`ServedStore`: a store that serves ``rate`` HEADs per second
  (a queue: over it, answers come later, never as 503) and fails each HEAD
  with probability ``loss`` whatever the rate (a flaky gateway or proxy);
* :class:`CappedStore`: a store at its limit: a token bucket of ``rate``
  HEADs per second, ``burst_s`` deep; a HEAD that finds it empty is a 503.

A query fails as a whole when any of its HEADs does (NIXL's semantics).
"""

from __future__ import annotations

import heapq
import itertools
import random
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from kvprobe.backends._obj_lookup import Chunk, QuerySize, RetryPlan, RetryPolicy, shed_margin, usual_query_s
from kvprobe.backends._pace_core import PaceCore

__all__ = [
    "CappedRun",
    "CappedStore",
    "OperatorRun",
    "ServedStore",
    "Store",
    "VirtualLookup",
    "capped_run",
    "operator_run",
    "saturating_clients",
    "served_heads_per_s",
]


class Store(Protocol):
    def query(self, now: float, heads: int, rng: random.Random) -> tuple[bool, float]:
        """A query of ``heads`` HEADs sent at ``now``: (failed, seconds until its answer)."""
        ...


@dataclass
class ServedStore:
    """Serves ``rate`` HEAD/s (a FIFO: beyond it answers queue up), each HEAD failing with ``loss`` at random."""

    rate: float
    loss: float = 0.0
    rtt_s: float = 0.004
    free_at: float = 0.0
    heads: int = 0

    def query(self, now: float, heads: int, rng: random.Random) -> tuple[bool, float]:
        self.heads += heads
        self.free_at = max(now, self.free_at) + heads / self.rate
        failed = any(rng.random() < self.loss for _ in range(heads))
        return failed, self.free_at - now + self.rtt_s * rng.uniform(0.5, 1.5)


@dataclass
class CappedStore:
    """A token bucket of ``rate`` HEAD/s, ``burst_s`` deep: a HEAD finding no token is a 503 (plus ``loss``)."""

    rate: float
    burst_s: float = 0.1
    loss: float = 0.0
    rtt_s: float = 0.004
    tokens: float = -1.0
    at: float = 0.0
    heads: int = 0
    served: int = 0

    def query(self, now: float, heads: int, rng: random.Random) -> tuple[bool, float]:
        depth = max(1.0, self.rate * self.burst_s)
        if self.tokens < 0:
            self.tokens = depth
        self.tokens = min(depth, self.tokens + (now - self.at) * self.rate)
        self.at = now
        self.heads += heads
        failed = False
        for _ in range(heads):
            if self.tokens >= 1.0:
                self.tokens -= 1.0
                self.served += 1
                failed = failed or rng.random() < self.loss
            else:
                failed = True
        return failed, self.rtt_s * rng.uniform(0.5, 1.5)


@dataclass(eq=False)
class _Call:
    plan: RetryPlan
    truth: list[bool]
    backlog: deque[Chunk] = field(default_factory=deque)
    held: tuple[float, Chunk] | None = None
    queued: deque[Chunk] = field(default_factory=deque)  # in the pool, not started
    running: set[Chunk] = field(default_factory=set)
    done: bool = False
    verdicts: list[bool] | None = None
    counts: dict[str, int] = field(default_factory=dict)

    def in_pool(self) -> int:
        return len(self.queued) + len(self.running)


class VirtualLookup:
    """One object backend (``agents`` x ``chunk`` HEADs in flight) on a virtual clock, paced by ``pace``.

    Args:
        store: the store model.
        pace: the backend's pace (None: unpaced, never shed).
        agents, chunk, retry, deadline_s: the backend's defaults.
        seed: the jitter's and the store's draws.
    """

    def __init__(
        self,
        store: Store,
        pace: PaceCore | None,
        *,
        agents: int = 4,
        chunk: int = 16,
        retry: RetryPolicy | None = None,
        deadline_s: float = 5.0,
        seed: int = 0,
    ) -> None:
        self.store = store
        self.pace = pace
        self.agents = agents
        self.chunk = chunk
        self.retry = retry if retry is not None else RetryPolicy(0.02, 0.5)
        self.deadline_s = deadline_s
        self.rng = random.Random(seed)
        self.sizes = QuerySize(chunk)
        self.query_s = 0.0
        self.now = 0.0
        self.free = agents
        self.calls: list[_Call] = []
        self._turn: deque[_Call] = deque()  # calls with queries waiting for a worker, in turn
        self._events: list[tuple[float, int, Callable[..., None], tuple[Any, ...]]] = []
        self._seq = itertools.count()
        self.starts: list[tuple[float, int]] = []  # (when, HEADs) of every query sent

    # --- the clock -------------------------------------------------------------------

    def at(self, when: float, fn: Callable[..., None], *args: Any) -> None:
        heapq.heappush(self._events, (when, next(self._seq), fn, args))

    def run_until(self, end: float) -> None:
        while self._events and self._events[0][0] <= end:
            when, _, fn, args = heapq.heappop(self._events)
            self.now = max(self.now, when)
            fn(*args)
        self.now = max(self.now, end)

    # --- a call ------------------------------------------------------------------------

    def call(self, when: float, truth: list[bool]) -> _Call:
        """Start ``batch_lookup`` at ``when`` for keys whose stored-ness is ``truth``."""
        plan = RetryPlan(len(truth), self.chunk, self.retry, self.rng, when, self.deadline_s)
        call = _Call(plan, truth)
        self.calls.append(call)
        self.at(when, self._wake, call)
        self.at(plan.end, self._wake, call)
        return call

    def _wake(self, call: _Call) -> None:
        if call.done:
            return
        now, plan = self.now, call.plan
        call.backlog.extend(plan.due_retries(now))
        self._dispatch(call, now)
        pending = call.running or call.queued or call.held or call.backlog or plan.unsent
        if now >= plan.end or plan.finished or not (pending or plan.next_retry_at() is not None):
            self._end(call)
            return
        retry_at = plan.next_retry_at()
        if retry_at is not None:
            self.at(retry_at, self._wake, call)

    def _dispatch(self, call: _Call, now: float) -> None:
        plan = call.plan
        if call.held is not None:
            if call.held[0] > now:
                return
            self._submit(call, call.held[1])
            call.held = None
        while call.in_pool() < self.agents:
            chunk = plan.next_first(self.sizes.size) if plan.unsent else None
            if chunk is None and call.backlog:
                chunk = call.backlog.popleft()
            if chunk is None:
                return
            if self.pace is None:
                self._submit(call, chunk)
                continue
            heads = chunk.stop - chunk.start
            at = self.pace.reserve(now, heads, not_after=plan.end - shed_margin(self.query_s, self.deadline_s))
            if at is None:
                for given_up in (chunk, *call.backlog):
                    plan.shed(given_up)
                call.backlog.clear()
                plan.shed_unsent()
                return
            if at > now:
                call.held = (at, chunk)
                self.at(at, self._wake, call)
                return
            self._submit(call, chunk)

    def _submit(self, call: _Call, chunk: Chunk) -> None:
        if not call.queued:
            self._turn.append(call)
        call.queued.append(chunk)
        self._start_queries()

    def _start_queries(self) -> None:
        while self.free and self._turn:
            call = self._turn.popleft()
            chunk = call.queued.popleft()
            if call.queued:
                self._turn.append(call)
            heads = chunk.stop - chunk.start
            failed, took = self.store.query(self.now, heads, self.rng)
            self.free -= 1
            call.running.add(chunk)
            self.starts.append((self.now, heads))
            self.at(self.now + took, self._done, call, chunk, self.now, failed)

    def _done(self, call: _Call, chunk: Chunk, started: float, failed: bool) -> None:
        self.free += 1
        now, heads = self.now, chunk.stop - chunk.start
        if not call.done:  # an ended call's queries finish in the pool; their answers are dropped
            call.running.discard(chunk)
            if failed:
                self.sizes.failed(heads)
                if self.pace is not None:
                    self.pace.failed(now, started, heads)
                call.plan.failed(chunk, now, "throttled", self.sizes.size)
            else:
                call.plan.answered(chunk, [{} if t else None for t in call.truth[chunk.start : chunk.stop]])
                self.sizes.answered(heads)
                self.query_s = usual_query_s(self.query_s, now - started)
                if self.pace is not None:
                    self.pace.answered(now, started, heads)
            self._wake(call)
        self._start_queries()

    def _end(self, call: _Call) -> None:
        call.done = True
        if call.held is not None and self.pace is not None:
            self.pace.release(self.now, call.held[1].stop - call.held[1].start)
        call.queued.clear()
        if call in self._turn:
            self._turn.remove(call)
        call.verdicts, _, call.counts = call.plan.settle(call.running)


@dataclass
class OperatorRun:
    """What one operator's run found: stored keys answered True, absent ones True, keys shed, the pace."""

    stored: int
    stored_true: int
    absent_true: int
    shed: int
    pace: PaceCore | None

    @property
    def kept(self) -> float:
        return self.stored_true / self.stored


def operator_run(
    store: Store,
    *,
    seed: int,
    requests: int = 8,
    keys: int = 250,
    gap_s: float = 0.0,
    pace: PaceCore | None = None,
    unpaced: bool = False,
) -> OperatorRun:
    """Issue #39's run: ``requests`` calls of ``keys`` keys (half stored), ``gap_s`` apart, on a fresh pace.

    ``unpaced``: no pace at all (nothing held back, nothing shed).
    """
    core = None if unpaced else PaceCore(0.0) if pace is None else pace
    lookup = VirtualLookup(store, core, seed=seed)
    truths = [[(i + r) % 2 == 0 for i in range(keys)] for r in range(requests)]
    calls = [lookup.call(r * gap_s, truth) for r, truth in enumerate(truths)]
    lookup.run_until(requests * gap_s + lookup.deadline_s + 1.0)
    stored = stored_true = absent_true = shed = 0
    for call, truth in zip(calls, truths, strict=True):
        assert call.verdicts is not None, "a call never returned"
        for verdict, is_stored in zip(call.verdicts, truth, strict=True):
            stored += is_stored
            stored_true += verdict and is_stored
            absent_true += verdict and not is_stored
        shed += call.counts.get("shed", 0)
    return OperatorRun(stored, stored_true, absent_true, shed, core)


def served_heads_per_s(starts: list[tuple[float, int]], since: float, until: float) -> float:
    """HEADs sent per second over ``[since, until)``."""
    return sum(h for t, h in starts if since <= t < until) / max(until - since, 1e-9)


def saturating_clients(
    paces: Sequence[PaceCore | None],
    store: Store,
    *,
    seconds: float,
    heads: int = 4,
    in_flight: int = 16,
    seed: int = 0,
) -> list[list[tuple[float, int]]]:
    """Clients that always have HEADs to send (``in_flight`` queries of ``heads`` each at most), one per pace.

    Each sends as its pace allows (None: unpaced, each query as soon as one
    ends), against one shared ``store``; returns each client's sends (when, HEADs).
    """
    rng = random.Random(seed)
    events: list[tuple[float, int, int, str, float, bool]] = []  # (when, seq, client, kind, sent_at, failed)
    seq = itertools.count()
    busy = [0] * len(paces)
    sends: list[list[tuple[float, int]]] = [[] for _ in paces]
    waiting = [False] * len(paces)
    for i in range(len(paces)):
        heapq.heappush(events, (0.0, next(seq), i, "send", 0.0, False))
    while events:
        now, _, i, kind, sent_at, failed = heapq.heappop(events)
        if now > seconds:
            break
        pace = paces[i]
        if kind == "done":
            busy[i] -= 1
            if pace is not None:
                (pace.failed if failed else pace.answered)(now, sent_at, heads)
        elif kind == "send":
            waiting[i] = False
            failed_now, took = store.query(now, heads, rng)
            sends[i].append((now, heads))
            heapq.heappush(events, (now + took, next(seq), i, "done", now, failed_now))
        if busy[i] < in_flight and not waiting[i]:
            start = now if pace is None else pace.reserve(now, heads)
            assert start is not None
            busy[i] += 1
            waiting[i] = True
            heapq.heappush(events, (start, next(seq), i, "send", 0.0, False))
    return sends


@dataclass
class CappedRun:
    """One pace against a bucket capped just below its demand: what it sent, what the bucket refused, what it found."""

    served_share: float  # HEADs the bucket served per second over the run's second half, per its cap
    throttled: float  # the share of HEADs sent that found no token
    kept: float  # stored keys answered True
    pace: PaceCore


def capped_run(
    core: PaceCore, *, cap: float = 400.0, demand: float = 1.05, seconds: float = 12.0, seed: int = 0
) -> CappedRun:
    """Calls of ``demand * cap / 10`` keys every 0.1 s (half stored) against ``CappedStore(cap)``, paced by ``core``.

    Issue 38's fleet on one host pace, reduced to its shape: the HEADs asked
    slightly exceed what the bucket serves, so a few percent are throttled
    and retried, and the pace alone decides how close to the cap it stays.
    """
    store = CappedStore(cap)
    lookup = VirtualLookup(store, core, seed=seed)
    keys = round(demand * cap / 10.0)
    calls: list[tuple[_Call, list[bool]]] = []
    t = 0.0
    while t < seconds:
        truth = [i % 2 == 0 for i in range(keys)]
        calls.append((lookup.call(t, truth), truth))
        t += 0.1
    half = seconds / 2
    lookup.run_until(half)
    served_at_half = store.served
    lookup.run_until(seconds)
    served_share = (store.served - served_at_half) / (seconds - half) / cap
    lookup.run_until(seconds + lookup.deadline_s + 1.0)
    stored = found = 0
    for call, truth in calls:
        assert call.verdicts is not None, "a call never returned"
        stored += sum(truth)
        found += sum(1 for verdict, is_stored in zip(call.verdicts, truth, strict=True) if verdict and is_stored)
    return CappedRun(served_share, 1.0 - store.served / max(store.heads, 1), found / stored, core)
