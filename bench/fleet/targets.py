"""``python -m bench.fleet.targets [--quick]``: the fleet's three simulated targets, per walk, over seeds.

A fleet with memory across requests (the verdict cache, mode ``cached``) is
held to three targets on the workload of ``docs/fleet.md`` (the full run's
window, warm-up and simulated engines), with the paced backend as shipped:

* **HEADs/request over ideal** <= 1.2: every HEAD sent (throttled ones
  included) per tracked request, over the exact ideal (its stored blocks
  plus the first one after them), at 100 engines on a split prefix (the
  partitions ``bench.fleet``'s :func:`split_partitions` gives);
* **found in the first 2 h** >= 60 %: 100 engines on a new prefix, followed
  round by round (``bench/fleet/realtime.py``), the stored blocks found,
  time-weighted over the first ``HORIZON_H`` hours;
* **$/h** <= 150: the billed HEADs of 1,000 engines on a split prefix.

Each configuration (the exact walk with growth 2 and 1.5 from a first
window of 16, and with growth 1.25 from a first window of 4, ``cached``
with each schedule and with stored verdicts remembered 300 s instead of
60, ``inferred``) is run under every seed; a figure is shown as
``median [min-max]`` and a target as met by ``all`` seeds, by the
``median`` only, or ``no``.  ``--quick`` runs 25 engines for every target
under 2 seeds on a short window: a check that the command works, whose
verdicts say nothing about the issue's fleets.

Results: ``bench/results/fleet_targets.json``; ``--update-docs`` writes
``docs/data/fleet_targets.json`` instead (its table ``targets``).
"""

from __future__ import annotations

import dataclasses
import datetime
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from bench.common import DOCS_DIR, RESULTS_DIR
from bench.fleet import realtime
from bench.fleet.__main__ import (
    FULL_RUN,
    HORIZON_H,
    QUICK_RUN,
    ROUND_H,
    Runs,
    scenario_fields,
    split_partitions,
    verdict_cache,
)
from bench.fleet.command import record_head, table_main
from bench.fleet.params import StoreParams, WorkloadParams
from bench.fleet.sim import Scenario
from bench.fleet.spread import cell, dollars, percent, span
from kvprobe.statemachine.windows import DEFAULT_CHAIN_WINDOW

__all__ = ["CONFIGS", "TARGETS", "Config", "Target", "main", "measure"]

JSON = str(RESULTS_DIR / "fleet_targets.json")
DOCS_JSON = str(DOCS_DIR / "data" / "fleet_targets.json")
#: The issue's fleets (``--quick``: 25 engines for every target).
ENGINES, SPLIT_COST_ENGINES, QUICK_ENGINES = 100, 1000, 25


@dataclass(frozen=True)
class Config:
    """One configuration of the fleet: a mode, the growth of its chain windows and the first one.

    ``hit_ttl_s``: how long the ``cached`` mode remembers a stored verdict
    (None: ``DEFAULT_VERDICT_CACHE``'s 60 s).
    """

    label: str
    mode: str
    chain_growth: float = 2.0
    chain_window: int = DEFAULT_CHAIN_WINDOW
    hit_ttl_s: float | None = None


@dataclass(frozen=True)
class Target:
    """One target: its figure's key, how a cell shows it, its bound and whether the bound is a ceiling."""

    key: str
    column: str
    show: Callable[[float], str]
    bound: float
    ceiling: bool

    def met(self, value: float) -> bool:
        """Whether ``value`` meets the bound (a NaN never does)."""
        return value <= self.bound if self.ceiling else value >= self.bound


CONFIGS = (
    Config("chain g=2", "chain"),
    Config("chain g=1.5", "chain", 1.5),
    Config("chain 4, g=1.25", "chain", 1.25, 4),
    Config("cached", "cached"),
    Config("cached g=1.5", "cached", 1.5),
    Config("cached 4, g=1.25", "cached", 1.25, 4),
    Config("cached 4, g=1.25, hits 300 s", "cached", 1.25, 4, hit_ttl_s=300.0),
    Config("inferred", "inferred"),
)


def _ratio(value: float) -> str:
    return f"{value:.2f}\u00d7"


#: Each column names its fleet: ``{engines}`` (100) or ``{cost_engines}`` (1,000), 25 each with --quick.
TARGETS = (
    Target("heads_over_ideal", "HEADs/request over ideal ({engines} engines, split)", _ratio, 1.2, True),
    Target("found_first_h", f"found in the first {HORIZON_H:g} h ({{engines}} engines, new)", percent, 0.6, False),
    Target("split_cost_usd_per_h", "HEAD $/h ({cost_engines} engines, split)", dollars, 150.0, True),
)


def measure(config: Config, seed: int, runs: Runs, *, quick: bool) -> dict[str, Any]:
    """The three targets' figures of ``config`` under ``seed``, and the cache counters per request (split run).

    Raises:
        ValueError: ``config.mode`` names no mode.
    """
    window_s, warmup_s, max_sim = QUICK_RUN if quick else FULL_RUN
    engines, cost_engines = (QUICK_ENGINES, QUICK_ENGINES) if quick else (ENGINES, SPLIT_COST_ENGINES)
    store, workload = StoreParams(), WorkloadParams()

    def scenario(e: int) -> Scenario:
        fields = scenario_fields(e, window_s=window_s, warmup_s=warmup_s, max_sim=max_sim, seed=seed, paced=True)
        cache = None if config.hit_ttl_s is None else verdict_cache(config.hit_ttl_s)
        walk = {"chain_growth": config.chain_growth, "chain_window": config.chain_window, "verdict_cache": cache}
        return Scenario(mode=config.mode, **walk, **fields)

    split = runs(dataclasses.replace(scenario(engines), partitions=split_partitions(engines, store, workload)))
    base = scenario(engines)
    rounds = realtime.follow(base, runs)
    costly = scenario(cost_engines)
    cost = runs(dataclasses.replace(costly, partitions=split_partitions(cost_engines, store, workload)))
    return {
        "seed": seed,
        "heads_over_ideal": split["heads_per_request"] / split["ideal_heads_per_request"],
        "heads_per_request": split["heads_per_request"],
        "ideal_heads_per_request": split["ideal_heads_per_request"],
        "found_first_h": realtime.found_in_first(rounds, HORIZON_H, ROUND_H),
        "partitions_by_round": [r["partitions_at_start"] for r in rounds],
        "split_cost_usd_per_h": cost["cost_per_hour_usd"],
        "cache_per_request": split["cache_per_request"],
        "answers_above_truth": split["answers_above_truth"] + cost["answers_above_truth"],
        "warmup_s": split["warmup_s"],
    }


def _verdict(target: Target, values: Sequence[float]) -> str:
    if all(target.met(v) for v in values):
        return "all"
    return "median" if target.met(span(values)[0]) else "no"


def _row(label: str, by_seed: Sequence[dict[str, Any]]) -> list[str]:
    cells = [label]
    for target in TARGETS:
        values = [s[target.key] for s in by_seed]
        cells.append(f"{cell(span(values)[0], values, target.show)} ({_verdict(target, values)})")
    return cells


def _table(configs: Sequence[dict[str, Any]], engines: int, cost_engines: int) -> dict[str, Any]:
    columns = ["configuration"]
    for t in TARGETS:
        fleet = t.column.format(engines=f"{engines:,}", cost_engines=f"{cost_engines:,}")
        columns.append(f"{fleet}: {'<=' if t.ceiling else '>='} {t.show(t.bound)}")
    return {"columns": columns, "rows": [_row(c["label"], c["by_seed"]) for c in configs]}


def simulate(seeds: Sequence[int], *, quick: bool) -> dict[str, Any]:
    """Every configuration under every seed, printed as it comes; the results record."""
    started = time.perf_counter()
    date = datetime.datetime.now(datetime.timezone.utc)
    runs = Runs()
    configs = []
    for config in CONFIGS:
        by_seed = [measure(config, seed, runs, quick=quick) for seed in seeds]
        configs.append({**dataclasses.asdict(config), "by_seed": by_seed})
        print(" | ".join(_row(config.label, by_seed)), flush=True)
    wall = time.perf_counter() - started
    head = record_head(
        "The fleet's simulated targets",
        "bench.fleet.targets",
        seeds,
        quick=quick,
        date=date,
        runs=len(runs),
        wall_s=wall,
    )
    record: dict[str, Any] = {
        **head,
        "paced": True,
        "engines": QUICK_ENGINES if quick else ENGINES,
        "split_cost_engines": QUICK_ENGINES if quick else SPLIT_COST_ENGINES,
        "round_h": ROUND_H,
        "horizon_h": HORIZON_H,
        "targets": [{"key": t.key, "bound": t.bound, "ceiling": t.ceiling} for t in TARGETS],
        "configurations": configs,
    }
    record["tables"] = {"targets": _table(configs, record["engines"], record["split_cost_engines"])}
    return record


def main(argv: Sequence[str] | None = None) -> int:
    """Run the targets, print their table, write the JSON.

    Exits through the parser (status 2) on bad options: ``--update-docs``
    with ``--quick``, or seeds repeated.
    """
    return table_main(
        argv,
        module="bench.fleet.targets",
        description=__doc__.splitlines()[0],
        table="targets",
        json_path=JSON,
        docs_json=DOCS_JSON,
        quick_help="25 engines for every target, a short window, 2 seeds",
        quick_in_docs="a quick run's fleets are smaller than the targets' 100 and 1,000",
        simulate=simulate,
    )


if __name__ == "__main__":
    sys.exit(main())
