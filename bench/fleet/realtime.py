"""A new prefix in real time: S3's split rounds, each weighed by the half hour it lasts.

S3 splits a partition after 30 to 60 minutes of sustained throttling
(``StoreParams.split_after_s``: 30 minutes, the short end), while a request
lives seconds.  So the store a request meets is, at a request's scale, a
fixed layout of partitions that changes every half hour.  Compressing the
split time into a short run (``bench.fleet.__main__.split_dynamics``) gets
the rounds right but not the weights: there a round lasts two virtual
seconds, less than one request's deadline, and a loss averaged over such a
run counts the hours of the storm as seconds.

So a new prefix is followed round by round.  Each round runs the fleet on a
fixed layout of ``p`` equal partitions (no split happens inside a run: the
window is seconds), and counts the partitions that throttled through the
whole window without a quiet second: under the store model's rule those
split when the round ends (an extrapolation from the window to 30 minutes).
The next round has ``p + hot`` equal partitions (S3 halves the hot ones; when
only some are hot, equal widths are an approximation).  The first round with
no hot partition is the settled layout, which lasts.  Every round before it
weighs ``split_after_s`` of real time, so a figure "in the first H hours" is
the time-weighted mean of the rounds that fall in them.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from typing import Any

from bench.fleet.sim import Scenario

__all__ = ["follow", "found_in_first", "summary"]

Runner = Callable[[Scenario], dict[str, Any]]


def follow(base: Scenario, run: Runner, *, max_rounds: int = 12) -> list[dict[str, Any]]:
    """The rounds of a new prefix under ``base``'s fleet: one run per layout, the settled one last.

    Returns each round's run (``partitions_at_start`` is its layout).  The
    last round has no hot partition unless ``max_rounds`` ran out first (or
    the store's ``max_partitions`` was reached).

    Raises:
        ValueError: ``max_rounds`` < 1.
    """
    if max_rounds < 1:
        raise ValueError(f"max_rounds must be >= 1, got {max_rounds}")
    rounds = []
    partitions = 1
    while True:
        r = run(dataclasses.replace(base, partitions=partitions, store_label="new"))
        rounds.append(r)
        grown = min(base.store.max_partitions, partitions + r["hot_partitions"])
        if grown == partitions or len(rounds) >= max_rounds:
            return rounds
        partitions = grown


def settled(rounds: Sequence[dict[str, Any]]) -> bool:
    """Whether the last round's layout lasts (no hot partition left)."""
    return bool(rounds[-1]["hot_partitions"] == 0)


def found_in_first(rounds: Sequence[dict[str, Any]], hours: float, round_h: float) -> float:
    """The stored blocks found by requests arriving in the first ``hours``, each round weighing ``round_h``.

    The last round lasts from its start on.

    Raises:
        ValueError: no rounds, or ``hours``/``round_h`` not positive.
    """
    if not rounds or hours <= 0 or round_h <= 0:
        raise ValueError(f"need rounds and positive hours, got {len(rounds)} rounds, {hours} h, {round_h} h a round")
    weighed = 0.0
    for index, r in enumerate(rounds):
        start = index * round_h
        end = math.inf if index == len(rounds) - 1 else start + round_h
        weighed += max(0.0, min(end, hours) - start) * r["stored_found"]
    return weighed / hours


def summary(rounds: Sequence[dict[str, Any]], round_h: float, horizon_h: float) -> dict[str, Any]:
    """One seed's new prefix: its layouts, when it settled, and what was found before, meanwhile and after.

    ``found_before_settled`` is the time-weighted found fraction of the
    rounds before the settled one (None when the first layout already
    lasts); ``settled_h`` and ``found_settled`` are None when the rounds ran
    out unsettled.

    Raises:
        ValueError: no rounds.
    """
    if not rounds:
        raise ValueError("summary needs at least one round")
    storm = rounds[:-1] if settled(rounds) else rounds
    return {
        "partitions": [r["partitions_at_start"] for r in rounds],
        "found_by_round": [r["stored_found"] for r in rounds],
        "throttled_by_round": [r["throttled_fraction"] for r in rounds],
        "settled_h": len(storm) * round_h if settled(rounds) else None,
        "found_before_settled": sum(r["stored_found"] for r in storm) / len(storm) if storm else None,
        "found_first_h": found_in_first(rounds, horizon_h, round_h),
        "found_settled": rounds[-1]["stored_found"] if settled(rounds) else None,
        "partitions_settled": rounds[-1]["partitions_at_start"],
    }
