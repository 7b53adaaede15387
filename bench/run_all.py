"""Run the whole benchmark suite and print one Markdown table.

``python -m bench.run_all`` (about 10 minutes on the 2-core bench machine)
or ``python -m bench.run_all --quick`` (a smoke run of every benchmark, about
2 minutes; its figures are too short to quote).  ``--only NAME`` runs some
of them.  Nothing here asserts a timing: it prints figures.

Each benchmark module has its own ``main`` with more detail
(``python -m bench.hotpath`` etc.).  A benchmark that cannot run here (no
NIXL, no Java) gives an ``n/a`` row with the reason instead of stopping the
suite.
"""

from __future__ import annotations

import argparse
import datetime
import importlib
import logging
import os
import platform
import sys
import time
import traceback
from collections.abc import Sequence

from bench.common import Row
from kvprobe.progress import Progress

__all__ = ["BENCHMARKS", "main", "run"]

BENCHMARKS = ("hotpath", "latency", "memory", "starvation", "throughput", "tlc_cost")


def run(quick: bool, only: Sequence[str] = ()) -> tuple[list[Row], dict[str, float]]:
    rows: list[Row] = []
    seconds: dict[str, float] = {}
    display = Progress(sys.stderr)  # a live line on a terminal only
    chosen = [name for name in BENCHMARKS if not only or name in only]
    for stage, name in enumerate(chosen, 1):
        display.show(f"bench: {name} ({stage} of {len(chosen)})", force=True)
        t0 = time.perf_counter()
        try:
            module = importlib.import_module(f"bench.{name}")
            rows += module.rows(quick)
        except Exception as exc:
            traceback.print_exc(file=sys.stderr)
            rows.append(Row(name, "n/a", f"{type(exc).__name__}", str(exc)[:100]))
        seconds[name] = time.perf_counter() - t0
        display.clear()
        print(f"[{name}: {seconds[name]:.0f} s]", file=sys.stderr, flush=True)
    return rows, seconds


def _machine() -> str:
    cpu = "unknown CPU"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    load = ""
    if hasattr(os, "getloadavg"):
        load = f", load average at the end {os.getloadavg()[0]:.1f}"
    system = f"{platform.system()} {platform.release()}, Python {platform.python_version()}"
    return f"{os.cpu_count()} cores ({cpu}), {system}{load}"


def table(rows: Sequence[Row]) -> str:
    lines = ["| benchmark | figure | value | detail |", "|---|---|---|---|"]
    lines += [f"| {r.bench} | {r.metric} | {r.value} | {r.detail} |" for r in rows]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="short smoke run of every benchmark")
    parser.add_argument("--only", nargs="*", default=(), choices=BENCHMARKS, help="run only these")
    args = parser.parse_args(argv)
    logging.disable(logging.INFO)  # NIXL logs every agent it creates at INFO
    started = datetime.datetime.now(datetime.timezone.utc)
    rows, seconds = run(args.quick, args.only)
    cmd = "python -m bench.run_all" + (" --quick" if args.quick else "")
    print(f"Date: {started:%Y-%m-%d %H:%M} UTC; machine: {_machine()}")
    print(f"Command: `{cmd}` ({sum(seconds.values()):.0f} s)\n")
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
