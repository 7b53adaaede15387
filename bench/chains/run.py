"""Whole-request walks: what ``lookup_chain`` costs the scheduler per key, and the backend work it saves.

A serving engine's scheduler asks, each step and for each waiting request,
"how many leading blocks of this prompt are in the tier?".  Three walks
answer it, each on its own manager over equal tiers
(:mod:`bench.chains.walks`): ``lookup_chain``, kvprobe's ``lookup`` in the
loop an engine would write (stopping after the first False), and the same
loop over the unverified baseline.  The benchmark has three parts, one
module each (their docstrings say what each measures and how):

* **Cost** (``--part cost``, :mod:`bench.chains.cost`): the scheduler's CPU
  time per key looked up, the walks in lockstep on one plan, then by phase;
* **Saving** (``--part saving``, :mod:`bench.chains.saving`): keys probed and
  backend calls per step when most chains miss early, against ``lookup``
  of every key (counts, the same on every machine);
* **Windows** (``--part windows``, :mod:`bench.chains.windows`): per window
  schedule, the steps a request waits against the backend keys it costs
  (counts).

This module is the command line and the suite's rows (``bench.run_all``);
the parts' names are importable from here as well.

Run: ``python -m bench.chains.run [--quick] [--part cost|saving|windows] [--steps N] [--repeats N] [--capacity KEYS]``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Sequence

from bench.chains.cost import PHASES, ChainTally, ChainWorkload, cost_report, measure_chains, measure_phases
from bench.chains.saving import Outcome, SavingScenario, run_saving, saving_report
from bench.chains.walks import CONTENDERS, ENGINES, SetTier, chain_walk
from bench.chains.windows import (
    CHAIN_LENGTHS,
    MIXES,
    SCHEDULES,
    WindowTrade,
    stored_prefixes,
    window_trade,
    windows_report,
)
from bench.common import Row, fmt_ratio

__all__ = [
    "CHAIN_LENGTHS",
    "CONTENDERS",
    "ENGINES",
    "MIXES",
    "PHASES",
    "SCHEDULES",
    "ChainTally",
    "ChainWorkload",
    "Outcome",
    "SavingScenario",
    "SetTier",
    "WindowTrade",
    "chain_walk",
    "cost_report",
    "measure_chains",
    "measure_phases",
    "rows",
    "run_saving",
    "saving_report",
    "stored_prefixes",
    "window_trade",
    "windows_report",
]

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
