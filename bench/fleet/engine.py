"""One serving engine in the fleet: kvprobe's real core, a scheduler's lookups, the object backend's policy.

The scheduler.  Each engine runs kvprobe's :class:`LookupCore` (the pure core
the manager wraps; its mode makes it) and steps on a grid of ``step_s``.  At
a step it applies the published outcomes, hands each waiting request to its
mode (``bench/fleet/modes.py``: how the scheduler asks), and flushes; the
flush's groups become backend calls.  A request is answered (its lookup
delay ends) when its mode says how many of its leading blocks are stored; it
is cleaned up (``cleanup``) ``serve_s`` later.

The backend.  :class:`SimObjBackend` runs each group as kvprobe's object
backend does, with its own policy object: :class:`RetryPlan` from
``kvprobe.backends._obj_lookup`` cuts the keys into chunks of
``agent_threads``, and says when a failed chunk's keys are retried and what
is MISS at the deadline.  A pool of ``num_threads / agent_threads`` agents
serves the groups' chunks in turn (the backend's ``FairPool`` discipline,
:class:`RoundRobin`; ``fair=False``: first come first served, as the
backend's pool was before); a chunk's HEADs go out together and the query ends when the
slowest returns, failing as a whole if any HEAD was throttled (NIXL's
semantics).  With ``BackendParams.paced`` each chunk first reserves its
HEADs from the engine's :class:`PaceCore` (the backend's pace, on the
virtual clock): it waits for its start without holding an agent, and a
chunk the pace cannot start before the call's deadline (less a query's usual
duration, at most half the call's time) is shed, MISS at once.  Unlike the
backend, which holds one reservation ahead per call, every chunk of a call
reserves as soon as an agent takes it.
"""

from __future__ import annotations

import heapq
import math
import random
from collections.abc import Callable
from dataclasses import dataclass, field

from bench.fleet.modes import LookupMode, Request
from bench.fleet.params import BackendParams, WorkloadParams
from bench.fleet.store import S3Model, key_position
from bench.fleet.workload import Tier, Workload
from kvprobe.backends.obj_parts import Chunk, PaceCore, RetryPlan, RoundRobin, shed_margin, usual_query_s
from kvprobe.statemachine.types import GroupOutcome, ProbeGroup, ReqContext

__all__ = ["Engine", "Fleet", "SimObjBackend"]

Schedule = Callable[..., None]  # schedule(time, callback, *args)


class Fleet:
    """What the engines share: the virtual clock's scheduler, the store, the tier, the tallies."""

    def __init__(self, schedule: Schedule, store: S3Model, tier: Tier, track_from: float, track_to: float) -> None:
        self.schedule = schedule
        self.now = 0.0  # the virtual clock, advanced by the simulator
        self.store = store
        self.tier = tier
        self.track_from = track_from
        self.track_to = track_to
        self.tracked_open = 0  # tracked requests not answered yet
        self.answered: list[Request] = []  # tracked requests, answered
        self.calls = 0
        self.keys_called = 0
        self.chunks_sent = 0
        self.heads_sent = 0
        self.counts: dict[str, int] = {}

    def clock(self) -> float:
        """The virtual time (what a core's verdict memory reads)."""
        return self.now

    def accepting(self, now: float) -> bool:
        """Requests keep arriving until the window is over and every tracked request is answered."""
        return now < self.track_to or self.tracked_open > 0


@dataclass(eq=False)
class _Call:
    group: ProbeGroup
    plan: RetryPlan
    positions: list[float]
    truth: list[bool]
    in_flight: dict[Chunk, float] = field(default_factory=dict)  # each chunk's send time
    reserved: set[Chunk] = field(default_factory=set)  # chunks the pace gave a start already
    queued: int = 0  # chunks waiting for an agent or for their start
    done: bool = False
    retry_wake: float = math.inf


class SimObjBackend:
    """kvprobe's object backend on the virtual clock: chunks, a pool of agents, RetryPlan's retries."""

    def __init__(
        self,
        fleet: Fleet,
        params: BackendParams,
        rng: random.Random,
        publish: Callable[[GroupOutcome], None],
        *,
        fair: bool = True,
    ) -> None:
        self.fleet = fleet
        self.p = params
        self.rng = rng
        self.publish = publish
        self.free = max(1, math.ceil(params.num_threads / params.agent_threads))
        # The backend's pool serves concurrent calls in turn (FairPool's
        # RoundRobin); fair=False is the first-come-first-served pool it had.
        self.queue: RoundRobin[_Call | None, tuple[_Call, Chunk]] = RoundRobin()
        self.fair = fair
        self.pace = PaceCore(0.0) if params.paced else None
        self.query_s = 0.0  # a successful query's usual duration (smoothed), as the backend keeps it

    def call(self, group: ProbeGroup, now: float) -> None:
        """Start ``batch_lookup`` for one group at ``now``."""
        keys = group.keys
        plan = RetryPlan(len(keys), self.p.agent_threads, self.p.retry, self.rng, now, self.p.deadline_s)
        holds = self.fleet.tier.holds
        call = _Call(group, plan, [key_position(k) for k in keys], [holds(k) for k in keys])
        self.fleet.calls += 1
        self.fleet.keys_called += len(keys)
        self.fleet.schedule(plan.end, self._deadline, call)
        self._enqueue(call, now)

    def _enqueue(self, call: _Call, now: float) -> None:
        for chunk in call.plan.due(now):
            self.queue.put(call if self.fair else None, (call, chunk))
            call.queued += 1
        self._dispatch(now)
        wake = call.plan.next_retry_at()
        if wake is not None and wake < call.retry_wake:
            call.retry_wake = wake
            self.fleet.schedule(wake, self._retry_due, call)

    def _retry_due(self, now: float, call: _Call) -> None:
        call.retry_wake = math.inf
        if not call.done:
            self._enqueue(call, now)

    def _dispatch(self, now: float) -> None:
        head = self.fleet.store.head
        while self.free and self.queue:
            _, (call, chunk) = self.queue.take()
            call.queued -= 1
            if call.done:
                continue  # cancelled at the deadline: never sent
            if self.pace is not None and chunk not in call.reserved:
                margin = shed_margin(self.query_s, self.p.deadline_s)
                at = self.pace.reserve(now, chunk.stop - chunk.start, not_after=call.plan.end - margin)
                if at is None:  # the pace cannot start it in time: MISS at once
                    call.plan.shed(chunk)
                    self._settle_if_over(call)
                    continue
                call.reserved.add(chunk)
                if at > now:  # its start is later: no agent held meanwhile
                    call.queued += 1
                    self.fleet.schedule(at, self._start_due, call, chunk)
                    continue
            self.free -= 1
            throttled = False
            slowest = 0.0
            for i in range(chunk.start, chunk.stop):
                no, rtt = head(call.positions[i], now)
                throttled = throttled or no
                slowest = rtt if rtt > slowest else slowest
            self.fleet.chunks_sent += 1
            self.fleet.heads_sent += chunk.stop - chunk.start
            call.in_flight[chunk] = now
            self.fleet.schedule(now + slowest, self._chunk_done, call, chunk, throttled)

    def _start_due(self, now: float, call: _Call, chunk: Chunk) -> None:
        # Back in the pool's queue, its reservation kept (it is not charged again).
        self.queue.put(call if self.fair else None, (call, chunk))
        self._dispatch(now)

    def _chunk_done(self, now: float, call: _Call, chunk: Chunk, throttled: bool) -> None:
        self.free += 1
        if not call.done:
            sent_at = call.in_flight.pop(chunk)
            heads = chunk.stop - chunk.start
            if throttled:
                if self.pace is not None:
                    self.pace.failed(now, sent_at, heads)
                call.plan.failed(chunk, now, "throttled")
                self._enqueue(call, now)
            else:
                if self.pace is not None:
                    self.pace.answered(now, sent_at, heads)
                    self.query_s = usual_query_s(self.query_s, now - sent_at)
                call.plan.answered(chunk, [{} if t else None for t in call.truth[chunk.start : chunk.stop]])
            self._settle_if_over(call)
        self._dispatch(now)

    def _settle_if_over(self, call: _Call) -> None:
        # As ChunkedLookup.run: the call returns once every key is answered or
        # shed, or nothing runs, waits or is due again (no-retry mode).
        if call.done:
            return
        idle = not call.in_flight and not call.queued and call.plan.next_retry_at() is None
        if call.plan.finished or idle:
            self._finish(call)

    def _deadline(self, now: float, call: _Call) -> None:
        if not call.done:
            self._finish(call)

    def _finish(self, call: _Call) -> None:
        call.done = True
        verdicts, _, counts = call.plan.settle(call.in_flight)
        tally = self.fleet.counts
        for name, value in counts.items():
            tally[name] = tally.get(name, 0) + value
        self.publish(GroupOutcome(call.group, tuple(verdicts)))


class Engine:
    """One engine: its core, its scheduler's lookups, its backend, its arrivals."""

    def __init__(
        self,
        index: int,
        fleet: Fleet,
        mode: LookupMode,
        workload: Workload,
        wparams: WorkloadParams,
        backend: BackendParams,
        rng: random.Random,
        *,
        lazy: bool = True,
        fair: bool = True,
    ) -> None:
        self.index = index
        self.fleet = fleet
        self.mode = mode
        self.workload = workload
        self.w = wparams
        self.rng = rng
        self.lazy = lazy  # False: step (and ask every waiting request) at every step
        self.core = mode.new_core(fleet.clock)
        self.backend = SimObjBackend(fleet, backend, rng, self._published, fair=fair)
        self.phase = rng.uniform(0.0, wparams.step_s)  # engines do not step in lockstep
        self.waiting: dict[str, Request] = {}
        self.finishing: list[tuple[float, int, str]] = []
        self.next_arrival = workload.next_gap()
        self._ids = 0
        self._wake_step: int | None = None
        self.steps = 0  # steps this engine actually ran

    # --- the step grid -------------------------------------------------------

    def step_at(self, t: float) -> int:
        """The first step at or after ``t``."""
        return max(0, math.ceil((t - self.phase) / self.w.step_s - 1e-9))

    def wake(self, step: int) -> None:
        if self._wake_step is None or step < self._wake_step:
            self._wake_step = step
            self.fleet.schedule(self.phase + step * self.w.step_s, self._step, step)

    def start(self) -> None:
        self.wake(self.step_at(self.next_arrival))

    def _published(self, outcome: GroupOutcome) -> None:
        # The worker's publish: the core applies it at the next step's drain.
        self.core.inbox.append(outcome)
        self.wake(self.step_at(self.fleet.now + 1e-9))

    def _step(self, now: float, step: int) -> None:
        if step != self._wake_step:
            return  # superseded by an earlier wake
        self._wake_step = None
        self.steps += 1
        core = self.core
        core.drain()
        while self.finishing and self.finishing[0][0] <= now:
            _, _, req_id = heapq.heappop(self.finishing)
            core.cleanup(req_id)
        accepting = self.fleet.accepting(now)
        while accepting and self.next_arrival <= now:
            self._arrive(step)
            self.next_arrival += self.workload.next_gap()
        for req in list(self.waiting.values()):
            self._ask(req, step, now)
        batch = core.flush()
        if batch is not None:
            for group in batch.groups:
                self.backend.call(group, now)
        if self.waiting and not self.lazy:
            self.wake(step + 1)
        if self.finishing:
            self.wake(self.step_at(self.finishing[0][0]))
        if accepting:
            self.wake(self.step_at(self.next_arrival))

    def _arrive(self, step: int) -> None:
        self._ids += 1
        req_id = f"e{self.index}r{self._ids}"
        t = self.next_arrival
        tracked = self.fleet.track_from <= t < self.fleet.track_to
        self.fleet.tracked_open += tracked
        self.waiting[req_id] = Request(ReqContext(req_id), self.workload.prompt(), step, tracked)

    def _ask(self, req: Request, step: int, now: float) -> None:
        hits = self.mode.ask(self.core, req)
        if hits is not None:
            self._answer(req, step, now, hits)

    def _answer(self, req: Request, step: int, now: float, hits: int) -> None:
        keys, tier = req.prompt.keys, self.fleet.tier
        # A tier that never evicted holds every stored block: no scan.
        evicting, holds = tier.evictions > 0, tier.holds
        held = next((i for i in range(hits) if not holds(keys[i])), hits) if evicting else hits
        if held < hits:
            # Blocks answered stored that the tier lost since (a remembered
            # verdict, or an eviction during the lookup): their load fails,
            # the engine tells the core (the contract's mark_miss) and
            # computes from the first one.
            gone = [k for k in keys[held:hits] if not holds(k)]
            req.stale = len(gone)
            self.core.mark_miss(gone)
            hits = held
        req.answered_step = step
        req.leading_hits = hits
        del self.waiting[req.ctx.req_id]
        done = now + self.rng.expovariate(1.0 / self.w.serve_s)
        heapq.heappush(self.finishing, (done, self._ids, req.ctx.req_id))
        lost = keys[hits : req.prompt.stored]
        if evicting and not all(map(holds, lost)):  # evicted blocks it computes: written back once computed
            self.fleet.schedule(done, lambda at: tier.write_back(lost))
        if req.tracked:
            self.fleet.tracked_open -= 1
            self.fleet.answered.append(req)
