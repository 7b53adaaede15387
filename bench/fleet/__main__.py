"""``python -m bench.fleet [--quick]``: the fleet's tables over several seeds, their JSON, and the plot.

For each fleet size E (1, 10, 20, 30, 50, 100, 1,000: throttling begins
between 10 and 20) and each seed, on a virtual clock:

* **the grid**, on a **new prefix** (1 partition: S3 before any split): the
  scheduler modes (:data:`DEFAULT_MODES`: ``per-key``, ``chain``, ``window``,
  ``inferred``; ``--modes`` picks others, ``cached`` among them), each with the
  object backend's retries and without; on a **split prefix** (as many
  partitions as the per-key load needs at half the limit: where S3 ends up
  after its splits, or what AWS support can pre-partition; none for a fleet
  one partition serves): the modes with retries, and ``per-key`` with
  the backend's former first-come-first-served pool (``fifo``) instead of its
  pool that serves groups in turn (``fair``);
* **a new prefix in real time** (``bench/fleet/realtime.py``): S3's split
  rounds, each run on its layout and weighed by the 30 minutes it lasts;
* **the scaling check** (when E = 100 is in the list; 25 with ``--quick``):
  the same fleet unscaled and simulated by fewer engines against a store
  scaled down to match (``bench/fleet/sim.py``), so the table shows what
  the scaling above ``max_sim_engines`` changes.

``--verdict-cache HIT_TTL_S`` gives the ``cached`` mode (when ``--modes``
or ``--realtime-modes`` names it) a hit TTL other than its default's
(``bench.fleet.modes.DEFAULT_VERDICT_CACHE``); its runs warm up that long
and more before their window (``bench/fleet/sim.py``).

Every table gives each figure as ``median [min-max]`` over the seeds.
``--quick`` simulates at most 25 engines for 4 virtual seconds under 2
seeds; the full run 50 engines for 12 s under 5 seeds (the wall time it
took is in ``docs/performance.md``).  See ``bench/fleet/sim.py`` for what is
scaled and ``docs/fleet.md`` for the model.

The results go to ``bench/results/fleet.json`` and the plot to
``bench/results/fleet_store_load.png`` (untracked); ``--update-docs`` writes
them to ``docs/data/fleet.json`` and ``docs/img/fleet_store_load.png``
instead, the files ``docs/performance.md`` quotes and shows.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import math
import os
import sys
import time
from collections.abc import Sequence
from typing import Any

from bench.common import DOCS_DIR, RESULTS_DIR, load_average, machine
from bench.docdata import dumps
from bench.fleet import realtime
from bench.fleet.modes import CACHE_WARMUP_MARGIN_S, DEFAULT_VERDICT_CACHE, MODES
from bench.fleet.params import BackendParams, StoreParams, WorkloadParams
from bench.fleet.report import header, plot, row, tables
from bench.fleet.sim import Scenario, run
from bench.fleet.spread import fold
from kvprobe.statemachine.types import KvprobeError
from kvprobe.statemachine.verdict_cache import VerdictCache
from kvprobe.statemachine.windows import DEFAULT_CHAIN_WINDOW_GROWTH, window_growth

__all__ = [
    "DEFAULT_MODES",
    "Runs",
    "grid",
    "header",
    "main",
    "row",
    "scaling_grid",
    "scenario_fields",
    "seeds_option",
    "split_dynamics",
    "split_partitions",
    "verdict_cache",
]

#: Split dynamics run with S3's 30-minute split time divided by this.
COMPRESSION = 900.0

ENGINES = (1, 10, 20, 30, 50, 100, 1000)
#: The modes a run without ``--modes`` simulates: every mode but ``cached``,
#: whose warm-up of a minute and more (its hit TTL) would multiply the full
#: run's time; ``--modes ... cached`` adds it (``python -m bench.fleet.targets``
#: runs it against the issue's targets).
DEFAULT_MODES = ("per-key", "chain", "window", "inferred")
SEEDS = (1, 2, 3, 4, 5)
#: (window, warm-up, engines simulated at most): the full run's and --quick's.
FULL_RUN, QUICK_RUN = (12.0, 4.0, 50), (4.0, 3.0, 25)
QUICK_SEEDS = (1, 2)
#: A split round lasts S3's split time, in hours.
ROUND_H = StoreParams().split_after_s / 3600
#: The real-time table's "found in the first ... hours".
HORIZON_H = 2.0
#: The scaling check: this fleet, simulated whole and by fewer engines.
SCALING_ENGINES, QUICK_SCALING_ENGINES = 100, 25
PLOT = str(RESULTS_DIR / "fleet_store_load.png")
JSON = str(RESULTS_DIR / "fleet.json")
#: What --update-docs writes: the data docs/performance.md quotes and the picture it shows.
DOCS_PLOT = str(DOCS_DIR / "img" / "fleet_store_load.png")
DOCS_JSON = str(DOCS_DIR / "data" / "fleet.json")


def split_partitions(engines: int, store: StoreParams, workload: WorkloadParams) -> int:
    """Partitions (a power of two) that keep a per-key fleet's mean HEAD rate at half a partition's limit."""
    load = engines * workload.arrivals_per_s * workload.mean_blocks()
    return int(2 ** max(0, math.ceil(math.log2(max(1.0, load / (0.5 * store.head_limit_per_s))))))


def verdict_cache(hit_ttl_s: float) -> VerdictCache:
    """:data:`DEFAULT_VERDICT_CACHE` remembering stored verdicts for ``hit_ttl_s`` (``--verdict-cache``).

    Raises:
        InvalidValueError: ``hit_ttl_s`` is negative, not finite, or 0 (a
            cache that remembers nothing: misses are never remembered).
    """
    return dataclasses.replace(DEFAULT_VERDICT_CACHE, hit_ttl_s=hit_ttl_s)


def grid(
    engines: Sequence[int],
    *,
    window_s: float,
    warmup_s: float,
    max_sim: int,
    seed: int,
    paced: bool = False,
    chain_growth: float = 2.0,
    modes: Sequence[str] = DEFAULT_MODES,
    cache: VerdictCache | None = None,
) -> list[Scenario]:
    """The grid's scenarios under one seed, for ``modes`` (see the module docstring); ``cache`` for ``cached``."""
    out = []
    store, workload = StoreParams(), WorkloadParams()
    for e in engines:
        common = scenario_fields(e, window_s=window_s, warmup_s=warmup_s, max_sim=max_sim, seed=seed, paced=paced)
        common["chain_growth"] = chain_growth
        common["verdict_cache"] = cache
        for mode in modes:
            for retry in (True, False):
                out.append(Scenario(mode=mode, retry=retry, partitions=1, **common))
        split = split_partitions(e, store, workload)
        if split == 1:
            continue  # a new prefix already serves this fleet
        for mode in modes:
            out.append(Scenario(mode=mode, retry=True, partitions=split, store_label="split", **common))
        # The pool the backend had before it served groups in turn.
        out.append(Scenario(mode="per-key", retry=True, partitions=split, store_label="split", fair=False, **common))
    return out


def scenario_fields(
    engines: int, *, window_s: float, warmup_s: float, max_sim: int, seed: int, paced: bool = False
) -> dict[str, Any]:
    # Small fleets get a longer window, so every run follows >= 50 requests.
    return {
        "engines": engines,
        "seed": seed,
        "window_s": max(window_s, 50 / (engines * WorkloadParams().arrivals_per_s)),
        "warmup_s": warmup_s,
        "max_sim_engines": max_sim,
        "backend": BackendParams(paced=paced),
    }


def scaling_grid(engines: int, *, window_s: float, warmup_s: float, seed: int, paced: bool = False) -> list[Scenario]:
    """``engines`` per-key engines with retries, new and split prefix, simulated whole and by 1/2, 1/4, 1/10 as many."""
    split = split_partitions(engines, StoreParams(), WorkloadParams())
    sims = sorted({engines, *(max(1, engines // k) for k in (2, 4, 10))}, reverse=True)
    out = []
    for partitions, label in ((1, "new"), (split, "split")):
        for sim in sims:
            common = scenario_fields(engines, window_s=window_s, warmup_s=warmup_s, max_sim=sim, seed=seed, paced=paced)
            out.append(Scenario(mode="per-key", partitions=partitions, store_label=label, **common))
    return out


class Runs:
    """Runs each scenario once (a scenario the grid and the rounds share is not run twice)."""

    def __init__(self) -> None:
        self._done: dict[Scenario, dict[str, Any]] = {}

    def __len__(self) -> int:
        return len(self._done)

    def __call__(self, sc: Scenario) -> dict[str, Any]:
        if sc not in self._done:
            self._done[sc] = run(sc)
        return self._done[sc]

    def folded(self, scenarios: Sequence[Scenario], seeds: Sequence[int]) -> list[dict[str, Any]]:
        """Each scenario run under every seed (its own seed ignored), folded into one row."""
        return [fold([self(dataclasses.replace(sc, seed=s)) for s in seeds]) for sc in scenarios]


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


def _save(record: dict[str, Any], json_path: str, plot_path: str) -> None:
    """Write ``record`` to ``json_path`` and, unless ``plot_path`` is empty, its plot there."""
    os.makedirs(os.path.dirname(json_path) or ".", exist_ok=True)
    with open(json_path, "w") as f:
        f.write(dumps(record))
    print(f"results: {json_path}")
    if plot_path:
        plot(record["runs"], plot_path)
        print(f"plot: {plot_path}")


def _print_tables(record: dict[str, Any]) -> None:
    for name, table in record["tables"].items():
        print(f"\n{name}:\n| " + " | ".join(table["columns"]) + " |")
        for cells in table["rows"]:
            print("| " + " | ".join(cells) + " |")


def _realtime(args: argparse.Namespace, runs: Runs, base: dict[str, Any]) -> list[dict[str, Any]]:
    """A new prefix in real time, for each fleet size and mode (retries on), each seed followed on its own."""
    out = []
    for e in args.engines:
        for mode in args.realtime_modes:
            by_seed = []
            for seed in args.seeds:
                fields = scenario_fields(e, **base, seed=seed)
                sc = Scenario(mode=mode, chain_growth=args.chain_growth, verdict_cache=args.cache, **fields)
                by_seed.append(realtime.summary(realtime.follow(sc, runs), ROUND_H, HORIZON_H))
            out.append({"engines": e, "mode": mode, "seeds": list(args.seeds), "by_seed": by_seed})
            paths = "; ".join("\u2192".join(map(str, s["partitions"])) for s in by_seed)
            print(f"  E={e} {mode}: partitions by round (each seed): {paths}", flush=True)
    return out


def _simulate(args: argparse.Namespace) -> dict[str, Any]:
    """Run every section under every seed, printing as they come; the results record."""
    window_s, warmup_s, max_sim = QUICK_RUN if args.quick else FULL_RUN
    seeds = list(args.seeds)
    started = time.perf_counter()
    date = datetime.datetime.now(datetime.timezone.utc)
    runs = Runs()
    print(f"seeds {seeds}; each figure: median [min\u2013max]\n" + header(), flush=True)
    rows = []
    for sc in grid(
        args.engines,
        window_s=window_s,
        warmup_s=warmup_s,
        max_sim=max_sim,
        seed=seeds[0],
        paced=args.paced,
        chain_growth=args.chain_growth,
        modes=args.modes,
        cache=args.cache,
    ):
        rows += runs.folded([sc], seeds)
        print(row(rows[-1]), flush=True)
    print(f"\nA new prefix in real time ({ROUND_H * 60:g} min a split round):", flush=True)
    base = {"window_s": window_s, "warmup_s": warmup_s, "max_sim": max_sim, "paced": args.paced}
    realtime_rows = _realtime(args, runs, base)
    scaling_e = QUICK_SCALING_ENGINES if args.quick else SCALING_ENGINES
    scaling = []
    if scaling_e in args.engines:
        print(f"\nThe scaling check at {scaling_e} engines:", flush=True)
        scenarios = scaling_grid(scaling_e, window_s=window_s, warmup_s=warmup_s, seed=seeds[0], paced=args.paced)
        scaling = runs.folded(scenarios, seeds)
    dynamics = []
    if args.compressed:
        dynamics = _compressed(args, max_sim)
    load = load_average()
    wall = time.perf_counter() - started
    record: dict[str, Any] = {
        "title": "The fleet simulation" + (" (quick)" if args.quick else ""),
        "date": f"{date:%Y-%m-%d %H:%M} UTC",
        "machine": {**machine(), "load": "not recorded" if load is None else f"{load[0]} at the end"},
        "command": "python -m bench.fleet" + (" --quick" if args.quick else "") + _options(args),
        "note": f"{len(seeds)} seeds, {wall / 60:.0f} min",
        "source": "written by bench.fleet (virtual time: the figures do not depend on the machine; wall_s does)",
        "figure": "img/fleet_store_load.png",
        "seeds": seeds,
        "window_s": window_s,
        "warmup_s": warmup_s,
        "max_sim_engines": max_sim,
        "round_h": ROUND_H,
        "horizon_h": HORIZON_H,
        "runs": rows,
        "realtime": realtime_rows,
        "scaling": scaling,
        "split_dynamics": dynamics,
    }
    record["tables"] = tables(record)
    _print_tables(record)
    print(
        f"\n{len(runs)} runs in {wall:.0f} s; window {window_s:g} s (longer for small fleets: >= 50 requests) "
        f"after {warmup_s:g} s warm-up (cached: its hit TTL + {CACHE_WARMUP_MARGIN_S:g} s); "
        "'sim' = engines simulated (store limit scaled by sim/E above that); "
        "'found' = stored blocks answered stored; $/h at $0.0004 per 1,000 billed HEADs (503s are not billed) "
        "and $0.005 per 1,000 PUTs"
    )
    return record


def seeds_option(seeds: Sequence[int], *, quick: bool) -> str:
    """`` --seeds ...`` for a record's command, or "" when ``seeds`` are the run's default ones."""
    default = QUICK_SEEDS if quick else SEEDS
    return "" if list(seeds) == list(default) else " --seeds " + " ".join(map(str, seeds))


def _options(args: argparse.Namespace) -> str:
    """The command line's options that differ from the defaults (for the record's command)."""
    out = ""
    if list(args.engines) != list(ENGINES):
        out += " --engines " + " ".join(map(str, args.engines))
    out += seeds_option(args.seeds, quick=args.quick)
    if list(args.modes) != list(DEFAULT_MODES):
        out += " --modes " + " ".join(args.modes)
    if list(args.realtime_modes) != list(DEFAULT_MODES):
        out += " --realtime-modes " + " ".join(args.realtime_modes)
    if args.cache is not None:
        out += f" --verdict-cache {args.cache.hit_ttl_s:g}"
    if args.chain_growth != DEFAULT_CHAIN_WINDOW_GROWTH:
        out += f" --chain-growth {args.chain_growth:g}"
    return out + (" --compressed" if args.compressed else "") + (" --paced" if args.paced else "")


def _compressed(args: argparse.Namespace, max_sim: int) -> list[dict[str, Any]]:
    """The compressed split runs (per-key, E >= 100, every seed), printed as they come."""
    print(f"\nA new prefix splitting {COMPRESSION:g}x faster than S3 (per-key, retries; weights wrong, see above):")
    out = []
    for e in (e for e in args.engines if e >= 100):
        for seed in args.seeds:
            d = split_dynamics(e, max_sim=max_sim, seed=seed, window_s=20.0 if args.quick else 40.0)
            keep = ("engines", "seed", "partitions_at_end", "splits", "settled_s", "settled_real_h", "stored_found")
            out.append({k: d[k] for k in keep})
            print(
                f"  E={e} seed {seed}: 1 -> {d['partitions_at_end']} partitions; throttling under 2 % from "
                f"second {d['settled_s']:g} ({d['settled_real_h']:.1f} h at S3's pace)",
                flush=True,
            )
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.fleet", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="25 simulated engines, 4 virtual seconds, 2 seeds")
    parser.add_argument("--engines", type=int, nargs="+", default=list(ENGINES))
    parser.add_argument("--seeds", type=int, nargs="+", help=f"default {list(SEEDS)} ({list(QUICK_SEEDS)} quick)")
    for flag, what in (("--modes", "the grid's modes"), ("--realtime-modes", "modes followed in real time")):
        parser.add_argument(flag, nargs="+", choices=list(MODES), default=list(DEFAULT_MODES), help=what)
    parser.add_argument(
        "--verdict-cache",
        type=float,
        metavar="HIT_TTL_S",
        help="the cached mode remembers stored verdicts this long (default "
        f"{DEFAULT_VERDICT_CACHE.hit_ttl_s:g}; misses never); needs cached in --modes or --realtime-modes",
    )
    parser.add_argument(
        "--paced", action="store_true", help="the backend paces its HEADs (today's backend; default: as before it did)"
    )
    parser.add_argument("--compressed", action="store_true", help="also the compressed split runs (E >= 100)")
    parser.add_argument(
        "--chain-growth",
        type=float,
        default=DEFAULT_CHAIN_WINDOW_GROWTH,
        help="how the chain modes' windows grow (chain_window_growth; default %(default)g)",
    )
    parser.add_argument("--json", default=JSON, help=f"results file (default {JSON})")
    parser.add_argument("--plot", default=PLOT, help=f"plot file (default {PLOT}); '' for none")
    parser.add_argument(
        "--from-json", metavar="FILE", help="print and plot a results file (its tables rebuilt) instead of simulating"
    )
    parser.add_argument(
        "--update-docs", action="store_true", help=f"write {DOCS_JSON} and {DOCS_PLOT} instead (not with --quick)"
    )
    args = parser.parse_args(argv)
    if args.update_docs and args.quick:
        parser.error("--update-docs with --quick: a quick run is too short for the docs to quote")
    if args.seeds is None:
        args.seeds = list(QUICK_SEEDS if args.quick else SEEDS)
    try:
        window_growth(args.chain_growth)
    except KvprobeError as exc:
        parser.error(f"--chain-growth: {exc}")
    args.cache = None
    if args.verdict_cache is not None:
        if "cached" not in args.modes + args.realtime_modes:
            parser.error("--verdict-cache sets the cached mode's cache: add cached to --modes or --realtime-modes")
        try:
            args.cache = verdict_cache(args.verdict_cache)
        except KvprobeError as exc:
            parser.error(f"--verdict-cache: {exc}")
    if len(set(args.seeds)) != len(args.seeds) or any(e < 1 for e in args.engines):
        parser.error(f"seeds must differ and engines be >= 1, got seeds {args.seeds}, engines {args.engines}")
    json_path, plot_path = (DOCS_JSON, DOCS_PLOT) if args.update_docs else (args.json, args.plot)
    if not args.from_json:
        _save(_simulate(args), json_path, plot_path)
        return 0
    with open(args.from_json) as f:
        record = json.load(f)
    record["tables"] = tables(record)  # derived from the seeds' figures: rebuilt, never edited
    print(header())
    for r in record["runs"]:
        print(row(r))
    _print_tables(record)
    if args.update_docs and os.path.abspath(args.from_json) != os.path.abspath(DOCS_JSON):
        _save(record, DOCS_JSON, DOCS_PLOT)
    elif plot_path:
        plot(record["runs"], plot_path)
        print(f"plot: {plot_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
