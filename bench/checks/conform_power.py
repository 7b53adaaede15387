"""The power of ``kvprobe conform``: how often and how fast it fails each lying tier.

``python -m bench.checks.conform_power`` runs the default ``kvprobe conform`` (manual
worker, 100 examples of up to 50 steps, 1 s call timeout) on every broken
tier of ``tests/conform/lying_tiers.py`` from seeds 0..N-1 (``--seeds``,
default 100), and on the honest in-memory tier from fewer seeds
(``--control-seeds``, default 20: its failures would be false alarms).  Shrinking
is off: it does not change whether a run fails, only how its report reads.
Prints a Markdown table: per tier, the seeds whose run failed, and the time
and number of generated runs to the first failure (median and worst).
Nothing is asserted: ``tests/conform/test_lying_tiers.py`` is the CI case.
"""

from __future__ import annotations

import argparse
import importlib
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from kvprobe.conform import DEFAULT_TIMEOUT_S, load_factory
from kvprobe.progress import Progress
from kvprobe.testing.stateful import memory_factory, run_conformance

__all__ = ["main", "power"]

_TIERS_DIR = Path(__file__).resolve().parents[2] / "tests" / "conform"


def power(factory: Callable[[], object], seeds: int, progress: Progress, label: str) -> dict[str, float]:
    """Run the default conform from ``seeds`` seeds; failures, and time/runs to the first."""
    failed = 0
    times: list[float] = []
    runs: list[int] = []
    for seed in range(seeds):
        progress.show(f"{label}: seed {seed + 1}/{seeds}, {failed} failed")
        result = run_conformance(factory, seed=seed, shrink=False, timeout_s=DEFAULT_TIMEOUT_S)
        if not result.passed:
            failed += 1
            times.append(result.seconds)
            runs.append(result.runs)
    out: dict[str, float] = {"failed": failed, "seeds": seeds}
    if times:
        out |= {
            "median_s": statistics.median(times),
            "max_s": max(times),
            "median_runs": statistics.median(runs),
            "max_runs": max(runs),
        }
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=100, help="seeds per lying tier (default 100)")
    parser.add_argument("--control-seeds", type=int, default=20, help="seeds for the honest tier (default 20)")
    parser.add_argument("--only", nargs="*", default=(), help="lying tiers to run (names of the table)")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(_TIERS_DIR))
    lying_tiers: dict[str, tuple[str, str]] = importlib.import_module("lying_tiers").LYING_TIERS

    progress = Progress(sys.stderr)
    lines = [
        "| tier | defect | seeds failed | time to first failure, median / worst "
        "| runs generated to it, median / worst |",
        "|---|---|---|---|---|",
    ]
    start = time.monotonic()
    for name, (path, defect) in lying_tiers.items():
        if args.only and name not in args.only:
            continue
        got = power(load_factory(path), args.seeds, progress, name)
        progress.clear()
        lines.append(_row(name, defect, got))
    if args.control_seeds and not args.only:
        got = power(memory_factory, args.control_seeds, progress, "honest")
        progress.clear()
        lines.append(_row("honest (control)", "none: every failure here is a false alarm", got))
    print("\n".join(lines))
    print(f"\n({time.monotonic() - start:.0f} s in all)")
    return 0


def _row(name: str, defect: str, got: dict[str, float]) -> str:
    failed = f"{got['failed']:.0f}/{got['seeds']:.0f}"
    if "median_s" not in got:
        return f"| {name} | {defect} | {failed} | - | - |"
    return (
        f"| {name} | {defect} | {failed} | {got['median_s']:.2f} s / {got['max_s']:.2f} s "
        f"| {got['median_runs']:.0f} / {got['max_runs']:.0f} |"
    )


if __name__ == "__main__":
    sys.exit(main())
