"""Starvation of two (or more) commits side by side: did a change cost the scheduler its rate?

The same benchmark, ``bench/starvation.py`` from ``--bench-rev``, runs
against each commit's library (checked out as ``bench.hotpath_commits``
does), each run a separate process building its own block tree.  Runs are
interleaved across commits and the order rotates, so a busy phase of the
machine hits every commit alike.  The figure compared is each backend's
busy/idle lookup rate divided by the GIL-free control's in the same round
of the same process (what is left once the machine's own contention is taken
out), and the raw busy/idle ratio itself, since the control runs on the same
worker and changes with it; the medians over every round of every run of a
commit are printed side by side.

Run from the repository::

    python -m bench.starvation_commits bd017b2^ HEAD --keys 40000 --runs 4 --rounds 3

(``bd017b2`` made groups run concurrently and ``ProcessBackend`` follow
that concurrency with more helpers.)  Prints a table; asserts nothing.

Raises (exits non-zero): a revision git cannot archive, or a run that fails
or prints no figures.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Sequence

from bench.common import fmt_spread, rotated
from bench.hotpath_commits import checkout, last_json_line, run_probe

__all__ = ["NAMES", "main", "parse_figures"]

CONTROL = "control: GIL-free C"
#: What the probe reports per backend and round.
KINDS = ("busy/idle", "ms lost", "vs control")
#: The worker-thread and helper-process NIXL paths, and the control each is divided by.
NAMES = ("ProcessBackend(NixlPosixBackend)", "NixlPosixBackend", "ProcessBackend(FsBackend)", CONTROL)

# Run in each checkout: bench.starvation's own measure; per round, each
# backend's busy/idle ratio and that ratio over the control's.
_PROBE = """
import json, logging
logging.disable(logging.INFO)
from bench.starvation import measure
res = measure({keys}, {groups}, {rounds}, names={names!r})
ratio = {{name: [busy / idle for idle, busy, _ in rows] for name, rows in res.items()}}
control = ratio[{control!r}]
print(json.dumps({{
    "busy/idle": ratio,
    "ms lost": {{
        name: [1000 * window * (1 - busy / idle) for idle, busy, window in rows] for name, rows in res.items()
    }},
    "vs control": {{n: [m / c for m, c in zip(r, control)] for n, r in ratio.items() if n != {control!r}}},
}}))
"""


def parse_figures(output: str) -> dict[str, dict[str, list[float]]]:
    """The probe's last line: {kind: {name: [one figure per round]}} for each of KINDS (empty if absent)."""
    found = last_json_line(output)
    if not isinstance(found, dict) or set(found) != set(KINDS):
        return {}
    return {kind: {n: [float(x) for x in xs] for n, xs in table.items()} for kind, table in found.items()}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("revs", nargs="+", help="commits to compare (or dir:PATH); the first is the reference")
    parser.add_argument("--bench-rev", default="HEAD", help="the commit whose bench/ every checkout runs")
    parser.add_argument("--keys", type=int, default=40_000)
    parser.add_argument("--groups", type=int, default=4)
    parser.add_argument("--runs", type=int, default=4, help="processes per commit, interleaved")
    parser.add_argument("--rounds", type=int, default=3, help="rounds inside each process")
    args = parser.parse_args(argv)
    got: dict[str, dict[str, dict[str, list[float]]]] = {rev: {kind: {} for kind in KINDS} for rev in args.revs}
    probe = _PROBE.format(keys=args.keys, groups=args.groups, rounds=args.rounds, names=NAMES, control=CONTROL)
    with tempfile.TemporaryDirectory(prefix="kvprobe-starvation-commits-") as root:
        trees = {rev: checkout(rev, args.bench_rev, root) for rev in args.revs}
        for run in range(args.runs):
            for rev in rotated(args.revs, run):
                figures = parse_figures(run_probe(trees[rev], probe))
                if not figures:
                    raise RuntimeError(f"bench.starvation on {rev} printed no figures")
                for kind, table in figures.items():
                    for name, values in table.items():
                        got[rev][kind].setdefault(name, []).extend(values)
    print(
        f"bench.starvation's measure (bench/ of {args.bench_rev}) on each commit: {args.keys:,} files in "
        f"{args.groups} groups per busy window, {args.runs} interleaved processes x {args.rounds} rounds each; "
        "median (min-max) over every round\n"
    )
    backends = [n for n in NAMES if n != CONTROL]
    for kind, names, why in (
        ("busy/idle", list(NAMES), "the scheduler's lookup rate while the worker probes, over its idle rate"),
        (
            "ms lost",
            list(NAMES),
            "scheduler time lost to the batch, window x (1 - busy/idle), in ms: "
            "a worker that finishes sooner may slow the scheduler more and still cost it less",
        ),
        ("vs control", backends, "each backend's busy/idle over the control's of the same round"),
    ):
        print(f"{kind}: {why}\n")
        print("| commit | " + " | ".join(names) + " |")
        print("|---|" + "---|" * len(names))
        for rev, figures in got.items():
            print(f"| `{rev}` | " + " | ".join(fmt_spread(figures[kind][n]) for n in names) + " |")
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
