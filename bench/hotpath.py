"""Scheduler-thread cost of the verified manager against the unverified baseline.

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

A second part (:mod:`bench.chains`) prices whole-request walks: requests of
16-4,096 keys asked with ``lookup_chain``, with kvprobe's per-key ``lookup``
in the loop an engine writes, and with the same loop on the baseline, in
lockstep on one plan; then the same three per phase of the keys walked.

Run: ``python -m bench.hotpath [--quick] [--repeats N] [--steps N] [--no-chain]``.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
from collections import defaultdict
from collections.abc import Sequence

from bench.chains import CONTENDERS, ChainTally, ChainWorkload, measure_chains, measure_classes
from bench.common import Impl, Row, Workload, baseline_impl, fmt_ratio, verified_impl

__all__ = ["CLASSES", "main", "measure", "rows"]

LOOKUP_CLASSES = ("new", "pending", "in_flight", "resolved")
CLASSES = ("drain", *LOOKUP_CLASSES, "flush", "cleanup")
_PHASE_CLASS = {"PENDING": "pending", "IN_FLIGHT": "in_flight", "RESOLVED": "resolved"}


def _noop(key: bytes, ctx: object) -> None:
    return None


class _Tally:
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


def _step(
    impl: Impl, tally: _Tally, pairs: Sequence[tuple[bytes, object]], finishing: Sequence[str], delay: int
) -> None:
    clock = time.thread_time_ns  # CPU time of the scheduler thread: preemption by other processes is not counted
    m = impl.manager
    lookup = m.lookup
    key0, ctx0 = pairs[0]
    t0 = clock()
    lookup(key0, ctx0)
    tally.ns["drain"] += clock() - t0
    tally.n["drain"] += 1
    # Classify the rest by the phase each key has now (off the clock).
    blocks: dict[str, list[tuple[bytes, object]]] = {c: [] for c in LOOKUP_CLASSES}
    seen_new: set[bytes] = set()
    phase_of = impl.phase_of
    for pair in pairs[1:]:
        phase = phase_of(pair[0])
        if phase is None:
            cls = "pending" if pair[0] in seen_new else "new"
            seen_new.add(pair[0])
        else:
            cls = _PHASE_CLASS[phase]
        blocks[cls].append(pair)
    for cls in LOOKUP_CLASSES:
        block = blocks[cls]
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
    # The worker answers the batch flushed `delay` steps ago (off the clock).
    submitted = m.worker.submitted if impl.name == "verified" else m.submitted
    while len(submitted) > delay:
        impl.pump()
    cleanup = m.cleanup
    t0 = clock()
    for req_id in finishing:
        cleanup(req_id)
    tally.ns["cleanup"] += clock() - t0
    tally.n["cleanup"] += len(finishing)


def measure(workload: Workload, repeats: int, delay: int = 1) -> dict[str, list[_Tally]]:
    """Run ``repeats`` lockstep repetitions; return the tallies per manager."""
    # The schedule is built once, outside every clock, and shared.
    plan = [
        ([(k, r.ctx) for r in waiting for k in r.keys], [r.ctx.req_id for r in finishing])
        for _, waiting, finishing in workload.schedule()
    ]
    results: dict[str, list[_Tally]] = {"verified": [], "baseline": []}
    for rep in range(repeats):
        impls = [verified_impl(), baseline_impl()]
        tallies = {impl.name: _Tally() for impl in impls}
        gc.collect()
        gc.disable()
        try:
            for step, (pairs, finishing) in enumerate(plan):
                order = impls if (step + rep) % 2 == 0 else impls[::-1]
                for impl in order:
                    _step(impl, tallies[impl.name], pairs, finishing, delay)
        finally:
            gc.enable()
        for impl in impls:
            impl.manager.shutdown()
            results[impl.name].append(tallies[impl.name])
    return results


def _ratios(results: dict[str, list[_Tally]], cls: str, net: bool = False) -> list[float]:
    out = []
    for v, b in zip(results["verified"], results["baseline"], strict=True):
        vo, bo = v.per_op(cls), b.per_op(cls)
        if net:
            vo, bo = vo - v.floor_per_op(cls), bo - b.floor_per_op(cls)
        out.append(vo / bo)
    return out


def report(results: dict[str, list[_Tally]]) -> str:
    lines = [
        "| operation | count/rep | verified ns/op (median) | baseline ns/op (median) | ratio v/b median (min-max) "
        "| net of loop floor: ratio median (min-max) |",
        "|---|---|---|---|---|---|",
    ]
    for cls in CLASSES:
        n = results["verified"][0].n[cls]
        if not n:
            continue
        v = statistics.median(t.per_op(cls) for t in results["verified"])
        b = statistics.median(t.per_op(cls) for t in results["baseline"])
        r = _ratios(results, cls)
        net = ""
        if cls in LOOKUP_CLASSES:
            rn = _ratios(results, cls, net=True)
            floor = statistics.median(t.floor_per_op(cls) for t in results["verified"])
            net = f"{statistics.median(rn):.2f} ({min(rn):.2f}-{max(rn):.2f}); floor {floor:.0f} ns"
        lines.append(
            f"| {cls} | {n} | {v:,.0f} | {b:,.0f} | {statistics.median(r):.2f} ({min(r):.2f}-{max(r):.2f}) | {net} |"
        )
    tot = [v.total_ns() / b.total_ns() for v, b in zip(results["verified"], results["baseline"], strict=True)]
    all_lookups = [
        sum(v.ns[c] for c in ("drain", *LOOKUP_CLASSES)) / sum(b.ns[c] for c in ("drain", *LOOKUP_CLASSES))
        for v, b in zip(results["verified"], results["baseline"], strict=True)
    ]
    lines.append(f"| **all lookups** | | | | {fmt_ratio(all_lookups)} | |")
    lines.append(f"| **scheduler total** | | | | {fmt_ratio(tot)} | |")
    return "\n".join(lines)


def rows(quick: bool) -> list[Row]:
    workload = Workload(steps=30 if quick else 120)
    repeats = 3 if quick else 9
    results = measure(workload, repeats)
    out = []
    for cls in CLASSES:
        if results["verified"][0].n[cls]:
            v = statistics.median(t.per_op(cls) for t in results["verified"])
            b = statistics.median(t.per_op(cls) for t in results["baseline"])
            out.append(
                Row("hotpath", f"{cls} ratio v/b", fmt_ratio(_ratios(results, cls)), f"{v:,.0f} vs {b:,.0f} ns/op")
            )
    all_lookups = [
        sum(v.ns[c] for c in ("drain", *LOOKUP_CLASSES)) / sum(b.ns[c] for c in ("drain", *LOOKUP_CLASSES))
        for v, b in zip(results["verified"], results["baseline"], strict=True)
    ]
    out.append(Row("hotpath", "all lookups ratio v/b", fmt_ratio(all_lookups), f"{repeats} repeats, lockstep"))
    tot = [v.total_ns() / b.total_ns() for v, b in zip(results["verified"], results["baseline"], strict=True)]
    out.append(Row("hotpath", "scheduler total ratio v/b", fmt_ratio(tot), "lookups + flush + cleanup"))
    return out + chain_rows(quick)


def chain_report(tallies: Sequence[ChainTally], classes: dict[str, dict[str, list[float]]]) -> str:
    """The chain tables: the mixed workload, then per phase of the keys."""
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
        ratios = [t.per_key(who) / t.per_key("baseline") for t in tallies]
        lines.append(f"| {who} | {ns:,.0f} | {statistics.median(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f}) |")
    lines += ["", "| keys walked | " + " | ".join(f"{w} ns/key" for w in CONTENDERS) + " | chain / baseline |"]
    lines.append("|---|---|---|---|---|")
    for label, by_who in classes.items():
        med = {w: statistics.median(by_who[w]) for w in CONTENDERS}
        cells = " | ".join(f"{med[w]:,.0f}" for w in CONTENDERS)
        lines.append(f"| {label} | {cells} | {med['chain'] / med['baseline']:.2f} |")
    return "\n".join(lines)


def chain_rows(quick: bool) -> list[Row]:
    tallies = measure_chains(ChainWorkload(steps=20 if quick else 60), 3 if quick else 7)
    out = []
    for who in ("chain", "per-key"):
        ratios = [t.per_key(who) / t.per_key("baseline") for t in tallies]
        ns = statistics.median(t.per_key(who) for t in tallies)
        base = statistics.median(t.per_key("baseline") for t in tallies)
        out.append(
            Row(
                "hotpath",
                f"chain workload: {who} per key / baseline",
                fmt_ratio(ratios),
                f"{ns:,.0f} vs {base:,.0f} ns/key",
            )
        )
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--repeats", type=int, default=None)
    parser.add_argument("--steps", type=int, default=None)
    parser.add_argument("--delay", type=int, default=1, help="steps before the worker answers a batch")
    parser.add_argument("--no-chain", action="store_true", help="skip the chain workload")
    parser.add_argument("--chain-only", action="store_true", help="only the chain workload")
    args = parser.parse_args(argv)
    if not args.chain_only:
        _per_key_main(args)
    if not args.no_chain:
        steps = args.steps or (20 if args.quick else 60)
        repeats = args.repeats or (3 if args.quick else 7)
        tallies = measure_chains(ChainWorkload(steps=steps), repeats, args.delay)
        classes = measure_classes(repeats=3 if args.quick else 7)
        print(f"\nchain workload: {steps} steps x {repeats} repeats, lockstep interleaved\n")
        print(chain_report(tallies, classes))
    return 0


def _per_key_main(args: argparse.Namespace) -> None:
    workload = Workload(steps=args.steps or (30 if args.quick else 120))
    repeats = args.repeats or (3 if args.quick else 9)
    results = measure(workload, repeats, args.delay)
    print(f"hot path: {workload.steps} steps x {repeats} repeats, delay {args.delay}, lockstep interleaved\n")
    print(report(results))


if __name__ == "__main__":
    sys.exit(main())
