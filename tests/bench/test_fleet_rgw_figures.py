"""bench.fleet_rgw's arithmetic on made-up outcomes (no store): each figure counts what it says."""

from __future__ import annotations

from typing import Any

import pytest

from bench.fleet_rgw import Setup, engine_plans, rounds, seed_figures, stored_prefixes, tables, targets


def _outcome(stored: int, hits: int, decided: bool = True, after: float = 1.0) -> dict[str, Any]:
    return {"stored": stored, "leading_hits": hits, "decided": decided, "settled_after_s": after, "progress": []}


def _raw(outcomes: list[dict[str, Any]], heads: int, throttled: int, exits: tuple[int, ...] = (0,)) -> dict[str, Any]:
    result = {"outcomes": outcomes, "stats": {"shed": 2}, "pacing": {"rate": None, "decreases": 1, "undone": 0}}
    result["pace"] = [[0.0, None], [1.0, 80.0], [2.0, 35.5]]
    engines = [{"exit": x, "stderr_lines": 11 * i, "result": result if i == 0 else None} for i, x in enumerate(exits)]
    proxy = {"heads": heads, "done": {"rate_limited": throttled}, "head_burst": 40.0}
    return {"seed": 1, "requests": len(outcomes), "proxy": proxy, "engines": engines}


def test_found_wrong_late_and_the_head_ratio_count_what_they_say() -> None:
    outcomes = [
        _outcome(10, 10),  # found: ideal 11 HEADs
        _outcome(64, 64),  # found, whole chain stored: ideal 64 (no miss to find)
        _outcome(20, 16, decided=False, after=5.0),  # undecided at its deadline: not found
        _outcome(5, 3),  # decided short (a stored block answered MISS): not found, not wrong
        _outcome(0, 2, after=6.5),  # an absent block answered True, and settled late
    ]
    f = seed_figures(_raw(outcomes, heads=200, throttled=50, exits=(0, -6)), Setup())
    ideal = 11 + 64 + 21 + 6 + 1
    assert f["found"] == pytest.approx(2 / 5) and f["decided"] == pytest.approx(4 / 5)
    assert f["wrong"] == 1 and f["late"] == 1 and f["slowest_s"] == 6.5
    assert f["head_ratio"] == pytest.approx(200 / ideal) and f["ideal_per_request"] == pytest.approx(ideal / 5)
    assert f["throttled"] == pytest.approx(0.25) and f["answered_per_request"] == pytest.approx(150 / 5)
    assert f["bad_exits"] == 1 and f["loudest"] == 11 and f["shed"] == 2 and f["lowest_pace"] == 35.5
    assert f["undecided_by_rounds"] == {"1": [0, 3], "2": [1, 1], "3": [0, 1]}
    met = {name: ok for name, _, _, ok in targets([f])}
    assert not any(met.values())  # every target is missed by this seed, each for its own reason
    assert set(tables([f], f)) == {"targets", "seeds", "control"}


def test_a_seed_meeting_every_target_is_shown_as_met() -> None:
    f = seed_figures(_raw([_outcome(10, 10), _outcome(40, 40)], heads=60, throttled=0), Setup())
    assert all(ok for *_, ok in targets([f]))


def test_windows_and_plans() -> None:
    assert [rounds(s) for s in (0, 15, 16, 47, 48, 64)] == [1, 1, 2, 2, 3, 3]
    stored = stored_prefixes(160)
    assert stored == stored_prefixes(160) and min(stored) >= 0 and max(stored) <= 64
    plans = engine_plans(Setup(), 1, stored)
    dealt = [p for plan in plans for _, p, _ in plan]
    assert len(plans) == 4 and len(dealt) == len(set(dealt)) > 0  # no prompt twice in a run
    assert all(s == stored[p] for plan in plans for _, p, s in plan)
    assert engine_plans(Setup(), 1, stored) == plans and engine_plans(Setup(), 2, stored) != plans
    with pytest.raises(ValueError, match="too small"):
        engine_plans(Setup(), 1, stored[:10])
    with pytest.raises(ValueError, match="engines"):
        Setup(engines=0)
    with pytest.raises(ValueError, match="head_rate"):
        Setup(head_rate=0.0)
