"""Verdict latency in scheduler steps: verified manager against the baseline.

Both managers run with their real background threads, side by side in one
loop over the same request stream, against backends with the same seeded
call latencies.  One simulated scheduler step is:

1. for each waiting request: look up each of its keys, then spend
   ``sched_ms`` on other scheduling work (``time.sleep``, so the workers run);
2. ``flush``;
3. the model's forward pass: ``forward_ms`` of sleep.

A request waits until every one of its keys has a verdict, then finishes
(``cleanup``).  For each request we count the steps from its first lookup to
the step whose lookups first see all its verdicts (1 = the step after its
first flush, the least any asynchronous design can do).  The baseline applies
results only at the first lookup after a flush, so a result that lands during
a step's lookups waits for the next step; the verified manager applies
results at any lookup.

Run: ``python -m bench.hotpath.latency [--quick]``.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from collections.abc import Sequence
from typing import Any

from bench.common import Row
from bench.hotpath.baseline import BaselineManager
from kvprobe.statemachine import AsyncLookupManager, ReqContext

__all__ = ["main", "measure", "rows"]


class SlowTier:
    """Each call sleeps a seeded random time (releasing the GIL), then answers."""

    def __init__(self, seed: int, lo_ms: float, hi_ms: float) -> None:
        self.rng = random.Random(seed)
        self.lo, self.hi = lo_ms / 1000, hi_ms / 1000

    def batch_lookup(self, keys: Sequence[bytes], req_context: object) -> list[bool]:
        time.sleep(self.rng.uniform(self.lo, self.hi))
        return [k[0] < 128 for k in keys]


def _percentiles(values: list[int]) -> dict[str, float]:
    values = sorted(values)

    def pick(q: float) -> float:
        return float(values[min(len(values) - 1, int(q * len(values)))])

    return {"mean": statistics.fmean(values), "p50": pick(0.5), "p90": pick(0.9), "p99": pick(0.99), "max": values[-1]}


def measure(
    steps: int = 60,
    arrivals: int = 3,
    keys_per_request: int = 64,
    sched_ms: float = 0.5,
    forward_ms: float = 15.0,
    backend_ms: tuple[float, float] = (0.5, 8.0),
    seed: int = 11,
) -> dict[str, list[int]]:
    managers: dict[str, Any] = {
        "verified": AsyncLookupManager(SlowTier(seed, *backend_ms), name="verified"),
        "baseline": BaselineManager(SlowTier(seed, *backend_ms)),
    }
    rng = random.Random(seed)
    # One list of requests; each manager marks the ones it has finished.
    live: list[tuple[ReqContext, tuple[bytes, ...], int, dict[str, bool]]] = []
    latencies: dict[str, list[int]] = {name: [] for name in managers}
    serial = 0
    try:
        for step in range(steps):
            for _ in range(arrivals):
                keys = tuple(rng.randbytes(20) for _ in range(keys_per_request))
                live.append((ReqContext(f"r{serial}"), keys, step, dict.fromkeys(managers, False)))
                serial += 1
            # The two managers take turns request by request, so that both
            # see the same wall-clock moments.
            for ctx, keys, first, done in live:
                for name, m in managers.items():
                    if done[name]:
                        continue
                    known = True
                    for key in keys:
                        if m.lookup(key, ctx) is None:
                            known = False
                    if known:
                        latencies[name].append(step - first)
                        m.cleanup(ctx.req_id)
                        done[name] = True
                time.sleep(sched_ms / 1000)
            live = [r for r in live if not all(r[3].values())]
            for m in managers.values():
                m.flush()
            time.sleep(forward_ms / 1000)
    finally:
        for m in managers.values():
            m.shutdown()
    return latencies


def report(latencies: dict[str, list[int]]) -> str:
    lines = ["| manager | requests | mean | p50 | p90 | p99 | max |", "|---|---|---|---|---|---|---|"]
    for name, values in latencies.items():
        p = _percentiles(values)
        cells = [f"{p['mean']:.2f}", *(f"{p[q]:.0f}" for q in ("p50", "p90", "p99", "max"))]
        lines.append(f"| {name} | {len(values)} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def rows(quick: bool) -> list[Row]:
    lat = measure(steps=25 if quick else 80)
    out = []
    for name, values in lat.items():
        p = _percentiles(values)
        out.append(
            Row(
                "latency",
                f"{name}: steps to verdict",
                f"mean {p['mean']:.2f}, p50 {p['p50']:.0f}, p90 {p['p90']:.0f}, max {p['max']:.0f}",
                f"{len(values)} requests",
            )
        )
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--steps", type=int, default=None)
    args = parser.parse_args(argv)
    steps = args.steps or (25 if args.quick else 80)
    lat = measure(steps=steps)
    print(
        f"verdict latency in steps ({steps} steps, threaded workers, backend 0.5-8 ms per call, forward pass 15 ms)\n"
    )
    print(report(lat))
    return 0


if __name__ == "__main__":
    sys.exit(main())
