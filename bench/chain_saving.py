"""Backend work saved by stopping a request's walk at its first known MISS.

A prefix cache holds a request's blocks up to some depth: the first block it
lacks ends the hit, and every probe of a later block is wasted.  Here most
chains miss early: requests share a few prefixes of which the tier holds only
the first blocks, and their own tails are not stored.  Three engines ask the
same requests, each on its own kvprobe manager over the same tier:

* ``lookup_chain``: one ``lookup_chain`` per request per step;
* ``per-key, stop at miss``: kvprobe's ``lookup`` in a loop that stops after
  the first False (the same walk, spelled out);
* ``per-key, every key``: ``lookup`` of every key of the request, the answer
  computed afterwards (what an engine written against single lookups does,
  e.g. the first version of ``examples/vllm_tier.py``).

The backend answers a bounded number of keys per step (``capacity``; an S3
tier keeps about 25 HEADs in flight, so its keys per scheduler step are
bounded too), first come first served, a group when the budget covers it.
A request is cleaned up ``finish_after`` steps after it arrived (it was
served meanwhile), so its probes, and their verdicts, outlive its answer.
Reported per engine: keys probed and backend calls per step, and the steps
from a request's arrival until its answer is no longer pending.  Every final
answer is checked against the tier's contents (the leading stored keys).

Run: ``python -m bench.chain_saving [--steps N] [--capacity KEYS]``.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from bench.chains import SetTier, chain_walk
from kvprobe.statemachine import AsyncLookupManager, ManualWorker, ProbeGroup, ReqContext

__all__ = ["ENGINES", "main", "run"]


def _walk_every_key(m: AsyncLookupManager, keys: Sequence[bytes], ctx: ReqContext) -> tuple[int, bool, bool]:
    verdicts = [m.lookup(key, ctx) for key in keys]
    hits = 0
    for verdict in verdicts:
        if verdict is None:
            return hits, False, True
        if not verdict:
            return hits, True, False
        hits += 1
    return hits, False, False


def _walk_chain(m: AsyncLookupManager, keys: Sequence[bytes], ctx: ReqContext) -> tuple[int, bool, bool]:
    answer = m.lookup_chain(keys, ctx)
    return answer.leading_hits, answer.stopped_at_miss, answer.pending


def _walk_stop(m: AsyncLookupManager, keys: Sequence[bytes], ctx: ReqContext) -> tuple[int, bool, bool]:
    hits, stopped, pending, _ = chain_walk(m.lookup, keys, ctx)
    return hits, stopped, pending


ENGINES: dict[str, Callable[[AsyncLookupManager, Sequence[bytes], ReqContext], tuple[int, bool, bool]]] = {
    "lookup_chain": _walk_chain,
    "per-key, stop at miss": _walk_stop,
    "per-key, every key": _walk_every_key,
}


@dataclass
class Scenario:
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


def run(engine: str, scenario: Scenario, capacity: int, drain_steps: int = 60) -> Outcome:
    arrivals = scenario.build()
    stored = scenario.stored
    walk = ENGINES[engine]
    m = AsyncLookupManager(SetTier(stored), worker="manual")
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
            hits, _stopped, pending = walk(m, keys, ctx)
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
        for ctx, _keys in (
            arrivals[step - scenario.finish_after] if 0 <= step - scenario.finish_after < len(arrivals) else ()
        ):
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


def report(outcomes: dict[str, Outcome]) -> str:
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


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--capacity", type=int, default=8192, help="keys the tier answers per step")
    args = parser.parse_args(argv)
    outcomes = {engine: run(engine, Scenario(steps=args.steps), args.capacity) for engine in ENGINES}
    scenario = Scenario(steps=args.steps)
    print(
        f"chain saving: {args.steps} steps, {scenario.arrivals_per_step} arrivals per step, {scenario.n_prefixes} "
        f"shared prefixes of {scenario.prefix_len} blocks stored {scenario.stored_depth[0]}-"
        f"{scenario.stored_depth[1]} deep, own tails of {scenario.tail[0]}-{scenario.tail[1]} blocks; "
        f"tier capacity {args.capacity:,} keys per step\n"
    )
    print(report(outcomes))
    return 0


def rows(quick: bool) -> list[Any]:
    """Rows for ``bench.run_all`` (not registered there by this module)."""
    from bench.common import Row

    scenario_steps = 15 if quick else 40
    out = []
    for engine in ENGINES:
        o = run(engine, Scenario(steps=scenario_steps), 8192)
        out.append(
            Row(
                "chain_saving",
                f"{engine}: keys probed / backend calls per step",
                f"{statistics.mean(o.probed_per_step):,.0f} / {statistics.mean(o.calls_per_step):.1f}",
                f"steps to an answer mean {statistics.mean(o.steps_to_answer):.2f}, max {max(o.steps_to_answer)}; "
                f"wrong {o.wrong}",
            )
        )
    return out


if __name__ == "__main__":
    sys.exit(main())
