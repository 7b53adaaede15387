"""The windows part of :mod:`bench.chains.run` (``--part windows``): the trade of each window schedule.

A schedule is a first window and a growth (``chain_window`` and
``chain_window_growth``: window ``k`` holds ``ceil(first * growth**k)``
keys).  One request at a time on its own manager (nothing shared): the steps a
request waits until its answer is decided, against the backend keys (HEADs
on an object store) it costs, for chains of 32, 256 and 3,600 blocks.  Each
step is one walk, a flush, and the worker answering before the next step
(the best case for steps: a slow tier adds its own latency to every
window).  The stored prefix of a request is drawn, with a fixed seed, from
one of two stated mixes: ``mixed``, a quarter of the requests with nothing
stored, a quarter with everything, half with a prefix whose length is
uniform in 1..n-1; ``short``, a prefix uniform in 0..16 (a shared system
prompt: the issue's 3,600-block prompt with ten stored blocks).  The ideal
is the stored prefix plus its first missing block.  These are counts, the
same on every machine.

A module of its own: it compares schedules of one walk, not walks.
"""

from __future__ import annotations

import random
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field

from bench.chains.walks import SetTier
from kvprobe.statemachine import AsyncLookupManager, ManualWorker, ReqContext

__all__ = ["CHAIN_LENGTHS", "MIXES", "SCHEDULES", "WindowTrade", "stored_prefixes", "window_trade", "windows_report"]


#: The schedules the windows part compares, ``(first window, growth)``:
#: ``"all"``, the default growth 2 with four first windows, and the
#: growths 1.5 and 1.25 (fewer keys past the stored prefix, more windows).
SCHEDULES: tuple[tuple[int | str, float], ...] = (
    ("all", 2.0),
    (1, 2.0),
    (4, 2.0),
    (16, 2.0),
    (64, 2.0),
    (4, 1.5),
    (16, 1.5),
    (32, 1.5),
    (4, 1.25),
    (16, 1.25),
    (32, 1.25),
)
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


def window_trade(n: int, schedule: int | str, prefixes: Sequence[int], growth: float = 2.0) -> WindowTrade:
    """Walk one request per stored prefix until decided; count its steps and the keys the backend checked."""
    out = WindowTrade()
    keys = [i.to_bytes(4, "little") * 5 for i in range(n)]
    for p in prefixes:
        tier = SetTier(set(keys[:p]))
        m = AsyncLookupManager(
            tier,
            worker="manual",
            chain_window=schedule,  # type: ignore[arg-type]
            chain_window_growth=growth,
        )
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
    lines = [
        f"| blocks | first window | growth | {head} | wrong answers |",
        "|---|---|---|" + "---|---|" * len(MIXES) + "---|",
    ]
    for n in CHAIN_LENGTHS:
        prefixes = {mix: stored_prefixes(n, samples, mix) for mix in MIXES}
        for schedule, growth in SCHEDULES:
            cells = []
            wrong = 0
            for mix in MIXES:
                t = window_trade(n, schedule, prefixes[mix], growth)
                wrong += t.wrong
                cells.append(f"{statistics.mean(t.steps):.2f} / {max(t.steps)}")
                cells.append(f"{statistics.mean(t.heads):,.0f} ({sum(t.heads) / sum(t.ideal):.2f})")
            shown = "-" if schedule == "all" else f"{growth:g}"
            lines.append(f"| {n:,} | {schedule} | {shown} | {' | '.join(cells)} | {wrong} |")
    return "\n".join(lines)
