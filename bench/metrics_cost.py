"""Scheduler-thread cost of Prometheus metrics: MeteredManager against the plain manager.

The same scheduler-shaped workload as ``bench.hotpath`` (its workload and
its per-step timing, reused), run by two verified managers in lockstep, one
step of one then the same step of the other, the order alternating every
step: the plain :class:`~kvprobe.statemachine.AsyncLookupManager` and
:class:`~kvprobe.metrics.MeteredManager` (histograms recorded at flush and
drain) with a :class:`~kvprobe.metrics.LookupMetrics` collector registered
and scraped once per step, off the clock, as a Prometheus server would.
Only scheduler-thread calls are timed (CPU time of the thread).

Run: ``python -m bench.metrics_cost [--quick] [--repeats N] [--steps N]``.
"""

from __future__ import annotations

import argparse
import gc
import sys
from collections.abc import Sequence

from prometheus_client import CollectorRegistry, generate_latest

from bench.common import Impl, Row, StoredByHash, Workload, fmt_ratio, manual_impl, verified_impl
from bench.hotpath import CLASSES, LOOKUP_CLASSES, _step, _Tally
from bench.hotpath import report as hotpath_report
from kvprobe.metrics import LookupMetrics, MeteredManager

__all__ = ["METERED", "PLAIN", "main", "measure", "report", "rows"]


def metered_impl(registry: CollectorRegistry) -> Impl:
    """Like :func:`bench.common.verified_impl`, on MeteredManager with a registered collector."""
    m = MeteredManager(StoredByHash(0.5), worker="manual")
    LookupMetrics(m).register(registry)
    # Named "verified" like verified_impl's: the name selects the kvprobe
    # worker's queue in bench.hotpath's step.
    return manual_impl(m)


# bench.hotpath's report compares the tallies under these two names (its
# verified manager against its baseline); here they are the metered manager
# and the plain one, so its table (with its net-of-loop-floor ratios) is reused.
METERED, PLAIN = "verified", "baseline"


def measure(workload: Workload, repeats: int, delay: int = 1) -> dict[str, list[_Tally]]:
    """Run ``repeats`` lockstep repetitions; the tallies under :data:`METERED` and :data:`PLAIN`."""
    plan = [
        ([(k, r.ctx) for r in waiting for k in r.keys], [r.ctx.req_id for r in finishing])
        for _, waiting, finishing in workload.schedule()
    ]
    results: dict[str, list[_Tally]] = {METERED: [], PLAIN: []}
    scraped = 0
    for rep in range(repeats):
        registry = CollectorRegistry()
        impls = {PLAIN: verified_impl(), METERED: metered_impl(registry)}
        tallies = {name: _Tally() for name in impls}
        gc.collect()
        gc.disable()
        try:
            for step, (pairs, finishing) in enumerate(plan):
                order = list(impls) if (step + rep) % 2 == 0 else list(impls)[::-1]
                for name in order:
                    _step(impls[name], tallies[name], pairs, finishing, delay)
                scraped += len(generate_latest(registry))  # a scrape per step, off the clock
        finally:
            gc.enable()
        for name, impl in impls.items():
            impl.manager.shutdown()
            results[name].append(tallies[name])
    assert scraped > 0
    return results


def _ratios(results: dict[str, list[_Tally]], classes: Sequence[str]) -> list[float]:
    """Metered/plain time of ``classes`` together, per repetition."""
    return [
        sum(m.ns[c] for c in classes) / sum(p.ns[c] for c in classes)
        for m, p in zip(results[METERED], results[PLAIN], strict=True)
    ]


def report(results: dict[str, list[_Tally]]) -> str:
    """bench.hotpath's table, read with "verified" = metered and "baseline" = plain."""
    return (
        "verified = MeteredManager with a registered collector, baseline = the plain manager "
        "(ratio v/b = metered/plain)\n\n" + hotpath_report(results)
    )


def rows(quick: bool) -> list[Row]:
    workload = Workload(steps=30 if quick else 120)
    repeats = 3 if quick else 9
    results = measure(workload, repeats)
    return [
        Row("metrics_cost", "all lookups, metered/plain", fmt_ratio(_ratios(results, ("drain", *LOOKUP_CLASSES)))),
        Row("metrics_cost", "flush, metered/plain", fmt_ratio(_ratios(results, ("flush",)))),
        Row(
            "metrics_cost",
            "scheduler total, metered/plain",
            fmt_ratio(_ratios(results, CLASSES)),
            f"{repeats} repeats, lockstep, a scrape per step",
        ),
    ]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--repeats", type=int, default=None)
    parser.add_argument("--steps", type=int, default=None)
    args = parser.parse_args(argv)
    workload = Workload(steps=args.steps or (30 if args.quick else 120))
    repeats = args.repeats or (3 if args.quick else 9)
    results = measure(workload, repeats)
    print(f"metrics cost: {workload.steps} steps x {repeats} repeats, lockstep interleaved, a scrape per step\n")
    print(report(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
