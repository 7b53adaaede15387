"""``python -m bench.fleet [--quick]``: the fleet table, its JSON, and the store-load plot.

For each fleet size E (1, 10, 100, 1,000) the grid runs, on a virtual clock:

* a **new prefix** (1 partition: S3 before any split; splits need 30-60 min
  of sustained throttling each, far longer than the simulated window): the
  three scheduler modes (``per-key``, ``chain``, ``window``), each with the
  object backend's retries and without;
* a **split prefix** (as many partitions as the per-key load needs at half
  the limit: where S3 ends up after its splits, or what AWS support can
  pre-partition; none for a fleet one partition serves): the three modes with retries, and
  ``per-key`` with the backend's former first-come-first-served pool
  (``fifo``) instead of its pool that serves groups in turn (``fair``).

``--quick`` simulates at most 25 engines for 4 virtual seconds (under 5
minutes here); the full run 50 engines for 12 s (about 5 minutes).  See ``bench/fleet/sim.py``
for what is scaled and ``docs/fleet.md`` for the conclusions.

The results go to ``bench/results/fleet.json`` and the plot to
``bench/results/fleet_store_load.png`` (untracked); ``--update-docs`` writes
them to ``docs/data/fleet.json`` and ``docs/img/fleet_store_load.png``
instead, the files ``docs/fleet.md`` quotes and shows.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import sys
import time
from collections.abc import Sequence
from typing import Any

from bench.common import DOCS_DIR, RESULTS_DIR, load_average, machine
from bench.fleet.engine import MODES
from bench.fleet.params import StoreParams, WorkloadParams
from bench.fleet.sim import Scenario, run

__all__ = ["grid", "header", "main", "row", "split_dynamics", "split_partitions"]

#: Split dynamics run with S3's 30-minute split time divided by this.
COMPRESSION = 900.0

ENGINES = (1, 10, 100, 1000)
PLOT = str(RESULTS_DIR / "fleet_store_load.png")
JSON = str(RESULTS_DIR / "fleet.json")
#: What --update-docs writes: the data docs/fleet.md quotes and the picture it shows.
DOCS_PLOT = str(DOCS_DIR / "img" / "fleet_store_load.png")
DOCS_JSON = str(DOCS_DIR / "data" / "fleet.json")


def split_partitions(engines: int, store: StoreParams, workload: WorkloadParams) -> int:
    """Partitions (a power of two) that keep a per-key fleet's mean HEAD rate at half a partition's limit."""
    load = engines * workload.arrivals_per_s * workload.mean_blocks()
    return int(2 ** max(0, math.ceil(math.log2(max(1.0, load / (0.5 * store.head_limit_per_s))))))


def grid(engines: Sequence[int], *, window_s: float, warmup_s: float, max_sim: int, seed: int) -> list[Scenario]:
    """The scenarios of one report (see the module docstring)."""
    out = []
    store, workload = StoreParams(), WorkloadParams()
    for e in engines:
        # Small fleets get a longer window, so every row follows >= 50 requests.
        common: dict[str, Any] = {
            "engines": e,
            "seed": seed,
            "window_s": max(window_s, 50 / (e * workload.arrivals_per_s)),
            "warmup_s": warmup_s,
            "max_sim_engines": max_sim,
        }
        for mode in MODES:
            for retry in (True, False):
                out.append(Scenario(mode=mode, retry=retry, partitions=1, **common))
        split = split_partitions(e, store, workload)
        if split == 1:
            continue  # a new prefix already serves this fleet
        for mode in MODES:
            out.append(Scenario(mode=mode, retry=True, partitions=split, store_label="split", **common))
        # The pool the backend had before it served groups in turn.
        out.append(Scenario(mode="per-key", retry=True, partitions=split, store_label="split", fair=False, **common))
    return out


def header(run_columns: bool = True) -> str:
    """The table's header; ``run_columns``: with the engines simulated and the wall seconds of each run."""
    return (
        f"{'E':>5} {'store':>5} {'parts':>5} {'mode':>8} {'retry':>5} {'pool':>4} | "
        f"{'HEAD/s':>9} {'peak/part':>9} {'thrott':>6} {'HEAD/req':>8} {'$/hour':>8} | "
        f"{'p50':>4} {'p99':>4} steps | {'lost':>5}" + (f" {'sim':>4} {'wall':>5}" if run_columns else "")
    )


def row(r: dict[str, Any], run_columns: bool = True) -> str:
    """One table line (``run_columns`` as for :func:`header`)."""
    return (
        f"{r['engines']:>5} {r['store']:>5} {r['partitions_at_start']:>5} {r['mode']:>8} "
        f"{('yes' if r['retry'] else 'no'):>5} {('fair' if r['fair'] else 'fifo'):>4} | "
        f"{r['heads_per_s']:>9,.0f} {r['peak_per_partition_per_s']:>9,.0f} {r['throttled_fraction']:>6.1%} "
        f"{r['heads_per_request']:>8,.0f} {r['cost_per_hour_usd']:>8,.2f} | "
        f"{r['delay_p50_steps']:>4.0f} {r['delay_p99_steps']:>4.0f}       | "
        f"{r['stored_blocks_lost']:>5.1%}" + (f" {r['sim_engines']:>4} {r['wall_s']:>5.1f}" if run_columns else "")
    )


def split_dynamics(engines: int, *, max_sim: int, seed: int, window_s: float = 40.0) -> dict[str, Any]:
    """A new prefix under ``engines`` per-key engines, with splits after 1,800 s / COMPRESSION of throttling.

    Returns the run's figures plus ``settled_s``: the first second after
    which under 2 % of each second's HEADs were throttled, in virtual time,
    and ``settled_real_h``: the same in hours at S3's 30 minutes per split.
    """
    store = StoreParams(split_after_s=StoreParams().split_after_s / COMPRESSION)
    r = run(
        Scenario(
            engines=engines,
            mode="per-key",
            store=store,
            warmup_s=0.0,
            window_s=window_s,
            max_sim_engines=max_sim,
            seed=seed,
        )
    )
    by_second = r["throttled_by_second"]
    settled = next(
        (sec for sec in sorted(by_second) if all(f < 0.02 for s, f in by_second.items() if s >= sec)), math.inf
    )
    r["settled_s"] = settled
    r["settled_real_h"] = settled * COMPRESSION / 3600
    return r


def plot(results: list[dict[str, Any]], path: str) -> None:
    """Store load and throttling against fleet size (matplotlib, Agg)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (load, thr) = plt.subplots(1, 2, figsize=(11, 4.2))
    # chain draws hollow and smaller: on this workload it lies on per-key.
    looks = {"per-key": ("o", 9, None), "chain": ("s", 5, "none"), "window": ("d", 7, None)}
    for mode in MODES:
        marker, size, face = looks[mode]
        for parts, style in (("new", "-"), ("split", "--")):
            pts = [r for r in results if r["mode"] == mode and r["retry"] and r["fair"] and r["store"] == parts]
            pts.sort(key=lambda r: r["engines"])
            if pts:
                xs = [r["engines"] for r in pts]
                kw: dict[str, Any] = {"marker": marker, "markersize": size, "markerfacecolor": face}
                load.plot(xs, [r["heads_per_s"] for r in pts], style, label=f"{mode}, {parts} prefix", **kw)
                thr.plot(xs, [100 * r["throttled_fraction"] for r in pts], style, label=f"{mode}, {parts}", **kw)
    load.axhline(StoreParams().head_limit_per_s, color="grey", lw=1, ls=":")
    load.text(1, StoreParams().head_limit_per_s * 1.15, "one partition: 5,500 HEAD/s", fontsize=8, color="grey")
    for ax in (load, thr):
        ax.set_xscale("log")
        ax.set_xlabel("engines")
        ax.grid(True, which="both", alpha=0.3)
    load.set_yscale("log")
    load.set_ylabel("HEADs/s at the store (throttled included)")
    thr.set_ylabel("% of HEADs answered 503 SlowDown")
    load.legend(fontsize=7)
    thr.legend(fontsize=7)
    fig.suptitle("kvprobe fleet on S3: store load vs engines (simulated; bench/fleet)", fontsize=10)
    fig.tight_layout()
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _save(record: dict[str, Any], json_path: str, plot_path: str) -> None:
    """Write ``record`` to ``json_path`` and, unless ``plot_path`` is empty, its plot there."""
    os.makedirs(os.path.dirname(json_path) or ".", exist_ok=True)
    with open(json_path, "w") as f:
        json.dump(record, f, indent=1)
        f.write("\n")
    print(f"results: {json_path}")
    if plot_path:
        plot(record["runs"], plot_path)
        print(f"plot: {plot_path}")


def _simulate(args: argparse.Namespace) -> dict[str, Any]:
    """Run the grid and the split dynamics, printing as they come; the results record."""
    window_s, warmup_s, max_sim = (4.0, 3.0, 25) if args.quick else (12.0, 4.0, 50)
    started = time.perf_counter()
    date = datetime.datetime.now(datetime.timezone.utc)
    results = []
    print(header(), flush=True)
    for sc in grid(args.engines, window_s=window_s, warmup_s=warmup_s, max_sim=max_sim, seed=args.seed):
        r = run(sc)
        results.append(r)
        print(row(r), flush=True)
    print(f"\nA new prefix splitting (splits {COMPRESSION:g}x faster than S3's 30 min; per-key, retries):")
    dynamics = []
    for e in (e for e in args.engines if e >= 100):
        d = split_dynamics(e, max_sim=max_sim, seed=args.seed, window_s=20.0 if args.quick else 40.0)
        dynamics.append(d)
        first = sorted(d["throttled_by_second"].items())[:3]
        print(
            f"  E={e}: 1 -> {d['partitions_at_end']} partitions ({d['splits']} splits); throttled "
            + ", ".join(f"{f:.0%}" for _, f in first)
            + f" in the first seconds; under 2 % from second {d['settled_s']:g}: "
            f"{d['settled_real_h']:.1f} h at S3's pace; stored blocks lost over the run {d['stored_blocks_lost']:.1%}",
            flush=True,
        )
    print(
        f"\n{len(results)} runs in {time.perf_counter() - started:.0f} s; window {window_s:g} s (longer for "
        f"small fleets: >= 50 requests) after "
        f"{warmup_s:g} s warm-up; 'sim' = engines simulated (store limit scaled by sim/E above that); "
        "'lost' = stored blocks answered MISS; $/hour at $0.0004 per 1,000 billed HEADs (503s are not billed)"
    )
    load = load_average()
    return {
        "title": "The fleet simulation" + (" (quick)" if args.quick else ""),
        "date": f"{date:%Y-%m-%d %H:%M} UTC",
        "machine": {**machine(), "load": "not recorded" if load is None else f"{load[0]} at the end"},
        "command": "python -m bench.fleet" + (" --quick" if args.quick else "") + f" --seed {args.seed}",
        "source": "written by bench.fleet (virtual time: the figures do not depend on the machine; wall_s does)",
        "figure": "img/fleet_store_load.png",
        "window_s": window_s,
        "warmup_s": warmup_s,
        "max_sim_engines": max_sim,
        "runs": results,
        "split_dynamics": dynamics,
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.fleet", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="25 simulated engines, 4 virtual seconds")
    parser.add_argument("--engines", type=int, nargs="+", default=list(ENGINES))
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", default=JSON, help=f"results file (default {JSON})")
    parser.add_argument("--plot", default=PLOT, help=f"plot file (default {PLOT}); '' for none")
    parser.add_argument("--from-json", metavar="FILE", help="print and plot a results file instead of simulating")
    parser.add_argument(
        "--update-docs", action="store_true", help=f"write {DOCS_JSON} and {DOCS_PLOT} instead (not with --quick)"
    )
    args = parser.parse_args(argv)
    if args.update_docs and args.quick:
        parser.error("--update-docs with --quick: a quick run is too short for the docs to quote")
    json_path, plot_path = (DOCS_JSON, DOCS_PLOT) if args.update_docs else (args.json, args.plot)
    if not args.from_json:
        _save(_simulate(args), json_path, plot_path)
        return 0
    with open(args.from_json) as f:
        record = json.load(f)
    run_columns = all("wall_s" in r for r in record["runs"])  # a table copied from the docs has none
    print(header(run_columns))
    for r in record["runs"]:
        print(row(r, run_columns))
    if args.update_docs and os.path.abspath(args.from_json) != os.path.abspath(DOCS_JSON):
        _save(record, DOCS_JSON, DOCS_PLOT)
    elif plot_path:
        plot(record["runs"], plot_path)
        print(f"plot: {plot_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
