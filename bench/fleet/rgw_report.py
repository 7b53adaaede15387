"""The RGW fleet's report: figures from each seed's raw outcome, and the tables the docs quote.

:mod:`bench.fleet.rgw` runs the fleet (the store, the capped proxy, the
engine processes) and hands each seed's raw outcome here:
:func:`seed_figures` turns it into figures (found, HEADs per request against
the ideal, throttled, decided, wrong, exits, stderr, pace), :func:`targets`
and :func:`comparison` hold them against the issue's targets over the seeds
(median [min-max]), and :func:`mode_tables` lays out every chain mode's
tables by the ids the docs quote (:func:`markdown` prints one).  Apart
from the run so that the arithmetic reads, and is tested, without a store.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from bench.fleet.rgw_engine import CHAIN
from kvprobe.statemachine.inferred import EXACT
from kvprobe.statemachine.windows import DEFAULT_CHAIN_WINDOW, DEFAULT_CHAIN_WINDOW_GROWTH, window_end

if TYPE_CHECKING:  # only for the annotation: bench.fleet.rgw imports this module
    from bench.fleet.rgw import Setup

__all__ = [
    "COMPARED", "LATE_SLACK_S", "SEED_COLUMNS", "STDERR_QUIET", "TARGETS", "comparison", "markdown",
    "mode_tables", "rounds", "seed_figures", "seed_row", "table_id", "tables", "targets",
]  # fmt: skip

#: The issue's targets: found, HEADs per request over the ideal, wrong verdicts, decided in time.
TARGET_FOUND, TARGET_HEAD_RATIO = 0.95, 1.5
STDERR_QUIET = 10  # lines of stderr an engine may write and still be called quiet
#: A request settled later than its deadline plus this is late (the engine's
#: step, 30 ms, on a loaded machine: lookup_chain and flush never wait).
LATE_SLACK_S = 1.0


def rounds(stored: int, first: int = DEFAULT_CHAIN_WINDOW, growth: float = DEFAULT_CHAIN_WINDOW_GROWTH) -> int:
    """How many windows ``lookup_chain`` probes, one after another, to decide a chain with ``stored`` leading hits.

    ``first`` and ``growth``: the schedule (``chain_window``, ``chain_window_growth``).
    """
    end, n = first, 1
    while end <= stored and end < CHAIN:
        end, n = window_end(first, end, growth), n + 1
    return n


def seed_figures(raw: dict[str, Any], setup: Setup) -> dict[str, Any]:
    """One seed's figures from :func:`run_seed`'s raw outcome (a raw outcome naming no mode is exact mode's)."""
    outcomes = [o for e in raw["engines"] if e["result"] for o in e["result"]["outcomes"]]
    n = max(1, len(outcomes))
    ideal = sum(o["stored"] + (o["stored"] < CHAIN) for o in outcomes)
    first, growth = setup.chain_window, setup.chain_growth
    windowed = sum(min(CHAIN, window_end(first, o["stored"], growth)) for o in outcomes)
    by_rounds: dict[int, list[int]] = {}
    for o in outcomes:
        tally = by_rounds.setdefault(rounds(o["stored"], first, growth), [0, 0])
        tally[0] += not o["decided"]
        tally[1] += 1
    heads = raw["proxy"]["heads"]
    throttled = raw["proxy"]["done"].get("rate_limited", 0)
    pacing = [e["result"]["pacing"] for e in raw["engines"] if e["result"]]
    shared = max if setup.pace_scope == "host" else sum
    stats = [e["result"]["stats"] for e in raw["engines"] if e["result"]]
    return {
        "seed": raw["seed"],
        "chain_mode": raw.get("chain_mode", EXACT),
        "schedule": [first, growth, setup.pace_scope],
        "requests": raw["requests"],
        "settled": len(outcomes),
        "found": sum(o["decided"] and o["leading_hits"] == o["stored"] for o in outcomes) / n,
        "heads_per_request": heads / n,
        "ideal_per_request": ideal / n,
        "windows_per_request": windowed / n,
        "answered_per_request": (heads - throttled) / n,
        "probes_per_request": sum(s.get("keys", 0) for s in stats) / n,
        "inferred_per_request": sum(o.get("inferred", 0) for o in outcomes) / n,
        "undecided_by_rounds": {str(k): v for k, v in sorted(by_rounds.items())},
        "head_ratio": heads / max(1, ideal),
        "throttled": throttled / max(1, heads),
        "decided": sum(o["decided"] for o in outcomes) / n,
        "late": sum(o["settled_after_s"] > setup.deadline_s + LATE_SLACK_S for o in outcomes),
        "decided_after_deadline": sum(o["decided"] and o["settled_after_s"] > setup.deadline_s for o in outcomes),
        "head_burst": raw["proxy"]["head_burst"],
        "slowest_s": max((o["settled_after_s"] for o in outcomes), default=0.0),
        "wrong": sum(o["leading_hits"] > o["stored"] for o in outcomes),
        "exits": [e["exit"] for e in raw["engines"]],
        "bad_exits": sum(e["exit"] != 0 for e in raw["engines"]),
        "loudest": max(e["stderr_lines"] for e in raw["engines"]),
        "stderr_lines": [e["stderr_lines"] for e in raw["engines"]],
        "pace_end": [p["rate"] for p in pacing],
        # A host pace is one pace every engine reports: counted once, not per engine.
        "decreases": shared(int(p["decreases"] or 0) for p in pacing),
        "undone": shared(int(p["undone"] or 0) for p in pacing),
        "shed": sum(s.get("shed", 0) for s in stats),
        "failed_throttled": sum(s.get("failed_throttled", 0) for s in stats),
        "miss_failing": sum(s.get("miss_failing", 0) for s in stats),
        "lowest_pace": min(
            (r for e in raw["engines"] if e["result"] for _, r in e["result"]["pace"] if r), default=None
        ),
    }


# Not bench.fleet.spread.cell, though both print median [min-max]: cell drops
# the percent sign from the range ends ("0.4% [0.3-0.4]") and prints the
# median alone under two values, while the RGW tables docs/performance.md quotes
# (docs/data/fleet_rgw.json) keep it on each end ("72.0 % [58.4 %-74.5 %]")
# and show the range for one seed too, so through cell their text would
# change.  Nor spread.span for the numbers: it answers NaN for no values,
# where a target over no seeds must fail, not print "nan".
def _spread(values: Sequence[float], fmt: str) -> str:
    lo, med, hi = min(values), statistics.median(values), max(values)
    return f"{fmt.format(med)} [{fmt.format(lo)}\u2013{fmt.format(hi)}]"


#: ``(figure, key in seed_figures, the issue's target, format, met)`` of each target.
TARGETS: list[tuple[str, str, str, str, Any]] = [
    ("stored prefixes found", "found", "\u2265 95 %", "{:.1%}", lambda v: v >= TARGET_FOUND),
    ("HEADs per request / ideal", "head_ratio", "\u2264 1.5\u00d7", "{:.2f}\u00d7",
     lambda v: v <= TARGET_HEAD_RATIO),
    ("absent blocks answered True", "wrong", "0", "{:.0f}", lambda v: v == 0),
    ("requests decided by their deadline", "decided", "100 %", "{:.1%}", lambda v: v == 1.0),
    (f"requests settled late (> deadline + {LATE_SLACK_S:g} s)", "late", "0", "{:.0f}", lambda v: v == 0),
    ("engines not exiting 0", "bad_exits", "0", "{:.0f}", lambda v: v == 0),
    (f"stderr lines, the noisiest engine (quiet: \u2264 {STDERR_QUIET})", "loudest", "quiet", "{:.0f}",
     lambda v: v <= STDERR_QUIET),
]  # fmt: skip
#: Figures the mode comparison adds below the targets: ``(figure, key, format)``, no target of their own.
COMPARED: list[tuple[str, str, str]] = [
    ("requests decided after their deadline", "decided_after_deadline", "{:.0f}"),
    ("HEADs per request (at the proxy)", "heads_per_request", "{:.1f}"),
    ("ideal HEADs per request (exact: hits + first miss)", "ideal_per_request", "{:.1f}"),
    ("keys probed per request (the backends' counters)", "probes_per_request", "{:.1f}"),
    ("keys answered stored by inference per request", "inferred_per_request", "{:.1f}"),
    ("HEADs throttled", "throttled", "{:.1%}"),
]


def targets(figures: Sequence[dict[str, Any]]) -> list[tuple[str, str, str, bool]]:
    """``(figure, the issue's target, median [min-max] over the seeds, every seed met it)`` for each target."""
    rows = []
    for name, key, target, fmt, met in TARGETS:
        values = [float(f[key]) for f in figures]
        rows.append((name, target, _spread(values, fmt).replace("%", " %"), all(met(v) for v in values)))
    return rows


def comparison(by_mode: Mapping[str, Sequence[dict[str, Any]]]) -> dict[str, Any]:
    """The chain modes side by side: each target (median [min-max], met by every seed) and the figures compared.

    Raises:
        ValueError: a mode has no figures.
    """
    for mode, figures in by_mode.items():
        if not figures:
            raise ValueError(f"chain mode {mode!r} has no figures to compare")
    columns = ["figure", "target"]
    for mode in by_mode:
        columns += [f"{mode}: median [min\u2013max]", f"{mode}: met by every seed"]
    met_by = {mode: targets(figures) for mode, figures in by_mode.items()}
    rows = []
    for i, (name, _, target, _, _) in enumerate(TARGETS):
        rows.append(
            [name, target, *(cell for m in by_mode for cell in (met_by[m][i][2], "yes" if met_by[m][i][3] else "no"))]
        )
    for name, key, fmt in COMPARED:
        spreads = [_spread([float(f[key]) for f in figures], fmt).replace("%", " %") for figures in by_mode.values()]
        rows.append([name, "\u2013", *(cell for shown in spreads for cell in (shown, ""))])
    return {"columns": columns, "rows": rows}


SEED_COLUMNS = [
    "seed", "requests", "found", "HEAD/req", "answered HEAD/req", "windows' HEAD/req", "ideal HEAD/req",
    "HEADs / ideal", "throttled", "decided", "undecided / requests, by windows needed",
    "wrong", "exit codes", "stderr lines", "pace at the end (HEAD/s)", "lowest pace", "decreases (undone)",
    "shed keys",
]  # fmt: skip


def seed_row(f: dict[str, Any]) -> list[str]:
    """One seed's row of the ``seeds`` and ``control`` tables (:data:`SEED_COLUMNS`), from its figures."""
    pace = ", ".join("unpaced" if r is None else f"{r:.0f}" for r in f["pace_end"])
    return [
        str(f["seed"]), str(f["settled"]), f"{f['found']:.1%}", f"{f['heads_per_request']:.1f}",
        f"{f['answered_per_request']:.1f}", f"{f['windows_per_request']:.1f}",
        f"{f['ideal_per_request']:.1f}", f"{f['head_ratio']:.2f}\u00d7", f"{f['throttled']:.1%}",
        f"{f['decided']:.1%}",
        ", ".join(f"{k}: {u}/{t}" for k, (u, t) in f["undecided_by_rounds"].items()),
        str(f["wrong"]), " ".join(map(str, f["exits"])),
        " ".join(map(str, f["stderr_lines"])), pace,
        "unpaced" if f["lowest_pace"] is None else f"{f['lowest_pace']:.0f}",
        f"{f['decreases']} ({f['undone']})", str(f["shed"]),
    ]  # fmt: skip


def tables(figures: Sequence[dict[str, Any]], control: dict[str, Any] | None = None) -> dict[str, Any]:
    """The tables of docs/data/fleet_rgw.json: the targets over the seeds, each seed, and the control run."""
    summary = [[name, target, shown, "yes" if met else "no"] for name, target, shown, met in targets(figures)]
    out = {
        "targets": {"columns": ["figure", "target", "median [min\u2013max]", "met by every seed"], "rows": summary},
        "seeds": {"columns": SEED_COLUMNS, "rows": [seed_row(f) for f in figures]},
    }
    if control is not None:
        out["control"] = {"columns": SEED_COLUMNS, "rows": [seed_row(control)]}
    return out


def table_id(table: str, chain_mode: str) -> str:
    """A table's id in the data: exact mode's keep their names (``targets``...), another mode's are suffixed."""
    return table if chain_mode == EXACT else f"{table}_{chain_mode}"


def mode_tables(
    by_mode: Mapping[str, Sequence[dict[str, Any]]], controls: dict[str, dict[str, Any]] | None = None
) -> dict[str, Any]:
    """Every mode's :func:`tables` (ids by :func:`table_id`), and ``modes`` (:func:`comparison`) for two or more.

    Raises:
        ValueError: a mode has no figures.
    """
    out: dict[str, Any] = {"modes": comparison(by_mode)} if len(by_mode) > 1 else {}
    for mode, figures in by_mode.items():
        if not figures:
            raise ValueError(f"chain mode {mode!r} has no figures")
        control = (controls or {}).get(mode)
        out |= {table_id(name, mode): table for name, table in tables(figures, control).items()}
    return out


def schedule_label(first: int, growth: float, pace_scope: str) -> str:
    """How the schedules table names the exact walk whose windows start at ``first`` keys and grow by ``growth``.

    ``pace_scope``: the engines' (``"process"``: each paces alone; ``"host"``: one pace for the host's).
    """
    return f"windows {first}, \u00d7{growth:g}, {pace_scope} pace"


def markdown(table: dict[str, Any]) -> str:
    """A table (``columns`` and ``rows`` of strings) as a Markdown table."""
    lines = ["| " + " | ".join(table["columns"]) + " |", "|" + "---|" * len(table["columns"])]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in table["rows"]])
