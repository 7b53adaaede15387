"""Soak: a million lookups over a hundred thousand requests, with faults; nothing leaks.

Run from the repository root::

    python -m bench.reliability.soak                                   # full: 1M lookups, 100k requests, FsBackend
    python -m bench.reliability.soak --lookups 100000 --requests 10000 # the short CI version

A scheduler-shaped loop drives one :class:`AsyncLookupManager` over a real
:class:`FsBackend` on a temporary directory (``--backend memory`` for the
in-memory tier).  Each step it admits requests up to ``--concurrency``; each
active request looks up every key it has no verdict for yet; a request whose
keys all have verdicts "loads" its blocks (with probability ``--miss-rate``
the load of one stored block fails and the request calls ``mark_miss``) and
finishes (``cleanup``); a ``--abort-rate`` share of requests is cancelled
0-3 steps after arrival, whatever their probes are doing (a cleanup while
they are pending or in flight).  The step ends with ``flush`` and a short
pause (``--step-sleep-ms``, standing for the model's forward pass).  Prompts share prefixes, so requests
join each other's probes.  The backend sits behind :class:`FaultInjector`,
which makes a ``--fault-rate`` share of calls raise and another share return
a short result.

Recorded: the probe table size and the process RSS over time, peak RSS, and
how long each (request, key) waited for its verdict.  The run fails (exit
status 1, with the reasons) unless:

* the table is empty at the end (every request cleaned up, results drained):
  ``len(m) == 0`` and the core holds no request, context or open group;
* RSS stays flat after warm-up: the highest RSS sampled after 25% of the
  lookups exceeds the RSS at the 25% mark by less than ``--rss-budget-mib``
  (default 4 MiB) -- the working set (active requests, their states) is
  bounded by the concurrency, so anything beyond that is a leak;
* every verdict was possible: True only for a stored key, and False after a
  ``mark_miss`` while the request still holds the key;
* every (request, key) got its verdict within ``--verdict-bound-s``;
* the faults were injected and counted (``backend_errors`` > 0).
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import random
import sys
import tempfile
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bench.common import DOCS_DIR
from bench.docdata import DATA_DIR, dumps, machine_record, requote
from kvprobe.backends import FsBackend, check_key
from kvprobe.progress import Progress
from kvprobe.statemachine import AsyncLookupManager, ReqContext

__all__ = ["FaultInjector", "SoakResult", "main", "run", "update_docs"]

MIB = 1024 * 1024


def _status_kib(field_name: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field_name + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"/proc/self/status has no {field_name}")


def rss_bytes() -> int:
    """Current resident set size of this process (``VmRSS``, Linux)."""
    return _status_kib("VmRSS") * 1024


def peak_rss_bytes() -> int:
    """Peak resident set size so far (``VmHWM``, the same accounting as ``VmRSS``)."""
    return _status_kib("VmHWM") * 1024


class FaultInjector:
    """Wraps a backend; a share of calls raise, another share return too few results.

    Thread-safe: the random draws are under a lock (with a timeout the
    manager may run calls on more than one thread).
    """

    def __init__(self, inner: Any, *, raise_rate: float, short_rate: float, seed: int) -> None:
        self.inner = inner
        self.raise_rate = raise_rate
        self.short_rate = short_rate
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self.calls = 0
        self.raised = 0
        self.shortened = 0

    def batch_lookup(self, keys: Sequence[bytes], req_context: object) -> Iterable[bool]:
        with self._lock:
            self.calls += 1
            draw = self._rng.random()
        if draw < self.raise_rate:
            with self._lock:
                self.raised += 1
            raise OSError(5, "injected I/O error")
        verdicts = list(self.inner.batch_lookup(keys, req_context))
        if draw < self.raise_rate + self.short_rate and verdicts:
            with self._lock:
                self.shortened += 1
            return verdicts[:-1]
        return verdicts


class _StoredSet:
    """The in-memory tier without InMemoryBackend's call log.

    ``InMemoryBackend.calls`` records every call for tests to inspect, so it
    grows with the run by design; a soak must not measure that.
    """

    def __init__(self, stored: set[bytes]) -> None:
        self.stored = frozenset(stored)

    def batch_lookup(self, keys: Sequence[bytes], req_context: object) -> list[bool]:
        stored = self.stored
        return [check_key(k) in stored for k in keys]


@dataclass
class _Request:
    ctx: ReqContext
    keys: list[bytes]
    verdicts: list[bool | None]
    asked_at: float
    unknown: int
    abort_at: int | None  # the step at which it is cancelled, if it is


@dataclass
class SoakResult:
    backend: str
    requests: int
    finished: int
    aborted: int
    lookup_calls: int
    lookup_pairs: int  # distinct (request, key) lookups
    steps: int
    wall_s: float  # the scheduler loop and the final drain
    setup_s: float  # writing the tier's files
    teardown_s: float  # removing them
    lookups_per_s: float
    rss_start_mib: float
    rss_at_25_mib: float
    rss_max_after_25_mib: float
    rss_growth_mib: float
    peak_rss_mib: float
    table_peak: int
    table_end: int
    max_wait_s: float
    wrong_verdicts: int
    stats: dict[str, Any]
    injected: dict[str, int]
    samples: list[tuple[int, int, float]]  # (lookups so far, len(m), RSS MiB)
    failures: list[str]


def _universe(
    rng: random.Random, families: int, blocks: int, stored_fraction: float
) -> tuple[list[list[bytes]], set[bytes]]:
    """Prompt families (a key sequence each) and the keys the tier holds.

    A family's stored keys are a prefix (what a prefix cache holds), of a
    random length around ``stored_fraction`` of the family.
    """
    seqs: list[list[bytes]] = []
    stored: set[bytes] = set()
    for _ in range(families):
        digest_seq = [rng.randbytes(16) + (0).to_bytes(4, "little") for _ in range(blocks)]
        seqs.append(digest_seq)
        cut = min(blocks, max(0, int(rng.gauss(stored_fraction, 0.2) * blocks)))
        stored.update(digest_seq[:cut])
    return seqs, stored


def run(
    *,
    lookups: int,
    requests: int,
    backend_name: str,
    concurrency: int,
    fault_rate: float,
    short_rate: float,
    abort_rate: float,
    miss_rate: float,
    lookup_timeout_s: float | None,
    verdict_bound_s: float,
    rss_budget_mib: float,
    families: int,
    seed: int,
    samples: int,
    step_sleep_s: float = 0.001,
    root: str | None = None,
) -> SoakResult:
    """Run the soak; returns what it measured (``failures`` lists broken checks)."""
    rng = random.Random(seed)
    mean_len = max(1, math.ceil(lookups / requests))
    max_len = 2 * mean_len - 1
    seqs, stored = _universe(rng, families, max_len, 0.5)

    setup_started = time.monotonic()
    tmp: tempfile.TemporaryDirectory[str] | None = None
    inner: Any
    if backend_name == "fs":
        if root is None:
            tmp = tempfile.TemporaryDirectory(prefix="kvprobe-soak-")
            root = tmp.name
        inner = FsBackend(root)
        for key in stored:
            inner.store(key)
    else:
        inner = _StoredSet(stored)
    backend = FaultInjector(inner, raise_rate=fault_rate, short_rate=short_rate, seed=seed + 1)
    setup_s = time.monotonic() - setup_started

    m = AsyncLookupManager(backend, name="soak", lookup_timeout_s=lookup_timeout_s)
    core = m.core
    active: dict[str, _Request] = {}
    started = finished = aborted = 0
    lookup_calls = lookup_pairs = steps = 0
    wrong = 0
    max_wait = 0.0
    table_peak = 0
    series: list[tuple[int, int, float]] = []
    sample_every = max(1, lookups // max(1, samples))
    next_sample = 0
    rss_at_25: float | None = None
    rss_max_after_25 = 0.0
    gc.collect()
    rss_start = rss_bytes() / MIB
    t0 = time.monotonic()
    display = Progress(sys.stderr)  # a live line on a terminal only

    while True:
        now = time.monotonic()
        # Admit new requests: keep going until both targets are met.
        while len(active) < concurrency and (started < requests or lookup_pairs < lookups):
            family = seqs[rng.randrange(families)]
            n = rng.randint(1, max_len)
            req_id = f"q{started}"
            keys = family[:n]
            abort_at = steps + rng.randint(0, 3) if rng.random() < abort_rate else None
            active[req_id] = _Request(ReqContext(req_id), keys, [None] * n, now, n, abort_at)
            lookup_pairs += n
            started += 1
        if not active:
            break
        for req_id in list(active):
            req = active[req_id]
            if req.unknown:
                ctx = req.ctx
                verdicts = req.verdicts
                for i, key in enumerate(req.keys):
                    if verdicts[i] is None:
                        verdict = m.lookup(key, ctx)
                        lookup_calls += 1
                        if verdict is not None:
                            verdicts[i] = verdict
                            req.unknown -= 1
                            if verdict and key not in stored:
                                wrong += 1
                if req.unknown == 0:
                    max_wait = max(max_wait, now - req.asked_at)
                elif now - req.asked_at > verdict_bound_s:
                    max_wait = max(max_wait, now - req.asked_at)
                    raise SystemExit(
                        f"soak: request {req_id} still has {req.unknown} keys without a verdict after "
                        f"{verdict_bound_s} s (stats {m.stats})"
                    )
            if req.unknown == 0:
                # "Load" the stored blocks; sometimes a load fails.
                hits = [k for k, v in zip(req.keys, req.verdicts, strict=True) if v]
                if hits and rng.random() < miss_rate:
                    bad = rng.choice(hits)
                    m.mark_miss([bad])
                    lookup_calls += 1
                    if m.lookup(bad, req.ctx) is not False:
                        wrong += 1
                m.cleanup(req_id)
                del active[req_id]
                finished += 1
            elif req.abort_at is not None and steps >= req.abort_at:
                m.cleanup(req_id)
                del active[req_id]
                aborted += 1
        m.flush()
        steps += 1
        size = len(m)
        table_peak = max(table_peak, size)
        if lookup_pairs >= next_sample:
            rss = rss_bytes() / MIB
            series.append((lookup_pairs, size, round(rss, 2)))
            display.show(
                f"soak: {min(lookup_pairs, lookups):,} of {lookups:,} lookups, {size:,} probes held, {rss:.0f} MiB"
            )
            next_sample = lookup_pairs + sample_every
            if rss_at_25 is None and lookup_pairs >= lookups // 4:
                rss_at_25 = rss
            elif rss_at_25 is not None:
                rss_max_after_25 = max(rss_max_after_25, rss)
        # A real step runs the model between flushes; without a pause the
        # loop would mostly re-ask for verdicts still in flight.
        time.sleep(step_sleep_s)

    display.clear()
    # Every request is cleaned up; probes still in flight for nobody are
    # reclaimed when their results arrive.
    deadline = time.monotonic() + verdict_bound_s
    while len(m) and time.monotonic() < deadline:
        m.drain_results()
        time.sleep(0.001)
    wall = time.monotonic() - t0
    rss_end = rss_bytes() / MIB
    series.append((lookup_pairs, len(m), round(rss_end, 2)))
    if rss_at_25 is None:
        rss_at_25 = rss_end
    rss_max_after_25 = max(rss_max_after_25, rss_end)
    table_end = len(m)
    leftovers = {
        "requests": len(core.requests),
        "outstanding": len(core.outstanding),
        "step_batch": len(core.step_batch),
    }
    stats = asdict(m.stats)
    m.shutdown()
    teardown_started = time.monotonic()
    if tmp is not None:
        tmp.cleanup()
    teardown_s = time.monotonic() - teardown_started

    failures: list[str] = []
    if table_end != 0:
        failures.append(f"the probe table holds {table_end} states at the end (expected 0)")
    if any(leftovers.values()):
        failures.append(f"the core still holds {leftovers} at the end (expected all 0)")
    growth = rss_max_after_25 - rss_at_25
    if growth >= rss_budget_mib:
        failures.append(
            f"RSS grew by {growth:.2f} MiB after warm-up (from {rss_at_25:.2f} MiB at 25% of the lookups to a "
            f"maximum of {rss_max_after_25:.2f} MiB); budget {rss_budget_mib} MiB"
        )
    if wrong:
        failures.append(f"{wrong} impossible verdicts (True for an unstored key, or not False after mark_miss)")
    if lookup_pairs < lookups or started < requests:
        failures.append(f"ran {lookup_pairs} lookups over {started} requests, fewer than asked")
    if (fault_rate or short_rate) and stats["backend_errors"] == 0:
        failures.append("faults were to be injected but no backend error was counted")
    return SoakResult(
        backend=backend_name,
        requests=started,
        finished=finished,
        aborted=aborted,
        lookup_calls=lookup_calls,
        lookup_pairs=lookup_pairs,
        steps=steps,
        wall_s=wall,
        setup_s=setup_s,
        teardown_s=teardown_s,
        lookups_per_s=lookup_calls / wall if wall else 0.0,
        rss_start_mib=rss_start,
        rss_at_25_mib=rss_at_25,
        rss_max_after_25_mib=rss_max_after_25,
        rss_growth_mib=growth,
        peak_rss_mib=peak_rss_bytes() / MIB,
        table_peak=table_peak,
        table_end=table_end,
        max_wait_s=max_wait,
        wrong_verdicts=wrong,
        stats=stats,
        injected={"calls": backend.calls, "raised": backend.raised, "short": backend.shortened},
        samples=series,
        failures=failures,
    )


def summary_rows(result: SoakResult, command: str) -> list[list[str]]:
    """The run's figures as (figure, value) rows, the command first."""
    s = result.stats
    rows = [
        ("command", f"`{command}`"),
        ("backend", "FsBackend (temp dir)" if result.backend == "fs" else "in-memory set"),
        ("requests (finished / aborted)", f"{result.requests:,} ({result.finished:,} / {result.aborted:,})"),
        ("lookups: (request, key) pairs / lookup calls", f"{result.lookup_pairs:,} / {result.lookup_calls:,}"),
        ("steps (flushes)", f"{result.steps:,}"),
        (
            "backend calls / injected raise / injected short",
            f"{s['backend_calls']:,} / {result.injected['raised']:,} / {result.injected['short']:,}",
        ),
        ("backend_errors counted", f"{s['backend_errors']:,}"),
        ("forced misses (mark_miss)", f"{s['forced_misses']:,}"),
        ("never probed / orphans reclaimed", f"{s['never_probed']:,} / {s['orphans_reclaimed']:,}"),
        ("probe table: peak / at end", f"{result.table_peak:,} / {result.table_end}"),
        (
            "RSS: start / at 25% / max after 25%",
            f"{result.rss_start_mib:.1f} / {result.rss_at_25_mib:.1f} / {result.rss_max_after_25_mib:.1f} MiB",
        ),
        ("RSS growth after warm-up", f"{result.rss_growth_mib:+.2f} MiB"),
        ("peak RSS", f"{result.peak_rss_mib:.1f} MiB"),
        ("longest wait for a request's verdicts", f"{result.max_wait_s * 1000:.0f} ms"),
        ("impossible verdicts", f"{result.wrong_verdicts}"),
        ("wall time of the loop", f"{result.wall_s:.1f} s ({result.lookups_per_s:,.0f} lookup calls/s)"),
        ("writing / removing the tier's files", f"{result.setup_s:.1f} s / {result.teardown_s:.1f} s"),
        ("verdict", "PASS" if not result.failures else "FAIL: " + "; ".join(result.failures)),
    ]
    return [[name, value] for name, value in rows]


def summary(result: SoakResult, command: str) -> str:
    """A small Markdown table of the figures, as the command prints it."""
    lines = ["| soak | |", "|---|---|"] + [f"| {name} | {value} |" for name, value in summary_rows(result, command)]
    return "\n".join(lines)


def series_rows(result: SoakResult, rows: int = 10) -> list[list[str]]:
    """The probe table size and RSS over time, thinned to about ``rows`` rows (and the last sample)."""
    samples = result.samples
    step = max(1, len(samples) // rows)
    picked = samples[::step]
    if picked[-1] != samples[-1]:
        picked.append(samples[-1])
    return [[f"{calls:,}", f"{size:,}", f"{rss:.1f}"] for calls, size, rss in picked]


SERIES_COLUMNS = ["lookups so far", "len(m)", "RSS MiB"]


def series_table(result: SoakResult, rows: int = 10) -> str:
    """:func:`series_rows` as a Markdown table."""
    lines = ["| " + " | ".join(SERIES_COLUMNS) + " |", "|---:|---:|---:|"]
    lines += ["| " + " | ".join(row) + " |" for row in series_rows(result, rows)]
    return "\n".join(lines)


#: Where ``--update-docs`` writes the run: the data file, and the page that quotes its tables.
DOCS_DATA = DATA_DIR / "soak.json"
DOCS_PAGE = DOCS_DIR / "performance.md"


def update_docs(result: SoakResult, command: str, data_path: Path = DOCS_DATA, page: Path = DOCS_PAGE) -> None:
    """Write this run to ``data_path`` and re-render the tables ``page`` quotes from it.

    Raises:
        FileNotFoundError: ``page`` does not exist.
        ValueError: ``page`` quotes neither table (``<!-- data: soak#summary -->``, ``#series``).
    """
    summary_table = summary_rows(result, command)[1:]  # the command is in the provenance line
    data = {
        "title": "Soak: a million lookups with faults, nothing accumulates",
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "machine": machine_record(),
        "command": command,
        "source": "written by python -m bench.reliability.soak --update-docs",
        "tables": {
            "summary": {"columns": ["figure", "value"], "rows": summary_table},
            "series": {"columns": SERIES_COLUMNS, "rows": series_rows(result)},
        },
    }
    data_path.write_text(dumps(data))
    missing = requote(page, data_path.stem, data)
    if len(missing) == len(data["tables"]):
        raise ValueError(f"{page} quotes no table of {data_path.name}")


def _run_args(argv: Sequence[str]) -> list[str]:
    """``argv`` without the output options (they do not change the run)."""
    out: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
        elif arg == "--json":
            skip = True
        elif arg != "--update-docs" and not arg.startswith("--json="):
            out.append(arg)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.reliability.soak", description=__doc__.split("\n\n")[0])
    parser.add_argument("--lookups", type=int, default=1_000_000, help="(request, key) lookups, at least")
    parser.add_argument("--requests", type=int, default=100_000, help="requests, at least")
    parser.add_argument("--backend", choices=["fs", "memory"], default="fs")
    parser.add_argument("--root", help="directory for the fs tier (default: a fresh temp dir)")
    parser.add_argument("--concurrency", type=int, default=64, help="requests active at once")
    parser.add_argument("--fault-rate", type=float, default=0.02, help="share of backend calls that raise")
    parser.add_argument("--short-rate", type=float, default=0.02, help="share that return a short result")
    parser.add_argument("--abort-rate", type=float, default=0.05, help="share of requests cancelled early")
    parser.add_argument("--miss-rate", type=float, default=0.05, help="share of requests whose load fails")
    parser.add_argument("--timeout", type=float, default=5.0, help="lookup_timeout_s (0: none)")
    parser.add_argument("--verdict-bound-s", type=float, default=30.0)
    parser.add_argument("--rss-budget-mib", type=float, default=4.0)
    parser.add_argument("--families", type=int, default=500, help="distinct prompts (shared prefixes)")
    parser.add_argument("--samples", type=int, default=200, help="RSS / table samples over the run")
    parser.add_argument("--step-sleep-ms", type=float, default=1.0, help="pause per step (the model's turn)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", help="write every figure and the time series here")
    parser.add_argument(
        "--update-docs", action="store_true", help=f"write {DOCS_DATA.name} and the tables {DOCS_PAGE.name} quotes"
    )
    args = parser.parse_args(argv)
    if args.lookups < 1 or args.requests < 1:
        parser.error("--lookups and --requests must be positive")
    result = run(
        lookups=args.lookups,
        requests=args.requests,
        backend_name=args.backend,
        concurrency=args.concurrency,
        fault_rate=args.fault_rate,
        short_rate=args.short_rate,
        abort_rate=args.abort_rate,
        miss_rate=args.miss_rate,
        lookup_timeout_s=args.timeout or None,
        verdict_bound_s=args.verdict_bound_s,
        rss_budget_mib=args.rss_budget_mib,
        families=args.families,
        seed=args.seed,
        samples=args.samples,
        step_sleep_s=args.step_sleep_ms / 1000,
        root=args.root,
    )
    command = "python -m bench.reliability.soak" + "".join(
        f" {a}" for a in _run_args(argv if argv is not None else sys.argv[1:])
    )
    print(summary(result, command))
    print()
    print(series_table(result))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"command": command, **asdict(result)}, f, indent=1)
    if args.update_docs:
        update_docs(result, command)
    if result.failures:
        for failure in result.failures:
            print(f"soak FAILED: {failure}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
