"""The command line and the record shared by the fleet's table runners (``bench.fleet.targets``, ``.eviction``).

Each runner simulates its cases under every seed and hands back a record
with one table; this prints the table, writes the record to
``bench/results/`` or, with ``--update-docs``, to ``docs/data/``, and
refuses what would write a misleading record (a quick run into the docs,
a seed twice).
"""

from __future__ import annotations

import argparse
import datetime
import os
from collections.abc import Callable, Sequence
from typing import Any

from bench.common import load_average, machine
from bench.docdata import dumps
from bench.fleet.__main__ import FULL_RUN, QUICK_RUN, QUICK_SEEDS, SEEDS, seeds_option

__all__ = ["record_head", "table_main"]


def record_head(
    title: str, module: str, seeds: Sequence[int], *, quick: bool, date: datetime.datetime, runs: int, wall_s: float
) -> dict[str, Any]:
    """The fields every runner's record opens with: what ran, when, where, and how long."""
    window_s, warmup_s, max_sim = QUICK_RUN if quick else FULL_RUN
    load = load_average()
    return {
        "title": title + (" (quick)" if quick else ""),
        "date": f"{date:%Y-%m-%d %H:%M} UTC",
        "machine": {**machine(), "load": "not recorded" if load is None else f"{load[0]} at the end"},
        "command": f"python -m {module}" + (" --quick" if quick else "") + seeds_option(seeds, quick=quick),
        "note": f"{len(seeds)} seeds, {runs} runs, {wall_s / 60:.1f} min",
        "source": f"written by {module} (virtual time: the figures do not depend on the machine)",
        "wall_s": wall_s,
        "seeds": list(seeds),
        "window_s": window_s,
        "warmup_s": warmup_s,
        "max_sim_engines": max_sim,
    }


def table_main(
    argv: Sequence[str] | None,
    *,
    module: str,
    description: str,
    table: str,
    json_path: str,
    docs_json: str,
    quick_help: str,
    quick_in_docs: str,
    simulate: Callable[..., dict[str, Any]],
) -> int:
    """Parse the options, run ``simulate(seeds, quick=...)``, print its ``table``, write the record.

    Exits through the parser (status 2) on bad options: ``--update-docs``
    with ``--quick`` (``quick_in_docs`` says why), or seeds repeated.
    """
    parser = argparse.ArgumentParser(prog=f"python -m {module}", description=description)
    parser.add_argument("--quick", action="store_true", help=quick_help)
    parser.add_argument("--seeds", type=int, nargs="+", help=f"default {list(SEEDS)} ({list(QUICK_SEEDS)} quick)")
    parser.add_argument("--json", default=json_path, help=f"results file (default {json_path})")
    parser.add_argument("--update-docs", action="store_true", help=f"write {docs_json} instead (not with --quick)")
    args = parser.parse_args(argv)
    if args.update_docs and args.quick:
        parser.error(f"--update-docs with --quick: {quick_in_docs}")
    seeds = list(args.seeds or (QUICK_SEEDS if args.quick else SEEDS))
    if len(set(seeds)) != len(seeds):
        parser.error(f"seeds must differ, got {seeds}")
    record = simulate(seeds, quick=args.quick)
    shown = record["tables"][table]
    print("\n| " + " | ".join(shown["columns"]) + " |")
    for cells in shown["rows"]:
        print("| " + " | ".join(cells) + " |")
    path = docs_json if args.update_docs else args.json
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "w") as f:
        f.write(dumps(record))
    print(f"\n{len(seeds)} seeds in {record['wall_s']:.0f} s; results: {path}")
    return 0
