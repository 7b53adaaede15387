"""The fleet report's tables (from a results record) and its picture.

* ``runs``: the grid, one fixed-width line per scenario (:func:`header`,
  :func:`row`), each figure ``median [min-max]`` over the seeds;
* ``realtime``, ``scaling``, ``cost``: Markdown tables built by
  :func:`tables` from the record's raw figures, so the strings the docs quote
  can be rebuilt from the seeds' numbers (a test does).
"""

from __future__ import annotations

import math
import os
import statistics
from collections.abc import Callable, Sequence
from typing import Any

from bench.fleet.modes import MODES
from bench.fleet.params import HEAD_DOLLARS_PER_HOUR, StoreParams, WorkloadParams
from bench.fleet.spread import cell, count, dollars, percent

__all__ = ["cost_by_formula", "header", "plot", "row", "tables"]

Show = Callable[[float], str]


def _fig(r: dict[str, Any], name: str, show: Show) -> str:
    return cell(r[name], r.get("by_seed", {}).get(name), show)


def _steps(value: float) -> str:
    return f"{value:.0f}"


#: The grid's figure columns: (title, figure, how shown, width).
_COLUMNS: tuple[tuple[str, str, Show, int], ...] = (
    ("HEAD/req", "heads_per_request", count, 13),
    ("peak/part", "peak_per_partition_per_s", count, 23),
    ("thrott", "throttled_fraction", percent, 19),
    ("found", "stored_found", percent, 20),
    ("HEAD $/h", "cost_per_hour_usd", dollars, 20),
    ("PUT $/h", "put_cost_per_hour_usd", dollars, 20),
    ("p50 steps", "delay_p50_steps", _steps, 12),
    ("p99 steps", "delay_p99_steps", _steps, 13),
)


def header(run_columns: bool = True) -> str:
    """The grid's header; ``run_columns``: with the engines simulated and the wall seconds of each row."""
    figures = " ".join(f"{title:>{width}}" for title, _, _, width in _COLUMNS)
    return f"{'E':>5} {'store':>5} {'parts':>5} {'mode':>8} {'retry':>5} {'pool':>4} | {figures}" + (
        f" | {'sim':>4} {'wall':>6}" if run_columns else ""
    )


def row(r: dict[str, Any], run_columns: bool = True) -> str:
    """One grid line (``run_columns`` as for :func:`header`)."""
    figures = " ".join(f"{_fig(r, name, show):>{width}}" for _, name, show, width in _COLUMNS)
    return (
        f"{r['engines']:>5} {r['store']:>5} {r['partitions_at_start']:>5} {r['mode']:>8} "
        f"{('yes' if r['retry'] else 'no'):>5} {('fair' if r['fair'] else 'fifo'):>4} | {figures}"
        + (f" | {r['sim_engines']:>4} {r['wall_s']:>6.1f}" if run_columns else "")
    )


def cost_by_formula(engines: int, requests_per_s: float, heads_per_request: float) -> float:
    """$/h in HEADs = engines x requests/s per engine x billed HEADs per request x 0.00144."""
    return engines * requests_per_s * heads_per_request * HEAD_DOLLARS_PER_HOUR


def _table(columns: Sequence[str], rows: list[list[str]]) -> dict[str, Any]:
    return {"columns": list(columns), "rows": rows}


def _hours(value: float) -> str:
    return "\u221e" if math.isinf(value) else f"{value:.1f}"


def _over_seeds(seeds: list[dict[str, Any]], name: str, show: Show, missing: float | None = None) -> str:
    """``name`` over the seeds, ``median [min-max]``; a seed's None counts as ``missing`` (None: left out)."""
    known: list[float] = []
    for seed in seeds:
        value = missing if seed[name] is None else float(seed[name])
        if value is not None:
            known.append(value)
    return cell(statistics.median(known), known, show) if known else "\u2013"


def _realtime(record: dict[str, Any]) -> dict[str, Any]:
    rows = []
    for entry in record["realtime"]:
        seeds = entry["by_seed"]
        rows.append(
            [
                str(entry["engines"]),
                entry["mode"],
                _over_seeds(seeds, "partitions_settled", count),
                _over_seeds(seeds, "settled_h", _hours, missing=math.inf),
                _over_seeds(seeds, "found_before_settled", percent),
                _over_seeds(seeds, "found_first_h", percent),
                _over_seeds(seeds, "found_settled", percent),
            ]
        )
    horizon = f"{record['horizon_h']:g}"
    columns = ("E", "mode", "partitions at the end", "hours to settle", "found before it settled")
    return _table((*columns, f"found in the first {horizon} h", "found once settled"), rows)


def _scaling(record: dict[str, Any]) -> dict[str, Any]:
    limit = StoreParams().head_limit_per_s
    rows = [
        [
            str(r["engines"]),
            r["store"],
            r["mode"],
            str(r["sim_engines"]),
            count(limit / r["store_scale"]),
            _fig(r, "heads_per_s", count),
            _fig(r, "heads_per_request", count),
            _fig(r, "throttled_fraction", percent),
            _fig(r, "stored_found", percent),
            _fig(r, "delay_p50_steps", _steps),
        ]
        for r in record["scaling"]
    ]
    columns = ("E", "store", "mode", "engines simulated", "HEAD/s a partition serves", "HEAD/s", "HEAD/req")
    return _table((*columns, "thrott", "found", "p50 steps"), rows)


def _cost(record: dict[str, Any]) -> dict[str, Any]:
    rate = WorkloadParams().arrivals_per_s
    rows = []
    for r in record["runs"]:
        if not (r["retry"] and r["fair"] and r["store"] == "split" and r["mode"] != "chain"):
            continue
        billed = r["by_seed"]["billed_heads_per_request"]
        by_formula = [cost_by_formula(r["engines"], rate, h) for h in billed]
        rows.append(
            [
                str(r["engines"]),
                str(r["partitions_at_start"]),
                r["mode"],
                _fig(r, "billed_heads_per_request", count),
                _fig(r, "ideal_heads_per_request", count),
                cell(cost_by_formula(r["engines"], rate, r["billed_heads_per_request"]), by_formula, dollars),
                _fig(r, "cost_per_hour_usd", dollars),
                _fig(r, "puts_per_request", count),
                _fig(r, "puts_per_partition_per_s", count),
                _fig(r, "put_cost_per_hour_usd", dollars),
            ]
        )
    columns = ("E", "parts", "mode", "HEAD/req (billed)", "ideal HEAD/req", "HEAD $/h by the formula")
    return _table((*columns, "HEAD $/h simulated", "PUT/req", "PUT/s per partition", "PUT $/h"), rows)


def tables(record: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The Markdown tables of ``record`` (those its sections have data for), by id."""
    out = {}
    if record.get("realtime"):
        out["realtime"] = _realtime(record)
    if record.get("scaling"):
        out["scaling"] = _scaling(record)
    if any(r["store"] == "split" for r in record["runs"]):
        out["cost"] = _cost(record)
    return out


def plot(runs: list[dict[str, Any]], path: str) -> None:
    """Store load, throttling and stored blocks found against fleet size (median, bars min-max; matplotlib, Agg)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(15, 4.4))
    # chain draws hollow and smaller: in runs before its windows it lay on per-key.
    looks = {"per-key": ("o", 8, None), "chain": ("s", 5, "none"), "window": ("d", 7, None), "inferred": ("^", 7, None)}
    looks["cached"] = ("v", 7, None)  # drawn only when --modes asks for it
    panels = (
        ("heads_per_s", 1.0, "HEADs/s at the store (throttled included)"),
        ("throttled_fraction", 100.0, "% of HEADs answered 503 SlowDown"),
        ("stored_found", 100.0, "% of stored blocks found"),
    )
    for mode in MODES:
        marker, size, face = looks.get(mode, ("x", 6, None))
        for store, style in (("new", "-"), ("split", "--")):
            pts = sorted(
                (r for r in runs if r["mode"] == mode and r["retry"] and r["fair"] and r["store"] == store),
                key=lambda r: r["engines"],
            )
            if not pts:
                continue
            xs = [r["engines"] for r in pts]
            for ax, (name, factor, _) in zip(axes, panels, strict=True):
                ys = [factor * r[name] for r in pts]
                lows = [factor * min(r.get("by_seed", {}).get(name, [r[name]])) for r in pts]
                highs = [factor * max(r.get("by_seed", {}).get(name, [r[name]])) for r in pts]
                below = [y - lo for y, lo in zip(ys, lows, strict=True)]
                bars = [below, [hi - y for y, hi in zip(ys, highs, strict=True)]]
                ax.errorbar(
                    xs, ys, yerr=bars, fmt=style, marker=marker, markersize=size, markerfacecolor=face,
                    capsize=2, label=f"{mode}, {store} prefix",
                )  # fmt: skip
    limit = StoreParams().head_limit_per_s
    axes[0].axhline(limit, color="grey", lw=1, ls=":")
    # x in axes coordinates, y in data: the label stays inside whatever fleet sizes ran.
    axes[0].text(
        0.02,
        limit * 1.15,
        "one partition: 5,500 HEAD/s",
        fontsize=8,
        color="grey",
        transform=axes[0].get_yaxis_transform(),
    )
    axes[0].set_yscale("log")
    for ax, (_, _, label) in zip(axes, panels, strict=True):
        ax.set_xscale("log")
        ax.set_xlabel("engines")
        ax.set_ylabel(label)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(
        "kvprobe fleet on S3, simulated (bench/fleet): median over seeds, bars from the lowest to the highest",
        fontsize=10,
    )
    fig.tight_layout()
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
