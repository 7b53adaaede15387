"""Is the scheduler starved while the worker probes a large batch?

The scheduler thread's lookup rate (lookups per wall-clock second, all of
already-resolved keys, as a waiting request re-scanning its prefix does) is
measured twice in alternation:

* idle: no probe in flight;
* busy: right after a flush that hands the worker ``groups`` request groups
  totalling ``n_keys`` files, until the last group's verdicts are applied.

The busy/idle ratio is reported per repetition (each busy window against the
idle window just before it), for ``NixlPosixBackend`` (the whole group is one
``query_memory`` call that stats in C++ without the GIL; the per-key path
strings are still built in Python), for ``FsBackend`` (a pure-Python
``os.stat`` loop: the GIL is released only inside each stat), and for
``ChunkedFs``, FsBackend with a ``time.sleep(0)`` every ``chunk`` keys (a
sketch of in-thread chunking, kept for comparison), and for both file
backends behind :class:`~kvprobe.backends.process.ProcessBackend`, which
makes the same calls in helper processes (niced: ``helper_nice``).  The
manager runs its default ``max_concurrent_groups`` (4 groups at once), and
one row, ``NixlPosixBackend, 1 group at a time``, runs NIXL POSIX with
``max_concurrent_groups=1``: on the worker thread, groups probed at once
would hold the GIL together; the worker's CPU gate runs such calls one after
another, and that row is the yardstick for the default one.

A control row, ``control: GIL-free C``, runs a backend that spends about
``control_us`` per key hashing a buffer with ``hashlib`` (which drops the GIL)
and holds the GIL for nothing else: it shows what a perfectly GIL-free worker
leaves the scheduler on this machine at this moment, i.e. how much of the
drop is CPU contention (2 cores shared with other jobs) rather than the GIL.

The figure depends on whether the worker finds a free core: this machine
has 2 cores shared with other jobs, so the spread is reported, and each
backend's ratio is also divided by the control's ratio of the same round
(what is left once the machine's own contention is taken out).

Repeatable: every backend runs once per round, rounds are interleaved (the
order rotates), and the median of the rounds is reported.  Before a
backend's first window a warm-up starts every helper process
(``ProcessBackend.start_helpers``) and makes one small call per group, so
no window measures a process start.  By default the five backends that
finish a window in well under a second run; ``--all`` adds ``FsBackend``
and ``ChunkedFs`` on the worker thread (about 35 s per 40,000-file window).

``--commits REV [REV ...]`` runs the same measurement against each
commit's library (:mod:`bench.commits`; ``bench/`` of ``--bench-rev``,
HEAD by default, in every checkout), ``--runs`` processes per commit of
``--rounds`` rounds each, interleaved; it prints, per commit, the busy/idle
ratio, the scheduler time lost to the batch (window x (1 - busy/idle): a
worker that finishes sooner may slow the scheduler more and still cost it
less) and the ratio over the control's of the same round.

Run::

    python -m bench.reliability.starvation [--quick] [--rounds N] [--all]
    python -m bench.reliability.starvation --commits bd017b2^ HEAD --runs 5 --rounds 3

Raises (exits non-zero): ``ValueError`` for an unknown backend name; with
``--commits``, a revision git cannot archive or a run that prints no figures.
"""

from __future__ import annotations

import argparse
import hashlib
import logging
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

from bench.commits import add_options, interleaved, last_json_line
from bench.common import Row, fmt_spread, rotated
from bench.trees import block_tree
from kvprobe.backends.fs import FsBackend
from kvprobe.backends.process import ProcessBackend
from kvprobe.statemachine import AsyncLookupManager, ReqContext

__all__ = [
    "DEFAULT",
    "KINDS",
    "ONE_GROUP",
    "SLOW",
    "ChunkedFs",
    "main",
    "measure",
    "parse_figures",
    "resolve_hot_keys",
    "rows",
]


class GilFreeControl:
    """Burns about ``us_per_key`` of CPU per key in C with the GIL released."""

    def __init__(self, us_per_key: float) -> None:
        self.us_per_key = us_per_key
        self.buf = bytes(1 << 20)
        start = time.perf_counter()
        hashlib.sha256(self.buf).digest()
        self.mb_s = 1e-6 / max(time.perf_counter() - start, 1e-9)  # MB hashed per microsecond

    def batch_lookup(self, keys: Sequence[bytes], req_context: object) -> list[bool]:
        rounds = max(1, int(len(keys) * self.us_per_key * self.mb_s))
        for _ in range(rounds):
            hashlib.sha256(self.buf).digest()
        return [False] * len(keys)


def chunked_nixl(root: str, chunk: int = 512) -> Any:
    """NixlPosixBackend with ``chunk_keys=chunk``: one ``query_memory`` per chunk.

    The whole-group call first builds every path in Python (GIL held for
    milliseconds on a large group, so a waiting scheduler waits for the 5 ms
    switch interval); per chunk, the GIL-free query in between hands the GIL
    over every ``chunk`` keys.
    """
    from kvprobe.backends.nixl_posix import NixlPosixBackend

    return NixlPosixBackend(root, chunk_keys=chunk)


class ChunkedFs(FsBackend):
    """FsBackend that yields the GIL every ``chunk`` keys (a proposal, measured)."""

    def __init__(self, root: str, chunk: int = 256) -> None:
        super().__init__(root)
        self.chunk = chunk

    def batch_lookup(self, keys: Sequence[bytes], req_context: object) -> list[bool]:
        out: list[bool] = []
        step = self.chunk
        for start in range(0, len(keys), step):
            out.extend(super().batch_lookup(keys[start : start + step], req_context))
            # sleep(0) drops the GIL, so a waiting scheduler thread runs now
            # rather than at the end of the 5 ms switch interval.
            time.sleep(0)
        return out


def _until(deadline: float) -> Callable[[], bool]:
    return lambda: time.perf_counter() >= deadline


def _rate(m: AsyncLookupManager, pairs: Sequence[tuple[bytes, ReqContext]], until: Callable[[], bool]) -> float:
    """Lookups per second while ``until()`` is False (at least one pass)."""
    lookup = m.lookup
    done = 0
    t0 = time.perf_counter()
    while True:
        for key, ctx in pairs:
            lookup(key, ctx)
        done += len(pairs)
        if until():
            break
    return done / (time.perf_counter() - t0)


def resolve_hot_keys(m: AsyncLookupManager, hot: Sequence[bytes], ctx: ReqContext) -> list[tuple[bytes, ReqContext]]:
    """Probe ``hot`` until every key is resolved; the (key, ctx) pairs the scheduler loop then looks up."""
    for key in hot:
        m.lookup(key, ctx)
    m.flush()
    while m.core.outstanding:
        time.sleep(0.001)
        m.drain_results()
    return [(k, ctx) for k in hot]


def _warm_up(m: AsyncLookupManager, backend: Any, keys: Sequence[bytes], groups: int) -> None:
    """Start every helper process and make one call per group before anything is measured.

    A ``ProcessBackend`` otherwise starts its 2nd..Nth helper (an interpreter,
    imports, the backend) inside the first busy window, and that start, not
    the probing, is what the window would measure.
    """
    start_helpers = getattr(backend, "start_helpers", None)
    if callable(start_helpers):
        start_helpers(groups)
    ctxs = [ReqContext(f"warm-{g}") for g in range(groups)]
    for g, ctx in enumerate(ctxs):
        for key in keys[g * 64 : (g + 1) * 64]:
            m.lookup(key, ctx)
    m.flush()
    while m.core.outstanding:
        time.sleep(0.001)
        m.drain_results()
    for ctx in ctxs:
        m.cleanup(ctx.req_id)


def _one(
    backend: Any, keys: Sequence[bytes], groups: int, repeats: int, idle_s: float, **manager_kwargs: Any
) -> list[tuple[float, float, float]]:
    """[(idle rate, busy rate, busy seconds)] per repetition; ``manager_kwargs`` go to the manager."""
    out = []
    hot_ctx = ReqContext("hot")
    hot = keys[:256]
    big = keys[256:]
    per = -(-len(big) // groups)
    with AsyncLookupManager(backend, name="starvation", **manager_kwargs) as m:
        pairs = resolve_hot_keys(m, hot, hot_ctx)
        _warm_up(m, backend, big, groups)
        for rep in range(repeats):
            deadline = time.perf_counter() + idle_s
            idle = _rate(m, pairs, _until(deadline))
            ctxs = [ReqContext(f"big-{rep}-{g}") for g in range(groups)]
            for g, ctx in enumerate(ctxs):
                for key in big[g * per : (g + 1) * per]:
                    m.lookup(key, ctx)
            m.flush()
            t0 = time.perf_counter()
            busy = _rate(m, pairs, lambda: not m.core.outstanding)
            out.append((idle, busy, time.perf_counter() - t0))
            for ctx in ctxs:
                m.cleanup(ctx.req_id)
    return out


#: The GIL-free control row (what a worker that never holds the GIL leaves the scheduler).
CONTROL = "control: GIL-free C"
#: The in-thread NIXL path with groups probed one at a time (the manager's
#: ``max_concurrent_groups=1``): what concurrency costs a GIL-holding backend.
ONE_GROUP = "NixlPosixBackend, 1 group at a time"
#: Manager arguments of the rows that do not run the manager's defaults.
MANAGER_KWARGS: dict[str, dict[str, Any]] = {ONE_GROUP: {"max_concurrent_groups": 1}}
#: What the issue asks side by side (cheap: a window is well under a second).
DEFAULT = (
    "NixlPosixBackend",
    ONE_GROUP,
    "NixlPosix chunked(512)",
    "ProcessBackend(NixlPosixBackend)",
    "ProcessBackend(FsBackend)",
    CONTROL,
)
#: Pure-Python stat loops on the worker thread: ~35 s per 40,000-file window here.
SLOW = ("FsBackend", "ChunkedFs(256)")


def measure(
    n_keys: int,
    groups: int,
    repeats: int,
    idle_s: float = 0.3,
    control_us: float = 8.0,
    names: Sequence[str] = DEFAULT,
) -> dict[str, list[tuple[float, float, float]]]:
    """{backend: [(idle rate, busy rate, busy seconds)] per round}, rounds interleaved.

    Raises:
        ValueError: an unknown name in ``names``.
    """
    from kvprobe.backends.nixl_posix import NixlPosixBackend

    results: dict[str, list[tuple[float, float, float]]] = {}
    with block_tree(n_keys + 256) as (root, keys):
        makers: dict[str, Callable[[], Any]] = {
            "NixlPosixBackend": lambda: NixlPosixBackend(root),
            ONE_GROUP: lambda: NixlPosixBackend(root),  # with MANAGER_KWARGS[ONE_GROUP]
            "NixlPosix chunked(512)": lambda: chunked_nixl(root, 512),
            "ProcessBackend(NixlPosixBackend)": lambda: ProcessBackend(partial(NixlPosixBackend, root)),
            "FsBackend": lambda: FsBackend(root),
            "ChunkedFs(256)": lambda: ChunkedFs(root, 256),
            "ProcessBackend(FsBackend)": lambda: ProcessBackend(partial(FsBackend, root)),
            CONTROL: lambda: GilFreeControl(control_us),
        }
        unknown = [n for n in names if n not in makers]
        if unknown:
            raise ValueError(f"unknown backends {unknown}; known: {list(makers)}")
        chosen = list(names)
        for name in chosen:
            results[name] = []
        # Backends alternate within each round, so slow phases of the machine
        # are shared; each round is one repetition of each, and the order
        # rotates from round to round so no backend always follows the same one.
        for rnd in range(repeats):
            for name in rotated(chosen, rnd):
                backend = makers[name]()
                try:
                    results[name] += _one(backend, keys, groups, 1, idle_s, **MANAGER_KWARGS.get(name, {}))
                finally:
                    close = getattr(backend, "close", None)
                    if close is not None:
                        close()
    return results


def _ratios(res: list[tuple[float, float, float]]) -> list[float]:
    return [busy / idle for idle, busy, _ in res]


def _vs_control(results: dict[str, list[tuple[float, float, float]]], name: str) -> list[float]:
    """Per round: this backend's busy/idle ratio over the control's in the same round."""
    control = results.get(CONTROL)
    if control is None:
        return []
    return [mine / theirs for mine, theirs in zip(_ratios(results[name]), _ratios(control), strict=True)]


def report(results: dict[str, list[tuple[float, float, float]]], n_keys: int, groups: int) -> str:
    rounds = min(len(r) for r in results.values())
    lines = [
        f"{n_keys} files in {groups} request groups per busy window; median of {rounds} interleaved rounds\n",
        "| backend | busy/idle lookup rate, median (min-max) | / control, same round (median) "
        "| idle lookups/s | busy window s (median) |",
        "|---|---|---|---|---|",
    ]
    for name, res in results.items():
        r = _ratios(res)
        rel = _vs_control(results, name)
        idle = statistics.median(i for i, _, _ in res)
        window = statistics.median(w for _, _, w in res)
        lines.append(
            f"| {name} | {fmt_spread(r)} "
            f"| {statistics.median(rel) if rel else float('nan'):.2f} | {idle:,.0f} | {window:.2f} |"
        )
    return "\n".join(lines)


def _params(quick: bool) -> tuple[int, int, int]:
    return (8_000, 4, 3) if quick else (40_000, 4, 5)


def rows(quick: bool) -> list[Row]:
    n_keys, groups, repeats = _params(quick)
    res = measure(n_keys, groups, repeats)
    out = []
    for name, r in res.items():
        ratios = _ratios(r)
        window = statistics.median(w for _, _, w in r)
        out.append(
            Row(
                "starvation",
                f"{name}: busy/idle rate",
                f"{statistics.median(ratios):.2f} (min {min(ratios):.2f}, max {max(ratios):.2f})",
                f"{n_keys} files / {groups} groups, window {window:.2f} s",
            )
        )
    return out


# --- --commits: the same measurement on several commits ----------------------------------

#: What the --commits probe reports per backend and round.
KINDS = ("busy/idle", "ms lost", "vs control")
#: The backends --commits measures: the helper-process and worker-thread paths, and the control.
COMMIT_NAMES = ("ProcessBackend(NixlPosixBackend)", "NixlPosixBackend", "ProcessBackend(FsBackend)", CONTROL)

# Run in each checkout: that checkout's measure (wherever its bench/ keeps it); per round, each backend's
# busy/idle ratio, the scheduler time it lost, and the ratio over the control's.
_PROBE = """
import json, logging
logging.disable(logging.INFO)
try:  # bench/ as organised by question; a --bench-rev from before has it flat
    from bench.reliability.starvation import measure
except ImportError:
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
    """A probe's last line: {kind: {name: [one figure per round]}} for each of KINDS (empty if absent)."""
    found = last_json_line(output)
    if not isinstance(found, dict) or set(found) != set(KINDS):
        return {}
    return {kind: {n: [float(x) for x in xs] for n, xs in table.items()} for kind, table in found.items()}


def commits_report(runs: dict[str, list[dict[str, dict[str, list[float]]]]]) -> str:
    """Per kind of figure, a table: per commit, each backend's median (min-max) over every round of every run."""
    explained = {
        "busy/idle": "the scheduler's lookup rate while the worker probes, over its idle rate",
        "ms lost": "scheduler time lost to the batch, window x (1 - busy/idle), in ms: "
        "a worker that finishes sooner may slow the scheduler more and still cost it less",
        "vs control": "each backend's busy/idle over the control's of the same round",
    }
    out = []
    for kind in KINDS:
        names = [n for n in COMMIT_NAMES if kind != "vs control" or n != CONTROL]
        out += [
            f"{kind}: {explained[kind]}",
            "",
            "| commit | " + " | ".join(names) + " |",
            "|---|" + "---|" * len(names),
        ]
        for rev, figures in runs.items():
            merged = {n: [x for run in figures for x in run[kind][n]] for n in names}
            out.append(f"| `{rev}` | " + " | ".join(fmt_spread(merged[n]) for n in names) + " |")
        out.append("")
    return "\n".join(out)


def _commits_main(args: argparse.Namespace, n_keys: int, groups: int) -> None:
    rounds = args.repeats or 3
    probe = _PROBE.format(keys=n_keys, groups=groups, rounds=rounds, names=COMMIT_NAMES, control=CONTROL)
    runs = interleaved(args.commits, args.bench_rev, args.runs, probe, lambda out: parse_figures(out) or None)
    print(
        f"bench.reliability.starvation's measure (bench/ of {args.bench_rev}) on each commit: {n_keys:,} files in "
        f"{groups} groups per busy window, {args.runs} interleaved processes x {rounds} rounds each; "
        "median (min-max) over every round\n"
    )
    print(commits_report(runs))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--keys", type=int, default=None)
    parser.add_argument(
        "--repeats", "--rounds", type=int, default=None, help="interleaved rounds (default 5; 3 per run with --commits)"
    )
    parser.add_argument(
        "--all", action="store_true", help=f"also the slow pure-Python loops on the worker thread: {', '.join(SLOW)}"
    )
    add_options(parser, "HEAD", "HEAD")
    parser.add_argument("--runs", type=int, default=4, help="with --commits: processes per commit, interleaved")
    args = parser.parse_args(argv)
    logging.disable(logging.INFO)  # NIXL logs every agent it creates at INFO
    n_keys, groups, repeats = _params(args.quick)
    n_keys = args.keys or n_keys
    if args.commits:
        _commits_main(args, n_keys, groups)
        return 0
    repeats = args.repeats or repeats
    names = DEFAULT + SLOW if args.all else DEFAULT
    print(report(measure(n_keys, groups, repeats, names=names), n_keys, groups))
    return 0


if __name__ == "__main__":
    sys.exit(main())
