"""Runs of one scenario under several seeds, folded into one row: the median of each figure and its range.

A folded row keeps the scenario's fields, ``seeds``, each figure of
:data:`FIGURES` as its median over the seeds, and ``by_seed``: each figure's
value under each seed (in the order of ``seeds``), from which a table shows
the range.  The reports print a figure as ``median [min-max]``.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["FIGURES", "SCENARIO_KEYS", "cell", "count", "dollars", "fold", "percent", "span"]

#: What identifies a run's scenario in its figures (all but the seed).
SCENARIO_KEYS = (
    "engines",
    "mode",
    "retry",
    "fair",
    "store",
    "partitions_at_start",
    "window_s",
    "sim_engines",
    "store_scale",
)

#: The figures a folded row keeps for every seed.
FIGURES = (
    "requests",
    "requests_per_s_per_engine",
    "heads_per_s",
    "peak_per_partition_per_s",
    "throttled_fraction",
    "heads_per_request",
    "billed_heads_per_request",
    "ideal_heads_per_request",
    "blocks_per_request",
    "probes_per_request",
    "cost_per_hour_usd",
    "puts_per_request",
    "puts_per_s",
    "puts_per_partition_per_s",
    "put_cost_per_hour_usd",
    "delay_p50_steps",
    "delay_p99_steps",
    "tier_hit_rate",
    "stored_found",
    "stored_blocks_lost",
    "partitions_at_end",
    "hot_partitions",
)


def fold(runs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """One row from the runs of one scenario under different seeds.

    Raises:
        ValueError: no runs, runs of different scenarios, or a seed twice.
    """
    if not runs:
        raise ValueError("fold needs at least one run")
    first = runs[0]
    scenario = {key: first[key] for key in SCENARIO_KEYS}
    for r in runs[1:]:
        other = {key: r[key] for key in SCENARIO_KEYS}
        if other != scenario:
            raise ValueError(f"fold mixes scenarios: {scenario} and {other}")
    seeds = [r["seed"] for r in runs]
    if len(set(seeds)) != len(seeds):
        raise ValueError(f"fold got a seed twice: {seeds}")
    by_seed = {figure: [r[figure] for r in runs] for figure in FIGURES}
    medians = {figure: statistics.median(values) for figure, values in by_seed.items()}
    return {**scenario, "seeds": seeds, **medians, "by_seed": by_seed, "wall_s": sum(r["wall_s"] for r in runs)}


def span(values: Sequence[float]) -> tuple[float, float, float]:
    """(median, min, max) of ``values``; NaN for each when there are none."""
    if not values:
        return math.nan, math.nan, math.nan
    return statistics.median(values), min(values), max(values)


def percent(value: float) -> str:
    """A fraction as a percentage with one decimal."""
    return f"{value:.1%}"


def count(value: float) -> str:
    """A count, rounded, with thousands separators."""
    return f"{value:,.0f}"


def dollars(value: float) -> str:
    """Dollars: two decimals under $10, one under $100, none above."""
    return f"{value:,.2f}" if value < 10 else f"{value:,.1f}" if value < 100 else f"{value:,.0f}"


def cell(median: float, values: Sequence[float] | None, show: Callable[[float], str]) -> str:
    """``median [min-max]`` (an en dash), each shown by ``show``, the range without its percent sign.

    The median alone when there are fewer than two values.
    """
    text = show(median)
    if not values or len(values) < 2:
        return text
    lo, hi = show(min(values)).rstrip("%"), show(max(values)).rstrip("%")
    return f"{text} [{lo}\u2013{hi}]"
