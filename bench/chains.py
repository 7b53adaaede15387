"""Whole-request walks: what ``lookup_chain`` costs the scheduler per key, and the backend work it saves.

A serving engine's scheduler asks, each step and for each waiting request,
"how many leading blocks of this prompt are in the tier?".  Three walks
answer it, each on its own manager over equal tiers:

* ``chain``: ``lookup_chain(keys, ctx)``, one call per request, with
  ``chain_window="all"`` (the same keys as the loops below: this part prices
  a key, not a window schedule);
* ``per-key``: kvprobe's ``lookup`` in the loop an engine would write, which
  stops after the first False (:func:`chain_walk`, the walk ``lookup_chain``
  does);
* ``baseline``: the same loop over :class:`bench.baseline.BaselineManager`
  (the unverified design has no chain call; this loop is its honest chain).

**Cost** (``--part cost``): the three walks in lockstep on one plan
(:class:`ChainWorkload`): requests of 16 to 4,096 keys (log-uniform), the
first part of each from one of a few shared prefixes, the rest its own; the
tier holds each prefix up to some depth and a few requests' own keys up to
some depth, so walks stop at their first unstored block, as in a prefix
cache.  A request waits ``life_steps`` steps; the worker answers a batch one
step after its flush, so a request's keys are new in its first step, in
flight in its second, resolved afterwards.  The answers are compared off the
clock; only the scheduler thread's CPU time in the walks is compared, per
key looked up.  Then the same three walks over one request's keys by phase.

**Saving** (``--part saving``): most chains miss early (shared prefixes of
which the tier holds only the first blocks, unstored tails).  Three engines
ask the same requests: ``lookup_chain``, the per-key loop stopping at the
miss, and ``lookup`` of every key (what an engine written against single
lookups does).  The backend answers a bounded number of keys per step,
first come first served; a request is cleaned up ``finish_after`` steps
after it arrived.  Reported: keys probed and backend calls per step, steps
to an answer, and answers checked against the tier (these are counts, not
timings: the same on every machine).  ``lookup_chain`` runs twice: with
``chain_window="all"`` (the walk of earlier releases, which probes what the
stopping loop probes) and with the default windows.

**Windows** (``--part windows``): the trade of each window schedule, one
request at a time on its own manager (nothing shared): the steps a request
waits until its answer is decided, against the backend keys (HEADs on an
object store) it costs, for chains of 32, 256 and 3,600 blocks.  Each step
is one walk, a flush, and the worker answering before the next step (the
best case for steps: a slow tier adds its own latency to every window).
The stored prefix of a request is drawn, with a fixed seed, from one of two
stated mixes: ``mixed``, a quarter of the requests with nothing stored, a
quarter with everything, half with a prefix whose length is uniform in
1..n-1; ``short``, a prefix uniform in 0..16 (a shared system prompt: the
issue's 3,600-block prompt with ten stored blocks).  The ideal is the
stored prefix plus its first missing block.  These are counts, the same on
every machine.

Run: ``python -m bench.chains [--quick] [--part cost|saving|windows] [--steps N] [--repeats N] [--capacity KEYS]``.
"""

from __future__ import annotations

import argparse
import gc
import math
import os
import random
import statistics
import sys
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from bench.common import Impl, Row, baseline_impl, fmt_ratio, manual_impl, verified_impl
from kvprobe.statemachine import AsyncLookupManager, ManualWorker, ProbeGroup, ReqContext
from kvprobe.statemachine.windows import DEFAULT_CHAIN_WINDOW

__all__ = ["CONTENDERS", "ChainWorkload", "SavingScenario", "chain_walk", "measure_chains", "rows", "run_saving"]

Answer = tuple[int, bool, bool, int]  # leading hits, stopped at a miss, some verdict pending, keys looked up
Walk = Callable[[Any, Sequence[bytes], ReqContext], Answer]


class SetTier:
    """An in-memory tier holding an explicit set of keys (no call log)."""

    def __init__(self, stored: set[bytes]) -> None:
        self.stored = stored

    def batch_lookup(self, keys: Sequence[bytes], req_context: object) -> list[bool]:
        stored = self.stored
        return [k in stored for k in keys]


def chain_walk(lookup: Callable[[bytes, Any], bool | None], keys: Sequence[bytes], ctx: Any) -> Answer:
    """What an engine writes without ``lookup_chain``: (leading hits, stopped, pending, looked up)."""
    hits = 0
    pending = False
    looked = 0
    for key in keys:
        looked += 1
        verdict = lookup(key, ctx)
        if verdict is None:
            pending = True
        elif verdict:
            if not pending:
                hits += 1
        else:
            return hits, True, pending, looked
    return hits, False, pending, looked


def walk_chain(m: Any, keys: Sequence[bytes], ctx: ReqContext) -> Answer:
    a = m.lookup_chain(keys, ctx)
    return a.leading_hits, a.stopped_at_miss, a.pending, a.looked_up


def walk_stop(m: Any, keys: Sequence[bytes], ctx: ReqContext) -> Answer:
    return chain_walk(m.lookup, keys, ctx)


def walk_every(m: Any, keys: Sequence[bytes], ctx: ReqContext) -> Answer:
    """``lookup`` of every key first, the answer computed afterwards."""
    verdicts = [m.lookup(key, ctx) for key in keys]
    hits = 0
    for verdict in verdicts:
        if verdict is None:
            return hits, False, True, len(keys)
        if not verdict:
            return hits, True, False, len(keys)
        hits += 1
    return hits, False, False, len(keys)


def whole_chain_impl(tier: SetTier) -> Impl:
    """kvprobe's manager walking every key up to the first known miss (``chain_window="all"``)."""
    return manual_impl(AsyncLookupManager(tier, worker="manual", chain_window="all"))


#: The cost part's walks: (the manager it runs on, the walk).
CONTENDERS: dict[str, tuple[Callable[[SetTier], Impl], Walk]] = {
    "chain": (whole_chain_impl, walk_chain),
    "per-key": (verified_impl, walk_stop),
    "baseline": (baseline_impl, walk_stop),
}
#: The saving part's engines, each on a kvprobe manager.
ENGINES: dict[str, Walk] = {
    "lookup_chain": walk_chain,
    f"lookup_chain, windows of {DEFAULT_CHAIN_WINDOW}, 2x": walk_chain,
    "per-key, stop at miss": walk_stop,
    "per-key, every key": walk_every,
}


# --- cost ------------------------------------------------------------------------------------


@dataclass
class ChainWorkload:
    """A deterministic stream of requests and the tier's contents (see the module docstring)."""

    steps: int = 60
    arrivals_per_step: int = 4
    life_steps: int = 4
    min_keys: int = 16
    max_keys: int = 4096
    n_prefixes: int = 6
    returning: float = 0.3  # share of requests whose own keys the tier holds up to some depth
    seed: int = 11
    stored: set[bytes] = field(default_factory=set)

    def __post_init__(self) -> None:
        rng = random.Random(self.seed)
        self._rng = rng
        self.prefixes = [tuple(self._key(i) for i in range(self.max_keys)) for _ in range(self.n_prefixes)]
        for prefix in self.prefixes:
            self.stored.update(prefix[: rng.randrange(len(prefix))])

    def _key(self, index: int) -> bytes:
        return self._rng.randbytes(16) + index.to_bytes(4, "little")

    def plan(self) -> list[tuple[list[tuple[ReqContext, tuple[bytes, ...]]], list[str]]]:
        """Per step: (waiting requests, request ids cleaned up after the step)."""
        rng = random.Random(self.seed + 1)
        live: list[tuple[ReqContext, tuple[bytes, ...], int]] = []  # (request, keys, its last step)
        out = []
        serial = 0
        log_lo, log_hi = math.log(self.min_keys), math.log(self.max_keys)
        for step in range(self.steps):
            for _ in range(self.arrivals_per_step):
                length = int(math.exp(rng.uniform(log_lo, log_hi)))
                prefix = self.prefixes[rng.randrange(self.n_prefixes)]
                shared = rng.randrange(length + 1)
                own = tuple(self._key(i) for i in range(shared, length))
                if own and rng.random() < self.returning:
                    self.stored.update(own[: rng.randrange(len(own))])
                live.append((ReqContext(f"c{serial}"), prefix[:shared] + own, step + self.life_steps - 1))
                serial += 1
            finishing = [ctx.req_id for ctx, _, last in live if last == step]
            out.append(([(ctx, keys) for ctx, keys, _ in live], finishing))
            live = [r for r in live if r[2] != step]
        return out


@dataclass
class ChainTally:
    """One repetition of the cost part: scheduler ns and keys looked up per walk."""

    ns: dict[str, int] = field(default_factory=lambda: dict.fromkeys(CONTENDERS, 0))
    keys: dict[str, int] = field(default_factory=lambda: dict.fromkeys(CONTENDERS, 0))
    disagreements: int = 0
    requests: int = 0
    keys_asked: int = 0  # keys the requests hold (what a walk without the stop would look up)

    def per_key(self, who: str) -> float:
        return self.ns[who] / self.keys[who] if self.keys[who] else float("nan")

    def ratio(self, who: str) -> float:
        """``who``'s ns per key over the baseline's."""
        return self.per_key(who) / self.per_key("baseline")


def measure_chains(workload: ChainWorkload, repeats: int, delay: int = 1) -> list[ChainTally]:
    """Run ``repeats`` lockstep repetitions; one tally per repetition."""
    plan = workload.plan()
    tallies = []
    clock = time.thread_time_ns
    for rep in range(repeats):
        impls = {who: make(SetTier(workload.stored)) for who, (make, _) in CONTENDERS.items()}
        tally = ChainTally()
        gc.collect()
        gc.disable()
        try:
            for step, (waiting, finishing) in enumerate(plan):
                answers: dict[str, list[Answer]] = {}
                order = list(CONTENDERS)
                shift = (step + rep) % len(order)
                for who in order[shift:] + order[:shift]:
                    m, walk = impls[who].manager, CONTENDERS[who][1]
                    t0 = clock()
                    answers[who] = [walk(m, keys, ctx) for ctx, keys in waiting]
                    tally.ns[who] += clock() - t0
                    tally.keys[who] += sum(a[3] for a in answers[who])
                    m.flush()
                    impls[who].pump_to(delay)
                    for req_id in finishing:
                        m.cleanup(req_id)
                tally.disagreements += sum(1 for a, b, c in zip(*answers.values(), strict=True) if not a == b == c)
                tally.requests += len(waiting)
                tally.keys_asked += sum(len(keys) for _, keys in waiting)
        finally:
            gc.enable()
        for impl in impls.values():
            impl.manager.shutdown()
        tallies.append(tally)
    return tallies


PHASES = ("new", "in flight, same request", "in flight, another request joins", "resolved, same request")


def measure_phases(n_keys: int = 4096, repeats: int = 5) -> dict[str, dict[str, list[float]]]:
    """Per-key ns of one whole-request walk by the phase of its keys: ``{phase: {walk: [ns per key, ...]}}``.

    One request's ``n_keys`` keys (all stored, so no walk stops) are walked
    while new, while in flight (the same request again, then a second
    request joining), and when resolved.
    """
    out: dict[str, dict[str, list[float]]] = {phase: {} for phase in PHASES}
    clock = time.thread_time_ns
    order = list(CONTENDERS)
    for rep in range(repeats):
        shift = rep % len(order)
        for who in order[shift:] + order[:shift]:
            make, walk = CONTENDERS[who]
            keys = [os.urandom(16) + i.to_bytes(4, "little") for i in range(n_keys)]
            impl = make(SetTier(set(keys)))
            m = impl.manager
            first, second = ReqContext("first"), ReqContext("second")
            ns: list[int] = []
            gc.collect()
            gc.disable()
            try:
                for phase, ctx in zip(PHASES, (first, first, second, first), strict=True):
                    if phase == PHASES[1]:
                        m.flush()
                    elif phase == PHASES[3]:
                        impl.pump()
                        m.lookup(b"\0" * 20, ReqContext("drain"))  # applies the results (off the clock)
                    t0 = clock()
                    walk(m, keys, ctx)
                    ns.append(clock() - t0)
            finally:
                gc.enable()
            m.shutdown()
            for phase, took in zip(PHASES, ns, strict=True):
                out[phase].setdefault(who, []).append(took / n_keys)
    return out


def cost_report(tallies: Sequence[ChainTally], phases: dict[str, dict[str, list[float]]]) -> str:
    """The mixed workload's table, then the table by phase."""
    first = tallies[0]
    lines = [
        f"{first.requests} request walks per repeat, {first.keys['chain']:,} keys looked up "
        f"of {first.keys_asked:,} held by the requests; answers that disagree: "
        f"{sum(t.disagreements for t in tallies)}",
        "",
        "| walk | ns per key looked up (median) | ratio to baseline median (min-max) |",
        "|---|---|---|",
    ]
    for who in CONTENDERS:
        ns = statistics.median(t.per_key(who) for t in tallies)
        ratios = [t.ratio(who) for t in tallies]
        lines.append(f"| {who} | {ns:,.0f} | {statistics.median(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f}) |")
    lines += ["", "| keys walked | " + " | ".join(f"{w} ns/key" for w in CONTENDERS) + " | chain / baseline |"]
    lines.append("|---|---|---|---|---|")
    for phase, by_who in phases.items():
        med = {w: statistics.median(by_who[w]) for w in CONTENDERS}
        cells = " | ".join(f"{med[w]:,.0f}" for w in CONTENDERS)
        lines.append(f"| {phase} | {cells} | {med['chain'] / med['baseline']:.2f} |")
    return "\n".join(lines)


# --- saving ----------------------------------------------------------------------------------


@dataclass
class SavingScenario:
    """Requests whose chains miss early (see the module docstring)."""

    steps: int = 40
    arrivals_per_step: int = 8
    n_prefixes: int = 4
    prefix_len: int = 512
    stored_depth: tuple[int, int] = (4, 64)  # the tier holds each prefix's first d blocks
    tail: tuple[int, int] = (256, 2048)  # each request's own blocks (not stored)
    finish_after: int = 20  # a request is cleaned up this many steps after it arrived (it was served)
    seed: int = 5
    stored: set[bytes] = field(default_factory=set)

    def build(self) -> list[list[tuple[ReqContext, tuple[bytes, ...]]]]:
        """Per step, the requests arriving; fills :attr:`stored`."""
        rng = random.Random(self.seed)
        prefixes = [tuple(rng.randbytes(20) for _ in range(self.prefix_len)) for _ in range(self.n_prefixes)]
        for prefix in prefixes:
            self.stored.update(prefix[: rng.randint(*self.stored_depth)])
        arrivals = []
        serial = 0
        for _ in range(self.steps):
            now = []
            for _ in range(self.arrivals_per_step):
                prefix = prefixes[rng.randrange(self.n_prefixes)]
                tail = tuple(rng.randbytes(20) for _ in range(rng.randint(*self.tail)))
                now.append((ReqContext(f"q{serial}"), prefix + tail))
                serial += 1
            arrivals.append(now)
        return arrivals


@dataclass
class Outcome:
    probed_per_step: list[int] = field(default_factory=list)
    calls_per_step: list[int] = field(default_factory=list)
    steps_to_answer: list[int] = field(default_factory=list)
    wrong: int = 0
    unanswered: int = 0


class _BoundedTier:
    """Pumps a ManualWorker: at most ``capacity`` keys answered per step, groups in order."""

    def __init__(self, worker: ManualWorker, capacity: int) -> None:
        self.worker = worker
        self.capacity = capacity
        self.queue: deque[ProbeGroup] = deque()
        self.budget = 0

    def step(self) -> None:
        while (batch := self.worker.take_batch()) is not None:
            self.queue.extend(batch.groups)
        self.budget += self.capacity
        while self.queue and len(self.queue[0].states) <= self.budget:
            group = self.queue.popleft()
            self.budget -= len(group.states)
            self.worker.complete(group)
        if not self.queue:
            self.budget = 0  # unused capacity does not carry over


def run_saving(engine: str, scenario: SavingScenario, capacity: int, drain_steps: int = 60) -> Outcome:
    """One engine through the scenario, then up to ``drain_steps`` more steps until every request is answered."""
    arrivals = scenario.build()
    stored = scenario.stored
    walk = ENGINES[engine]
    window: int | str = DEFAULT_CHAIN_WINDOW if "windows" in engine else "all"
    m = AsyncLookupManager(SetTier(stored), worker="manual", chain_window=window)  # type: ignore[arg-type]
    worker = m.worker
    assert isinstance(worker, ManualWorker)
    tier = _BoundedTier(worker, capacity)
    out = Outcome()
    waiting: dict[str, tuple[ReqContext, tuple[bytes, ...], int]] = {}
    for step in range(scenario.steps + drain_steps):
        if step < scenario.steps:
            for ctx, keys in arrivals[step]:
                waiting[ctx.req_id] = (ctx, keys, step)
        if not waiting and step >= scenario.steps:
            break
        before_probes, before_calls = m.stats.probes_submitted, m.stats.backend_calls
        done = []
        for req_id, (ctx, keys, arrived) in waiting.items():
            hits, _stopped, pending, _looked = walk(m, keys, ctx)
            if pending:
                continue
            truth = next((i for i, key in enumerate(keys) if key not in stored), len(keys))
            out.wrong += hits != truth
            out.steps_to_answer.append(step - arrived + 1)
            done.append(req_id)
        m.flush()
        tier.step()
        for req_id in done:
            del waiting[req_id]
        # A request answered keeps its probes until it finishes (it is being
        # served): later requests sharing its prefix find its verdicts.
        finished = step - scenario.finish_after
        for ctx, _keys in arrivals[finished] if 0 <= finished < len(arrivals) else ():
            m.cleanup(ctx.req_id)
        if step < scenario.steps:
            out.probed_per_step.append(m.stats.probes_submitted - before_probes)
            out.calls_per_step.append(m.stats.backend_calls - before_calls)
    out.unanswered = len(waiting)
    m.shutdown()
    return out


def _p90(values: Sequence[int]) -> float:
    ordered = sorted(values)
    return float(ordered[int(0.9 * (len(ordered) - 1))]) if ordered else float("nan")


def saving_report(outcomes: dict[str, Outcome]) -> str:
    lines = [
        "| engine | keys probed per step (mean) | backend calls per step (mean) | steps to an answer: "
        "mean / p90 / max | wrong answers | unanswered |",
        "|---|---|---|---|---|---|",
    ]
    for engine, o in outcomes.items():
        steps = o.steps_to_answer
        lines.append(
            f"| {engine} | {statistics.mean(o.probed_per_step):,.0f} | {statistics.mean(o.calls_per_step):.1f} "
            f"| {statistics.mean(steps):.2f} / {_p90(steps):.0f} / {max(steps)} | {o.wrong} | {o.unanswered} |"
        )
    return "\n".join(lines)


# --- windows ----------------------------------------------------------------------------------

#: The schedules the windows part compares: ``"all"``, or a first window (windows then double).
SCHEDULES: tuple[int | str, ...] = ("all", 1, 4, 16, 64)
#: The chain lengths it compares (blocks per prompt).
CHAIN_LENGTHS = (32, 256, 3600)


#: The stored-prefix mixes (see the module docstring).
MIXES = ("mixed", "short")


def stored_prefixes(n: int, samples: int, mix: str = "mixed", seed: int = 7) -> list[int]:
    """Stored-prefix lengths for chains of ``n`` blocks, drawn from ``mix`` (one of :data:`MIXES`)."""
    rng = random.Random(seed * 100_003 + n)
    if mix == "short":
        return [rng.randint(0, min(n, 16)) for _ in range(samples)]
    out = []
    for i in range(samples):
        kind = i % 4
        out.append(0 if kind == 0 else n if kind == 1 else rng.randint(1, n - 1))
    rng.shuffle(out)
    return out


@dataclass
class WindowTrade:
    """One schedule on one chain length: per request, steps to decide and backend keys."""

    steps: list[int] = field(default_factory=list)
    heads: list[int] = field(default_factory=list)
    ideal: list[int] = field(default_factory=list)
    wrong: int = 0


def window_trade(n: int, schedule: int | str, prefixes: Sequence[int]) -> WindowTrade:
    """Walk one request per stored prefix until decided; count its steps and the keys the backend checked."""
    out = WindowTrade()
    keys = [i.to_bytes(4, "little") * 5 for i in range(n)]
    for p in prefixes:
        tier = SetTier(set(keys[:p]))
        m = AsyncLookupManager(tier, worker="manual", chain_window=schedule)  # type: ignore[arg-type]
        worker = m.worker
        assert isinstance(worker, ManualWorker)
        ctx = ReqContext("r")
        steps = 0
        while True:
            steps += 1
            answer = m.lookup_chain(keys, ctx)
            if answer.decided:
                break
            m.flush()
            worker.run_all()
        out.wrong += answer.leading_hits != p
        out.steps.append(steps)
        out.heads.append(m.stats.probes_submitted)
        out.ideal.append(min(p + 1, n))
        m.shutdown()
    return out


def windows_report(samples: int) -> str:
    """The trade table: per chain length, schedule and mix, steps to decide and HEADs per request."""
    head = " | ".join(f"{mix}: steps mean / max | {mix}: HEADs mean (x ideal)" for mix in MIXES)
    lines = [f"| blocks | first window | {head} | wrong answers |", "|---|---|" + "---|---|" * len(MIXES) + "---|"]
    for n in CHAIN_LENGTHS:
        prefixes = {mix: stored_prefixes(n, samples, mix) for mix in MIXES}
        for schedule in SCHEDULES:
            cells = []
            wrong = 0
            for mix in MIXES:
                t = window_trade(n, schedule, prefixes[mix])
                wrong += t.wrong
                cells.append(f"{statistics.mean(t.steps):.2f} / {max(t.steps)}")
                cells.append(f"{statistics.mean(t.heads):,.0f} ({sum(t.heads) / sum(t.ideal):.2f})")
            lines.append(f"| {n:,} | {schedule} | {' | '.join(cells)} | {wrong} |")
    return "\n".join(lines)


# --- the suite's rows and the command line ------------------------------------------------------


def _cost_size(quick: bool) -> tuple[int, int]:
    return (20, 3) if quick else (60, 7)  # steps, repeats


def rows(quick: bool) -> list[Row]:
    """The suite's rows (``bench.run_all``): per-key cost of two walks against the baseline, and the saving."""
    steps, repeats = _cost_size(quick)
    tallies = measure_chains(ChainWorkload(steps=steps), repeats)
    out = []
    for who in ("chain", "per-key"):
        ns = statistics.median(t.per_key(who) for t in tallies)
        base = statistics.median(t.per_key("baseline") for t in tallies)
        ratios = fmt_ratio([t.ratio(who) for t in tallies])
        out.append(Row("chains", f"{who} per key / baseline", ratios, f"{ns:,.0f} vs {base:,.0f} ns/key"))
    for engine in ENGINES:
        o = run_saving(engine, SavingScenario(steps=15 if quick else 40), 8192)
        out.append(
            Row(
                "chains",
                f"{engine}: keys probed / backend calls per step",
                f"{statistics.mean(o.probed_per_step):,.0f} / {statistics.mean(o.calls_per_step):.1f}",
                f"steps to an answer mean {statistics.mean(o.steps_to_answer):.2f}, max {max(o.steps_to_answer)}; "
                f"wrong {o.wrong}",
            )
        )
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--part", choices=("cost", "saving", "windows"), help="only this part (default: all three)")
    parser.add_argument("--steps", type=int, default=None, help="steps of the workload (cost 60, saving 40)")
    parser.add_argument("--repeats", type=int, default=None, help="cost: lockstep repetitions (default 7)")
    parser.add_argument("--delay", type=int, default=1, help="cost: steps before the worker answers a batch")
    parser.add_argument("--capacity", type=int, default=8192, help="saving: keys the tier answers per step")
    args = parser.parse_args(argv)
    if args.part in (None, "cost"):
        steps, repeats = _cost_size(args.quick)
        steps, repeats = args.steps or steps, args.repeats or repeats
        tallies = measure_chains(ChainWorkload(steps=steps), repeats, args.delay)
        phases = measure_phases(repeats=repeats)
        print(f"chain cost: {steps} steps x {repeats} repeats, lockstep interleaved\n")
        print(cost_report(tallies, phases))
    if args.part in (None, "saving"):
        scenario = SavingScenario(steps=args.steps or (15 if args.quick else 40))
        outcomes = {engine: run_saving(engine, scenario, args.capacity) for engine in ENGINES}
        print(
            f"\nchain saving: {scenario.steps} steps, {scenario.arrivals_per_step} arrivals per step, "
            f"{scenario.n_prefixes} shared prefixes of {scenario.prefix_len} blocks stored "
            f"{scenario.stored_depth[0]}-{scenario.stored_depth[1]} deep, own tails of "
            f"{scenario.tail[0]}-{scenario.tail[1]} blocks; tier capacity {args.capacity:,} keys per step\n"
        )
        print(saving_report(outcomes))
    if args.part in (None, "windows"):
        samples = 40 if args.quick else 200
        print(
            f"\nchain windows: {samples} requests per chain length and mix, one at a time; stored prefix: "
            "mixed = 1/4 none, 1/4 all, 1/2 uniform in 1..n-1; short = uniform in 0..16 (seed 7); a step is "
            "a walk, a flush and the worker's answer; ideal = stored prefix + its first missing block\n"
        )
        print(windows_report(samples))
    return 0


if __name__ == "__main__":
    sys.exit(main())
