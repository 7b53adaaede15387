"""What the verified manager costs the scheduler thread, per operation, against the unverified baseline.

Both managers run the same scheduler-shaped workload (:class:`bench.common.Workload`)
in lockstep, one step of one then the same step of the other, the order
alternating every step, so that a burst of machine noise hits both.  The
worker is pumped by the benchmark, off the clock: the batch flushed at step
``t`` is answered after the flush of step ``t + delay``, so at step ``t + 1``
its keys are still in flight.  Only scheduler-thread calls are timed:

* ``drain``: the first lookup of a step, which applies the results published
  since the last step (both managers apply them there);
* ``new`` / ``pending`` / ``in_flight`` / ``resolved``: the other lookups,
  classified by the phase their key had before the block ran (``pending``:
  another request asked the same key earlier in this step), each class timed
  as one block (lookups of one step commute, so grouping them by class does
  not change any verdict);
* ``flush`` and ``cleanup``: per call.

Every block is also timed with a no-op callable in place of ``lookup`` (the
"loop floor": the for loop, tuple unpacking and call); ``net`` ratios
subtract it.  GC is disabled while a repetition runs and collected between
repetitions.  No timing is asserted anywhere: this prints figures.

The same measurement answers two more questions:

* ``--metered``: :class:`~kvprobe.metrics.MeteredManager` with a registered
  :class:`~kvprobe.metrics.LookupMetrics` collector, scraped once per step
  off the clock as a Prometheus server would, against the plain manager:
  what metrics cost the scheduler.
* ``--commits REV [REV ...]``: the verified/baseline ratios of several
  commits side by side (:mod:`bench.commits`; ``bench/`` of ``--bench-rev``,
  by default the first commit's, runs in every checkout): did a change cost
  the scheduler anything?  The figure compared is each run's own ratio (the
  baseline in the same process takes the machine's speed of the moment out).

Whole-request walks (``lookup_chain``) are priced by :mod:`bench.chains.run`.

Run::

    python -m bench.hotpath.cost [--quick] [--repeats N] [--steps N] [--delay N]
    python -m bench.hotpath.cost --metered
    python -m bench.hotpath.cost --commits 810d55c^ 810d55c HEAD --bench-rev 810d55c^ --rounds 5

Raises (exits non-zero): with ``--commits``, a revision git cannot archive,
or a run that fails or prints no ratio.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import statistics
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Sequence

from bench.commits import add_options, interleaved, last_json_line
from bench.common import Impl, Row, StoredByHash, Workload, baseline_impl, fmt_ratio, manual_impl, verified_impl

__all__ = ["CLASSES", "LOOKUP_CLASSES", "Tally", "main", "measure", "metered_rows", "parse_ratios", "rows"]

LOOKUP_CLASSES = ("new", "pending", "in_flight", "resolved")
CLASSES = ("drain", *LOOKUP_CLASSES, "flush", "cleanup")
ALL_LOOKUPS = ("drain", *LOOKUP_CLASSES)
_PHASE_CLASS = {"PENDING": "pending", "IN_FLIGHT": "in_flight", "RESOLVED": "resolved"}

#: Builds one repetition's two managers (the first is the numerator of every
#: ratio) and what runs after each step, off the clock.
Setup = Callable[[], tuple[list[Impl], Callable[[], None]]]


def _noop(key: bytes, ctx: object) -> None:
    return None


class Tally:
    """Scheduler-thread nanoseconds and calls per operation class, for one manager in one repetition."""

    def __init__(self) -> None:
        self.ns: dict[str, int] = defaultdict(int)
        self.n: dict[str, int] = defaultdict(int)
        self.floor_ns: dict[str, int] = defaultdict(int)

    def per_op(self, cls: str) -> float:
        return self.ns[cls] / self.n[cls] if self.n[cls] else float("nan")

    def floor_per_op(self, cls: str) -> float:
        return self.floor_ns[cls] / self.n[cls] if self.n[cls] else 0.0

    def total_ns(self) -> int:
        return sum(self.ns.values())


def _classify(impl: Impl, pairs: Sequence[tuple[bytes, object]]) -> dict[str, list[tuple[bytes, object]]]:
    """The lookups by the phase each key has now (off the clock)."""
    blocks: dict[str, list[tuple[bytes, object]]] = {c: [] for c in LOOKUP_CLASSES}
    seen_new: set[bytes] = set()
    phase_of = impl.phase_of
    for pair in pairs:
        phase = phase_of(pair[0])
        if phase is None:
            cls = "pending" if pair[0] in seen_new else "new"
            seen_new.add(pair[0])
        else:
            cls = _PHASE_CLASS[phase]
        blocks[cls].append(pair)
    return blocks


def _step(
    impl: Impl, tally: Tally, pairs: Sequence[tuple[bytes, object]], finishing: Sequence[str], delay: int
) -> None:
    clock = time.thread_time_ns  # CPU time of the scheduler thread: preemption by other processes is not counted
    m = impl.manager
    lookup = m.lookup
    key0, ctx0 = pairs[0]
    t0 = clock()
    lookup(key0, ctx0)
    tally.ns["drain"] += clock() - t0
    tally.n["drain"] += 1
    for cls, block in _classify(impl, pairs[1:]).items():
        if not block:
            continue
        noop = _noop
        t0 = clock()
        for key, ctx in block:
            noop(key, ctx)
        t1 = clock()
        for key, ctx in block:
            lookup(key, ctx)
        t2 = clock()
        tally.floor_ns[cls] += t1 - t0
        tally.ns[cls] += t2 - t1
        tally.n[cls] += len(block)
    t0 = clock()
    m.flush()
    tally.ns["flush"] += clock() - t0
    tally.n["flush"] += 1
    impl.pump_to(delay)  # the worker answers the batch flushed `delay` steps ago (off the clock)
    cleanup = m.cleanup
    t0 = clock()
    for req_id in finishing:
        cleanup(req_id)
    tally.ns["cleanup"] += clock() - t0
    tally.n["cleanup"] += len(finishing)


def verified_vs_baseline() -> tuple[list[Impl], Callable[[], None]]:
    """The default comparison: kvprobe's manager against the unverified baseline."""
    return [verified_impl(), baseline_impl()], lambda: None


def verified_vs_vllm() -> tuple[list[Impl], Callable[[], None]]:
    """kvprobe's manager against vLLM's released one (needs vLLM installed; see bench.hotpath.vllm_peer)."""
    from bench.hotpath.vllm_peer import vllm_impl

    return [verified_impl(), vllm_impl()], lambda: None


def metered_vs_plain() -> tuple[list[Impl], Callable[[], None]]:
    """MeteredManager with a registered collector against the plain manager; a scrape after each step.

    Raises (from the scrape): RuntimeError if the collector exports nothing.
    """
    from prometheus_client import CollectorRegistry, generate_latest

    from kvprobe.metrics import LookupMetrics, MeteredManager

    registry = CollectorRegistry()
    metered = MeteredManager(StoredByHash(0.5), worker="manual")
    LookupMetrics(metered).register(registry)

    def scrape() -> None:
        if not generate_latest(registry):
            raise RuntimeError("the metrics collector exported nothing")

    impls = [
        dataclasses.replace(manual_impl(metered), name="metered"),
        dataclasses.replace(verified_impl(), name="plain"),
    ]
    return impls, scrape


def measure(
    workload: Workload, repeats: int, delay: int = 1, setup: Setup = verified_vs_baseline
) -> dict[str, list[Tally]]:
    """Run ``repeats`` lockstep repetitions of the two managers ``setup`` builds; the tallies per manager name."""
    # The schedule is built once, outside every clock, and shared.
    plan = [
        ([(k, r.ctx) for r in waiting for k in r.keys], [r.ctx.req_id for r in finishing])
        for _, waiting, finishing in workload.schedule()
    ]
    results: dict[str, list[Tally]] = {}
    for rep in range(repeats):
        impls, after_step = setup()
        tallies = {impl.name: Tally() for impl in impls}
        gc.collect()
        gc.disable()
        try:
            for step, (pairs, finishing) in enumerate(plan):
                order = impls if (step + rep) % 2 == 0 else impls[::-1]
                for impl in order:
                    _step(impl, tallies[impl.name], pairs, finishing, delay)
                after_step()
        finally:
            gc.enable()
        for impl in impls:
            impl.manager.shutdown()
            results.setdefault(impl.name, []).append(tallies[impl.name])
    return results


def _pairs(results: dict[str, list[Tally]]) -> list[tuple[Tally, Tally]]:
    first, second = results.values()
    return list(zip(first, second, strict=True))


def per_op_ratios(results: dict[str, list[Tally]], cls: str, net: bool = False) -> list[float]:
    """Per repetition: the first manager's ns per ``cls`` call over the second's (``net``: less the loop floor)."""
    out = []
    for a, b in _pairs(results):
        ao, bo = a.per_op(cls), b.per_op(cls)
        if net:
            ao, bo = ao - a.floor_per_op(cls), bo - b.floor_per_op(cls)
        out.append(ao / bo)
    return out


def time_ratios(results: dict[str, list[Tally]], classes: Sequence[str] = CLASSES) -> list[float]:
    """Per repetition: the first manager's time in ``classes`` together over the second's."""
    return [sum(a.ns[c] for c in classes) / sum(b.ns[c] for c in classes) for a, b in _pairs(results)]


def report(results: dict[str, list[Tally]]) -> str:
    """The table of every operation class, then all lookups and the whole scheduler step."""
    a, b = results
    lines = [
        f"| operation | count/rep | {a} ns/op (median) | {b} ns/op (median) | ratio {a}/{b} median (min-max) "
        "| net of loop floor: ratio median (min-max) |",
        "|---|---|---|---|---|---|",
    ]
    for cls in CLASSES:
        n = results[a][0].n[cls]
        if not n:
            continue
        va = statistics.median(t.per_op(cls) for t in results[a])
        vb = statistics.median(t.per_op(cls) for t in results[b])
        r = per_op_ratios(results, cls)
        net = ""
        if cls in LOOKUP_CLASSES:
            rn = per_op_ratios(results, cls, net=True)
            floor = statistics.median(t.floor_per_op(cls) for t in results[a])
            net = f"{statistics.median(rn):.2f} ({min(rn):.2f}-{max(rn):.2f}); floor {floor:.0f} ns"
        lines.append(
            f"| {cls} | {n} | {va:,.0f} | {vb:,.0f} | {statistics.median(r):.2f} ({min(r):.2f}-{max(r):.2f}) | {net} |"
        )
    lines.append(f"| **all lookups** | | | | {fmt_ratio(time_ratios(results, ALL_LOOKUPS))} | |")
    lines.append(f"| **scheduler total** | | | | {fmt_ratio(time_ratios(results))} | |")
    return "\n".join(lines)


def _size(quick: bool) -> tuple[Workload, int]:
    return Workload(steps=30 if quick else 120), 3 if quick else 9


def rows(quick: bool) -> list[Row]:
    """The suite's rows (``bench.run_all``): each operation's ratio, all lookups, the whole step."""
    workload, repeats = _size(quick)
    results = measure(workload, repeats)
    out = []
    for cls in CLASSES:
        if results["verified"][0].n[cls]:
            v = statistics.median(t.per_op(cls) for t in results["verified"])
            b = statistics.median(t.per_op(cls) for t in results["baseline"])
            ratios = per_op_ratios(results, cls)
            out.append(Row("hotpath", f"{cls} ratio v/b", fmt_ratio(ratios), f"{v:,.0f} vs {b:,.0f} ns/op"))
    out.append(
        Row("hotpath", "all lookups ratio v/b", fmt_ratio(time_ratios(results, ALL_LOOKUPS)), f"{repeats} repeats")
    )
    out.append(
        Row("hotpath", "scheduler total ratio v/b", fmt_ratio(time_ratios(results)), "lookups + flush + cleanup")
    )
    return out


def metered_rows(quick: bool) -> list[Row]:
    """The suite's rows for ``--metered``: all lookups, flush and the whole step, metered over plain."""
    workload, repeats = _size(quick)
    results = measure(workload, repeats, setup=metered_vs_plain)
    return [
        Row("metrics_cost", "all lookups, metered/plain", fmt_ratio(time_ratios(results, ALL_LOOKUPS))),
        Row("metrics_cost", "flush, metered/plain", fmt_ratio(time_ratios(results, ("flush",)))),
        Row(
            "metrics_cost",
            "scheduler total, metered/plain",
            fmt_ratio(time_ratios(results)),
            f"{repeats} repeats, lockstep, a scrape per step",
        ),
    ]


# --- --commits: the same measurement on several commits ----------------------------------

# Run in each checkout: the measure of that checkout's bench/ (so the names
# it imports must stay importable), its two summary ratios at full precision
# (the table rounds them to 0.01, too coarse for 2 %).
_PROBE = """
import json, statistics
from bench.common import Workload
try:  # bench/ as organised by question; a --bench-rev from before has it flat
    from bench.hotpath.cost import LOOKUP_CLASSES, measure
except ImportError:
    from bench.hotpath import LOOKUP_CLASSES, measure
res = measure(Workload(steps={steps}), {repeats}, 1)
pairs = list(zip(res["verified"], res["baseline"]))
lookups = ("drain", *LOOKUP_CLASSES)
print(json.dumps({{
    "all lookups": statistics.median(sum(v.ns[c] for c in lookups) / sum(b.ns[c] for c in lookups) for v, b in pairs),
    "scheduler total": statistics.median(v.total_ns() / b.total_ns() for v, b in pairs),
}}))
"""
FIGURES = ("all lookups", "scheduler total")


def parse_ratios(output: str) -> dict[str, float]:
    """{"all lookups": r, "scheduler total": r} from a probe's last line (empty if absent)."""
    found = last_json_line(output)
    return {k: float(v) for k, v in found.items()} if isinstance(found, dict) else {}


def _both_ratios(output: str) -> dict[str, float] | None:
    ratios = parse_ratios(output)
    return ratios if set(FIGURES) <= set(ratios) else None


def commits_report(results: dict[str, list[dict[str, float]]]) -> str:
    """Per commit: the median over rounds of each figure, and its change against the first commit's."""
    first = next(iter(results.values()))
    lines = [
        "| commit | all lookups v/b (min-max) | vs first | scheduler total v/b (min-max) | vs first |",
        "|---|---|---|---|---|",
    ]
    for rev, runs in results.items():
        cells = []
        for figure in FIGURES:
            values = [r[figure] for r in runs]
            mine, ref = statistics.median(values), statistics.median(r[figure] for r in first)
            cells.append(f"{mine:.3f} ({min(values):.3f}-{max(values):.3f}) | {100 * (mine / ref - 1):+.1f} %")
        lines.append(f"| `{rev}` | {' | '.join(cells)} |")
    return "\n".join(lines)


def _commits_main(args: argparse.Namespace) -> None:
    steps, repeats = args.steps or 60, args.repeats or 3
    bench_rev = args.bench_rev or args.commits[0]
    probe = _PROBE.format(steps=steps, repeats=repeats)
    results = interleaved(args.commits, bench_rev, args.rounds, probe, _both_ratios)
    print(
        f"bench.hotpath.cost's measure (bench/ of {bench_rev}) on each commit: {args.rounds} interleaved rounds, "
        f"{steps} steps x {repeats} repeats each; medians over rounds of each run's median v/b\n"
    )
    print(commits_report(results))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--repeats", type=int, default=None)
    parser.add_argument("--steps", type=int, default=None)
    parser.add_argument("--delay", type=int, default=1, help="steps before the worker answers a batch")
    parser.add_argument("--metered", action="store_true", help="MeteredManager against the plain manager")
    parser.add_argument(
        "--peer",
        choices=["baseline", "vllm"],
        default="baseline",
        help="what kvprobe is timed against: the unverified baseline, or vLLM's released manager (needs vLLM)",
    )
    add_options(parser, None, "the first")
    parser.add_argument("--rounds", type=int, default=5, help="with --commits: interleaved rounds (default 5)")
    args = parser.parse_args(argv)
    if args.commits:
        _commits_main(args)
        return 0
    workload, repeats = _size(args.quick)
    workload = Workload(steps=args.steps) if args.steps else workload
    repeats = args.repeats or repeats
    setup = metered_vs_plain if args.metered else verified_vs_vllm if args.peer == "vllm" else verified_vs_baseline
    results = measure(workload, repeats, args.delay, setup)
    what = "metered against plain, a scrape per step" if args.metered else f"verified against {args.peer}"
    print(f"hot path, {what}: {workload.steps} steps x {repeats} repeats, delay {args.delay}, lockstep interleaved\n")
    print(report(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
