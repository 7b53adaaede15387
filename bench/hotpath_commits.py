"""The hot path of two (or more) commits side by side: does a change cost the scheduler anything?

Each commit's library is checked out (``git archive``) into a temporary
directory; every checkout runs the *same* benchmark, ``bench/hotpath.py``
and its helpers from ``--bench-rev`` (so only the library differs), as a
separate process.  Rounds are interleaved and the order rotates from round
to round, so a slow phase of a loaded machine hits every commit alike.  The
figure compared is the benchmark's own verified/baseline ratio (the
unverified baseline runs in lockstep inside each process, which takes the
machine's speed of the moment out); the median over rounds of each commit
is divided by the first commit's.

Run from the repository::

    python -m bench.hotpath_commits 810d55c^ 810d55c HEAD --bench-rev 810d55c^ --rounds 5

(``810d55c`` added the closed-manager guard.)  ``dir:PATH`` instead of a
commit runs a source tree prepared by hand (a variant: a commit with one
change undone).  Prints a table; asserts nothing.

Raises (exits non-zero): a revision git cannot archive, or a benchmark run
that fails or prints no ratio.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Sequence
from io import BytesIO

from bench.common import rotated

__all__ = ["checkout", "last_json_line", "main", "parse_ratios", "run_probe"]

# Run in each checkout: bench.hotpath's own measurement, its two summary
# ratios at full precision (its table rounds them to 0.01, too coarse for 2 %).
_PROBE = """
import json, statistics
from bench.common import Workload
from bench.hotpath import LOOKUP_CLASSES, measure
res = measure(Workload(steps={steps}), {repeats}, 1)
pairs = list(zip(res["verified"], res["baseline"]))
lookups = ("drain", *LOOKUP_CLASSES)
print(json.dumps({{
    "all lookups": statistics.median(sum(v.ns[c] for c in lookups) / sum(b.ns[c] for c in lookups) for v, b in pairs),
    "scheduler total": statistics.median(v.total_ns() / b.total_ns() for v, b in pairs),
}}))
"""


def last_json_line(output: str) -> object:
    """What a probe printed as JSON on its last line (None if it printed no JSON there)."""
    lines = output.strip().splitlines()
    try:
        return json.loads(lines[-1]) if lines else None
    except ValueError:
        return None


def parse_ratios(output: str) -> dict[str, float]:
    """{"all lookups": r, "scheduler total": r} from the probe's last line (empty if absent)."""
    found = last_json_line(output)
    return {k: float(v) for k, v in found.items()} if isinstance(found, dict) else {}


def _archive(rev: str, into: str, paths: Sequence[str] = ()) -> None:
    data = subprocess.run(["git", "archive", rev, *paths], capture_output=True, check=True).stdout
    with tarfile.open(fileobj=BytesIO(data)) as tar:
        tar.extractall(into, filter="tar") if sys.version_info >= (3, 12) else tar.extractall(into)


def checkout(rev: str, bench_rev: str, root: str) -> str:
    """A copy of ``rev``'s tree (or ``dir:PATH``) under ``root`` with ``bench/`` from ``bench_rev``; its path.

    Raises:
        subprocess.CalledProcessError: git cannot archive ``rev`` or ``bench_rev``.
    """
    tree = os.path.join(root, re.sub(r"[^A-Za-z0-9]", "_", rev))
    if rev.startswith("dir:"):  # a tree prepared by hand (a variant no commit holds)
        shutil.copytree(rev[4:], tree, symlinks=True)
    else:
        os.makedirs(tree)
        _archive(rev, tree)
    shutil.rmtree(os.path.join(tree, "bench"), ignore_errors=True)
    _archive(bench_rev, tree, ["bench"])
    return tree


def run_probe(tree: str, code: str) -> str:
    """Run ``code`` in a fresh interpreter importing only ``tree``; its standard output.

    Raises:
        RuntimeError: the probe exited non-zero (its last 800 characters of stderr).
    """
    env = {**os.environ, "PYTHONPATH": tree}
    done = subprocess.run([sys.executable, "-c", code], cwd=tree, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"probe in {tree} failed ({done.returncode}): {done.stderr[-800:]}")
    return done.stdout


def _run(tree: str, steps: int, repeats: int) -> dict[str, float]:
    ratios = parse_ratios(run_probe(tree, _PROBE.format(steps=steps, repeats=repeats)))
    if len(ratios) != 2:
        raise RuntimeError(f"bench.hotpath in {tree} printed no ratios")
    return ratios


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "revs", nargs="+", help="commits to compare (or dir:PATH, a source tree); the first is the reference"
    )
    parser.add_argument("--bench-rev", default=None, help="the commit whose bench/ every checkout runs (the first)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    bench_rev = args.bench_rev or args.revs[0]
    results: dict[str, list[dict[str, float]]] = {rev: [] for rev in args.revs}
    with tempfile.TemporaryDirectory(prefix="kvprobe-hotpath-commits-") as root:
        trees = {rev: checkout(rev, bench_rev, root) for rev in args.revs}
        for rnd in range(args.rounds):
            for rev in rotated(args.revs, rnd):
                results[rev].append(_run(trees[rev], args.steps, args.repeats))
    ref = args.revs[0]
    print(
        f"bench.hotpath's measure (bench/ of {bench_rev}) on each commit: {args.rounds} interleaved rounds, "
        f"{args.steps} steps x {args.repeats} repeats each; medians over rounds of each run's median v/b\n"
    )
    print("| commit | all lookups v/b (min-max) | vs first | scheduler total v/b (min-max) | vs first |")
    print("|---|---|---|---|---|")
    for rev, runs in results.items():
        cells = []
        for figure in ("all lookups", "scheduler total"):
            values = [r[figure] for r in runs]
            mine = statistics.median(values)
            first = statistics.median(r[figure] for r in results[ref])
            cells.append(f"{mine:.3f} ({min(values):.3f}-{max(values):.3f}) | {100 * (mine / first - 1):+.1f} %")
        print(f"| `{rev}` | {' | '.join(cells)} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
