"""Run the whole benchmark suite, print one Markdown table and save the raw measurements.

``python -m bench.run_all`` (about 30 minutes on the 2-core bench machine,
most of it TLC) or ``python -m bench.run_all --quick`` (a smoke run of every
benchmark: 7 minutes at load 10-20 on 2 cores, half of it TLC's default
config; its figures are too short to quote).  ``--only NAME`` runs
some of them.  Nothing here asserts a timing: it prints figures.

Every run writes a new JSON file (``--out``, default
``bench/results/run_all-<UTC date and time>.json``: a run never overwrites
another's) with the command, the date, the machine (CPU, Python, kvprobe's
build) and its load average at the start and the end, and per benchmark its
rows, its wall time and its raw measurements: the series behind the figures
(``scheduler_rate``, ``lookup_delay``, ``tlc_cost``) and, for a benchmark run
through its own command line (``groups``, ``chaos``), its argv, exit code
and output.  ``python -m bench.plots`` draws the figures from the newest
such file.  ``--update-docs`` also writes the table to
``docs/data/run_all-<date>.json`` (see :mod:`bench.docdata`) and prints it
as ``docs/performance.md`` quotes it; never with ``--quick``.

Each benchmark module has its own ``main`` with more detail
(``python -m bench.hotpath.cost`` etc.).  A benchmark that cannot run here (no
NIXL, no Java) gives an ``n/a`` row with the reason instead of stopping the
suite; a benchmark whose own checks fail (``chaos`` exits non-zero) gives a
``FAIL`` row.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import importlib
import io
import json
import logging
import re
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from bench.common import RESULTS_DIR, Row, load_average, machine, rows_from_output
from bench.docdata import DATA_DIR, dumps, render
from kvprobe.progress import Progress

__all__ = ["BENCHMARKS", "main", "results_files", "run"]

Measured = tuple[list[Row], Any]  # a benchmark's rows and its raw measurements (JSON data)


def results_files(directory: Path = RESULTS_DIR) -> list[Path]:
    """The results files of earlier runs in ``directory``, newest first."""
    return sorted(directory.glob("run_all-*.json"), reverse=True)


def _module_rows(name: str, function: str = "rows") -> Callable[[bool], Measured]:
    """A benchmark module's ``function(quick)`` giving rows: its rows are all it reports.

    ``name`` is the module under ``bench`` (``hotpath.cost``).
    """

    def measure(quick: bool) -> Measured:
        rows: list[Row] = getattr(importlib.import_module(f"bench.{name}"), function)(quick)
        return rows, None

    return measure


def _series(name: str) -> Callable[[bool], Measured]:
    """A measurement of ``bench.series`` (rows and the raw series a figure is drawn from)."""

    def measure(quick: bool) -> Measured:
        result: Measured = getattr(importlib.import_module("bench.series"), name)(quick)
        return result

    return measure


def _command(name: str, quick_argv: Sequence[str], full_argv: Sequence[str]) -> Callable[[bool], Measured]:
    """A benchmark run through its module's ``main(argv)``; rows parsed from its printed tables.

    ``name`` is the module under ``bench`` (``hotpath.groups``); its rows are
    labelled with the last part (``groups``), the benchmark's name.
    """

    def measure(quick: bool) -> Measured:
        argv = list(quick_argv if quick else full_argv)
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            try:
                code = importlib.import_module(f"bench.{name}").main(argv)
            except SystemExit as exc:  # its argparse refused argv (its options changed): a FAIL row
                code = exc.code if isinstance(exc.code, int) else 2
        text = out.getvalue()
        return rows_from_output(name.rsplit(".", 1)[-1], text, code), {"argv": argv, "exit_code": code, "output": text}

    return measure


BENCHMARKS: dict[str, Callable[[bool], Measured]] = {
    "hotpath": _module_rows("hotpath.cost"),
    "metrics_cost": _module_rows("hotpath.cost", "metered_rows"),
    "latency": _module_rows("hotpath.latency"),
    "memory": _module_rows("hotpath.memory"),
    "chains": _module_rows("chains.run"),
    "starvation": _module_rows("reliability.starvation"),
    "scheduler_rate": _series("scheduler_rate"),
    "lookup_delay": _series("lookup_delay"),
    "throughput": _module_rows("objstore.throughput"),
    "groups": _command("hotpath.groups", ["--rounds", "1"], ["--rounds", "5"]),
    "tlc_cost": _series("tlc_cost"),
    # Last: it forks, freezes and kills processes.
    "chaos": _command("reliability.chaos", ["--seconds", "20"], ["--seconds", "120"]),
}


def run(quick: bool, only: Sequence[str] = ()) -> tuple[list[Row], dict[str, dict[str, Any]]]:
    """Run the chosen benchmarks; return every row and, per benchmark, its rows, seconds and raw data."""
    rows: list[Row] = []
    results: dict[str, dict[str, Any]] = {}
    display = Progress(sys.stderr)  # a live line on a terminal only
    chosen = [name for name in BENCHMARKS if not only or name in only]
    for stage, name in enumerate(chosen, 1):
        display.show(f"bench: {name} ({stage} of {len(chosen)})", force=True)
        t0 = time.perf_counter()
        raw: Any = None
        try:
            got, raw = BENCHMARKS[name](quick)
        except Exception as exc:
            traceback.print_exc(file=sys.stderr)
            got = [Row(name, "n/a", f"{type(exc).__name__}", str(exc)[:100])]
        seconds = time.perf_counter() - t0
        rows += got
        results[name] = {"seconds": round(seconds, 1), "rows": [asdict(r) for r in got], "raw": raw}
        display.clear()
        print(f"[{name}: {seconds:.0f} s]", file=sys.stderr, flush=True)
    return rows, results


def table(rows: Sequence[Row]) -> str:
    lines = ["| benchmark | figure | value | detail |", "|---|---|---|---|"]
    lines += [f"| {r.bench} | {r.metric} | {r.value} | {r.detail} |" for r in rows]
    return "\n".join(lines)


def _doc_data(record: dict[str, Any], rows: Sequence[Row]) -> tuple[str, dict[str, Any]]:
    """The run's table as a data file for the docs (bench.docdata): its name and content."""
    m = record["machine"]
    cpu = re.sub(r"[^a-z0-9]+", "-", m["cpu"].lower()).strip("-")
    name = f"run_all-{record['date'][:10]}-{cpu}"
    data = {
        "title": "The benchmark suite",
        "date": f"{record['date'][:16].replace('T', ' ')} UTC",
        "machine": {key: m[key] for key in ("cpu", "cores", "system", "python", "build", "load")},
        "command": record["command"].replace(" --update-docs", ""),
        "source": f"written by {record['command']}",
        "tables": {
            "results": {
                "columns": ["benchmark", "figure", "value", "detail"],
                "rows": [[r.bench, r.metric, r.value, r.detail] for r in rows],
            }
        },
    }
    return name, data


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="short smoke run of every benchmark")
    parser.add_argument("--only", nargs="*", default=(), choices=list(BENCHMARKS), help="run only these")
    parser.add_argument("--out", type=Path, default=None, help=f"results file (default a new one in {RESULTS_DIR})")
    parser.add_argument("--update-docs", action="store_true", help=f"also write the table to {DATA_DIR}")
    args = parser.parse_args(argv)
    if args.update_docs and args.quick:
        parser.error("--update-docs with --quick: a quick run is too short for the docs to quote")
    logging.disable(logging.INFO)  # NIXL logs every agent it creates at INFO
    started = datetime.datetime.now(datetime.timezone.utc)
    load_start = load_average()
    rows, results = run(args.quick, args.only)
    cmd = " ".join(["python -m bench.run_all", *(argv if argv is not None else sys.argv[1:])])
    load = load_average()
    where = {**machine(), "load_average_start": load_start, "load_average_end": load}
    where["load"] = f"{load_start[0]} at the start, {load[0]} at the end" if load and load_start else "not recorded"
    record = {
        "command": cmd,
        "date": started.isoformat(timespec="seconds"),
        "quick": args.quick,
        "machine": where,
        "seconds": round(sum(r["seconds"] for r in results.values()), 1),
        "benchmarks": results,
    }
    out = args.out or RESULTS_DIR / f"run_all-{started:%Y%m%dT%H%M%S}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(record) + "\n")
    print(
        f"Date: {started:%Y-%m-%d %H:%M} UTC; machine: {where['cores']} cores ({where['cpu']}), "
        f"{where['system']}, Python {where['python']}, {where['build']} build; load average {where['load']}"
    )
    print(f"Command: `{cmd}` ({record['seconds']:.0f} s); raw measurements in {out}\n")
    print(table(rows))
    if args.update_docs:
        name, data = _doc_data(record, rows)
        DATA_DIR.mkdir(parents=True, exist_ok=True)
        (DATA_DIR / f"{name}.json").write_text(dumps(data))
        print(f"\nwritten: {DATA_DIR / name}.json; docs/performance.md quotes it as\n")
        print("\n".join([f"<!-- data: {name}#results -->", *render(data, "results")]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
