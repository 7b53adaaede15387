"""The saving part of :mod:`bench.chains.run` (``--part saving``): the backend work ``lookup_chain`` saves.

Most chains miss early (shared prefixes of which the tier holds only the
first blocks, unstored tails).  The engines of
:data:`bench.chain_walks.ENGINES` ask the same requests: ``lookup_chain``,
the per-key loop stopping at the miss, and ``lookup`` of every key.  The
backend answers a bounded number of keys per step, first come first served;
a request is cleaned up ``finish_after`` steps after it arrived.  Reported:
keys probed and backend calls per step, steps to an answer, and answers
checked against the tier (these are counts, not timings: the same on every
machine).  ``lookup_chain`` runs twice: with ``chain_window="all"`` (the
walk of earlier releases, which probes what the stopping loop probes) and
with the default windows.

A module of its own: its scenario and its bounded tier serve only this part.
"""

from __future__ import annotations

import random
import statistics
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

from bench.chains.walks import ENGINES, SetTier
from kvprobe.statemachine import AsyncLookupManager, ManualWorker, ProbeGroup, ReqContext
from kvprobe.statemachine.windows import DEFAULT_CHAIN_WINDOW

__all__ = ["Outcome", "SavingScenario", "run_saving", "saving_report"]


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
