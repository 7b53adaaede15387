"""The cost part of :mod:`bench.chains.run` (``--part cost``): what a whole-request walk costs the scheduler per key.

The three walks of :data:`bench.chain_walks.CONTENDERS`, each on its own
manager over equal tiers: ``chain`` (``lookup_chain`` with
``chain_window="all"``, the same keys as the loops: this part prices a key,
not a window schedule), ``per-key`` (kvprobe's ``lookup`` in the loop that
stops after the first False) and ``baseline`` (the same loop over the
unverified design).

They run in lockstep on one plan (:class:`ChainWorkload`): requests of 16 to
4,096 keys (log-uniform), the first part of each from one of a few shared
prefixes, the rest its own; the tier holds each prefix up to some depth and
a few requests' own keys up to some depth, so walks stop at their first
unstored block, as in a prefix cache.  A request waits ``life_steps``
steps; the worker answers a batch one step after its flush, so a request's
keys are new in its first step, in flight in its second, resolved
afterwards.  The answers are compared off the clock; only the scheduler
thread's CPU time in the walks is compared, per key looked up.  Then the
same three walks over one request's keys by phase (:func:`measure_phases`).

A module of its own: it is the one part that times anything.
"""

from __future__ import annotations

import gc
import math
import os
import random
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from bench.chains.walks import CONTENDERS, Answer, SetTier
from kvprobe.statemachine import ReqContext

__all__ = ["PHASES", "ChainTally", "ChainWorkload", "cost_report", "measure_chains", "measure_phases"]


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
