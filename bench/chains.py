"""The chain workload of :mod:`bench.hotpath`: whole requests asked per step.

A serving engine's scheduler asks, each step and for each waiting request,
"how many leading blocks of this prompt are in the tier?".  Here that is
done three ways, side by side in lockstep on the same plan, each on its own
manager over equal tiers:

* ``chain``: ``lookup_chain(keys, ctx)``, one call per request;
* ``per-key``: kvprobe's ``lookup`` in the loop an engine would write, which
  stops after the first False and tracks the leading hits and whether some
  verdict is unknown (the same walk ``lookup_chain`` does);
* ``baseline``: the same loop over :class:`bench.baseline.BaselineManager`'s
  ``lookup`` (the unverified design has no chain call; this loop is the
  honest chain for it).

All three look up exactly the same keys: their answers are compared off the
clock and any disagreement is reported.  Only the scheduler thread's CPU
time spent in the lookups is compared per key; flush and cleanup run off
the clock (:mod:`bench.hotpath`'s main table prices them).

The workload: requests of 16 to 4,096 keys (log-uniform), the first part of
each drawn from one of a few shared prefixes (a system prompt, a document),
the rest its own.  The tier holds each shared prefix up to some depth and a
few requests' own keys up to some depth (a conversation that comes back), so
chains stop at their first unstored block, as in a real prefix cache.  Each
request waits ``life_steps`` steps; the worker answers a batch one step after
its flush, so a request's keys are new in its first step, in flight in its
second, and resolved afterwards, and requests sharing a prefix join each
other's probes.
"""

from __future__ import annotations

import gc
import math
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from bench.common import Impl, baseline_impl, verified_impl
from kvprobe.statemachine import ReqContext

__all__ = ["ChainRequest", "ChainWorkload", "SetTier", "chain_walk", "measure_chains"]

CONTENDERS = ("chain", "per-key", "baseline")


@dataclass(frozen=True)
class ChainRequest:
    ctx: ReqContext
    keys: tuple[bytes, ...]


class SetTier:
    """An in-memory tier holding an explicit set of keys (no call log)."""

    def __init__(self, stored: set[bytes]) -> None:
        self.stored = stored

    def batch_lookup(self, keys: Sequence[bytes], req_context: object) -> list[bool]:
        stored = self.stored
        return [k in stored for k in keys]


@dataclass
class ChainWorkload:
    """A deterministic stream of chain requests and the tier's contents."""

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

    def plan(self) -> list[tuple[list[ChainRequest], list[str]]]:
        """Per step: (waiting requests, request ids cleaned up after the step)."""
        rng = random.Random(self.seed + 1)
        live: list[tuple[ChainRequest, int]] = []
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
                live.append((ChainRequest(ReqContext(f"c{serial}"), prefix[:shared] + own), step + self.life_steps - 1))
                serial += 1
            finishing = [r.ctx.req_id for r, last in live if last == step]
            out.append(([r for r, _ in live], finishing))
            live = [(r, last) for r, last in live if last != step]
        return out


def chain_walk(
    lookup: Callable[[bytes, Any], bool | None], keys: Sequence[bytes], ctx: Any
) -> tuple[int, bool, bool, int]:
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


@dataclass
class ChainTally:
    ns: dict[str, int] = field(default_factory=lambda: dict.fromkeys(CONTENDERS, 0))
    keys: dict[str, int] = field(default_factory=lambda: dict.fromkeys(CONTENDERS, 0))
    disagreements: int = 0
    requests: int = 0
    keys_asked: int = 0  # keys the requests hold (what a walk without the stop would look up)

    def per_key(self, who: str) -> float:
        return self.ns[who] / self.keys[who] if self.keys[who] else float("nan")


def _pump_to(impl: Impl, delay: int) -> None:
    m = impl.manager
    submitted = m.worker.submitted if impl.name == "verified" else m.submitted
    while len(submitted) > delay:
        impl.pump()


def measure_chains(workload: ChainWorkload, repeats: int, delay: int = 1) -> list[ChainTally]:
    """Run ``repeats`` lockstep repetitions; one tally per repetition."""
    plan = workload.plan()
    tallies = []
    clock = time.thread_time_ns
    for rep in range(repeats):
        impls = {
            "chain": verified_impl(SetTier(workload.stored)),
            "per-key": verified_impl(SetTier(workload.stored)),
            "baseline": baseline_impl(SetTier(workload.stored)),
        }
        tally = ChainTally()
        gc.collect()
        gc.disable()
        try:
            for step, (waiting, finishing) in enumerate(plan):
                answers: dict[str, list[tuple[int, bool, bool, int]]] = {}
                shift = (step + rep) % 3
                for who in CONTENDERS[shift:] + CONTENDERS[:shift]:
                    m = impls[who].manager
                    if who == "chain":
                        chain = m.lookup_chain
                        t0 = clock()
                        got = [chain(r.keys, r.ctx) for r in waiting]
                        tally.ns[who] += clock() - t0
                        answers[who] = [(a.leading_hits, a.stopped_at_miss, a.pending, a.looked_up) for a in got]
                    else:
                        lookup = m.lookup
                        walk = chain_walk
                        t0 = clock()
                        answers[who] = [walk(lookup, r.keys, r.ctx) for r in waiting]
                        tally.ns[who] += clock() - t0
                    tally.keys[who] += sum(a[3] for a in answers[who])
                    m.flush()
                    _pump_to(impls[who], delay)
                    for req_id in finishing:
                        m.cleanup(req_id)
                tally.disagreements += sum(
                    1
                    for a, b, c in zip(answers["chain"], answers["per-key"], answers["baseline"], strict=True)
                    if not a == b == c
                )
                tally.requests += len(waiting)
                tally.keys_asked += sum(len(r.keys) for r in waiting)
        finally:
            gc.enable()
        for impl in impls.values():
            impl.manager.shutdown()
        tallies.append(tally)
    return tallies


def measure_classes(n_keys: int = 4096, repeats: int = 5) -> dict[str, dict[str, list[float]]]:
    """Per-key ns of one whole-request walk, by the phase its keys are in, for each contender.

    One request's ``n_keys`` keys (all stored, so no walk stops) are walked
    while new, while in flight (the same request again, then a second
    request joining), and when resolved.  Returns ``{class: {contender: [ns per key, ...]}}``.
    """
    import os

    out: dict[str, dict[str, list[float]]] = {}
    clock = time.thread_time_ns
    for rep in range(repeats):
        shift = rep % 3
        for who in CONTENDERS[shift:] + CONTENDERS[:shift]:
            keys = [os.urandom(16) + i.to_bytes(4, "little") for i in range(n_keys)]
            tier = SetTier(set(keys))
            impl = baseline_impl(tier) if who == "baseline" else verified_impl(tier)
            m = impl.manager
            first, second = ReqContext("first"), ReqContext("second")

            def walk(label: str, ctx: ReqContext, m: Any = m, who: str = who, keys: list[bytes] = keys) -> None:
                t0 = clock()
                if who == "chain":
                    m.lookup_chain(keys, ctx)
                else:
                    chain_walk(m.lookup, keys, ctx)
                out.setdefault(label, {}).setdefault(who, []).append((clock() - t0) / n_keys)

            gc.collect()
            gc.disable()
            try:
                walk("new", first)
                m.flush()
                walk("in flight, same request", first)
                walk("in flight, another request joins", second)
                impl.pump()
                m.lookup(b"\0" * 20, ReqContext("drain"))  # applies the results (off the clock)
                walk("resolved, same request", first)
            finally:
                gc.enable()
            m.shutdown()
    return out
