"""``python -m bench.fleet.eviction [--quick]``: what remembering "stored" costs on a tier that evicts.

The verdict cache answers a key it saw stored within its hit TTL without a
HEAD; ``bench.fleet.targets`` shows that keeping those answers 300 s
instead of 60 brings 1,000 engines under $150 an hour, on a tier that
never loses a block.  Here the tier does: each shared prefix loses a
uniformly drawn suffix of its stored blocks ``--evictions`` times an hour
(``WorkloadParams.shared_evictions_per_h``), and the next request that
computes those blocks writes them back when it has computed them.  A
remembered "stored" for a block evicted since is **stale**: the engine's
load of it fails, it calls ``mark_miss`` (the contract's path, which also
makes the cache forget it) and computes from there, as a real engine does.

For each hit TTL and eviction rate, the cached exact walk with the object
tier's windows (4, growth 1.25) at 1,000 engines on a split prefix (the
``$/h`` target's run), under every seed: HEAD dollars an hour, the
requests with a stale block (each a failed load: a GET that finds nothing,
and the delay of a load before the engine computes), stale blocks per
request, and the stored blocks found (a block evicted before its lookup
is not found by any walk).  Rate 0 is the targets' run.

Results: ``bench/results/fleet_eviction.json``; ``--update-docs`` writes
``docs/data/fleet_eviction.json`` instead (its table ``eviction``).
"""

from __future__ import annotations

import dataclasses
import datetime
import sys
import time
from collections.abc import Sequence
from typing import Any

from bench.common import DOCS_DIR, RESULTS_DIR
from bench.fleet.__main__ import (
    FULL_RUN,
    QUICK_RUN,
    Runs,
    scenario_fields,
    split_partitions,
    verdict_cache,
)
from bench.fleet.command import record_head, table_main
from bench.fleet.params import StoreParams, WorkloadParams
from bench.fleet.sim import Scenario
from bench.fleet.spread import cell, dollars, percent, span
from kvprobe.backends.nixl_obj import NixlObjBackend

__all__ = ["EVICTIONS_PER_H", "HIT_TTLS_S", "main", "measure"]

JSON = str(RESULTS_DIR / "fleet_eviction.json")
DOCS_JSON = str(DOCS_DIR / "data" / "fleet_eviction.json")
#: The stored verdicts' lifetimes compared: the cache's default, and the one that meets $150/h.
HIT_TTLS_S = (60.0, 300.0)
#: Suffix evictions per shared prefix per hour: none, one every 10 minutes, one a minute.
EVICTIONS_PER_H = (0.0, 6.0, 60.0)
ENGINES, QUICK_ENGINES = 1000, 25


def _blocks(value: float) -> str:
    return f"{value:,.2f}"


def measure(hit_ttl_s: float, evictions_per_h: float, seed: int, runs: Runs, *, quick: bool) -> dict[str, Any]:
    """One seed's figures for stored verdicts kept ``hit_ttl_s`` on a tier evicting ``evictions_per_h``."""
    window_s, warmup_s, max_sim = QUICK_RUN if quick else FULL_RUN
    engines = QUICK_ENGINES if quick else ENGINES
    workload = WorkloadParams(shared_evictions_per_h=evictions_per_h)
    fields = scenario_fields(engines, window_s=window_s, warmup_s=warmup_s, max_sim=max_sim, seed=seed, paced=True)
    first, growth = NixlObjBackend.chain_schedule
    sc = Scenario(
        mode="cached",
        chain_window=first,
        chain_growth=growth,
        verdict_cache=verdict_cache(hit_ttl_s),
        **fields,
    )
    sc = dataclasses.replace(sc, workload=workload, partitions=split_partitions(engines, StoreParams(), workload))
    f = runs(sc)
    keys = ("cost_per_hour_usd", "stale_requests", "stale_blocks_per_request", "stored_found")
    return {"seed": seed, **{k: f[k] for k in keys}} | {
        "answers_above_truth": f["answers_above_truth"],
        "evictions": f["tier_evictions"],
        "evicted_blocks": f["tier_evicted_blocks"],
        "rewritten_blocks": f["tier_rewritten_blocks"],
        "heads_per_request": f["heads_per_request"],
    }


COLUMNS = (
    ("cost_per_hour_usd", "HEAD $/h", dollars),
    ("stale_requests", "requests with a stale block (a failed load)", percent),
    ("stale_blocks_per_request", "stale blocks per request", _blocks),
    ("stored_found", "stored blocks found", percent),
)


def _row(hit_ttl_s: float, evictions_per_h: float, by_seed: Sequence[dict[str, Any]]) -> list[str]:
    cells = [f"{hit_ttl_s:g} s", "never" if not evictions_per_h else f"{evictions_per_h:g} per hour"]
    for key, _, show in COLUMNS:
        values = [s[key] for s in by_seed]
        cells.append(cell(span(values)[0], values, show))
    return cells


def simulate(seeds: Sequence[int], *, quick: bool) -> dict[str, Any]:
    """Every hit TTL and eviction rate under every seed, printed as it comes; the results record."""
    started = time.perf_counter()
    date = datetime.datetime.now(datetime.timezone.utc)
    runs = Runs()
    cases = []
    for ttl in HIT_TTLS_S:
        for rate in EVICTIONS_PER_H:
            by_seed = [measure(ttl, rate, seed, runs, quick=quick) for seed in seeds]
            cases.append({"hit_ttl_s": ttl, "evictions_per_h": rate, "by_seed": by_seed})
            print(" | ".join(_row(ttl, rate, by_seed)), flush=True)
    wall = time.perf_counter() - started
    engines = QUICK_ENGINES if quick else ENGINES
    columns = ["stored verdicts kept", "a shared prefix loses a suffix"]
    columns += [f"{name} ({engines:,} engines, split)" for _, name, _ in COLUMNS]
    rows = [_row(c["hit_ttl_s"], c["evictions_per_h"], c["by_seed"]) for c in cases]
    title = "What remembering stored verdicts costs on a tier that evicts"
    return {
        **record_head(title, "bench.fleet.eviction", seeds, quick=quick, date=date, runs=len(runs), wall_s=wall),
        "engines": engines,
        "chain_schedule": list(NixlObjBackend.chain_schedule),
        "cases": cases,
        "tables": {"eviction": {"columns": columns, "rows": rows}},
    }


def main(argv: Sequence[str] | None = None) -> int:
    """Run every case, print the table, write the JSON.

    Exits through the parser (status 2) on bad options: ``--update-docs``
    with ``--quick``, or seeds repeated.
    """
    return table_main(
        argv,
        module="bench.fleet.eviction",
        description=__doc__.splitlines()[0],
        table="eviction",
        json_path=JSON,
        docs_json=DOCS_JSON,
        quick_help=f"{QUICK_ENGINES} engines, a short window, 2 seeds",
        quick_in_docs="a quick run's fleet is smaller than the 1,000 engines documented",
        simulate=simulate,
    )


if __name__ == "__main__":
    sys.exit(main())
