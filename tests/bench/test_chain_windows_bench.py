"""bench.chains.run --part windows: what each window schedule costs a request, counted (no timing).

The runner walks one request per stored prefix until its answer is decided;
what it counts must follow from the schedule: answers exact, ``"all"``
decided in two steps at the whole chain's price, a first window ``f``
probing at most ``2 (p + 1) + f`` keys for a stored prefix ``p``.
"""

from __future__ import annotations

import pytest

from bench.chains import run as chains


def test_the_stated_mixes_are_what_the_report_says() -> None:
    mixed = chains.stored_prefixes(3600, 200, "mixed")
    assert mixed.count(0) == mixed.count(3600) == 50
    assert all(1 <= p <= 3599 for p in mixed if p not in (0, 3600))
    short = chains.stored_prefixes(3600, 200, "short")
    assert all(0 <= p <= 16 for p in short) and len(set(short)) > 5


@pytest.mark.parametrize("n", [1, 32, 300])
def test_all_decides_in_two_steps_at_the_price_of_the_whole_chain(n: int) -> None:
    t = chains.window_trade(n, "all", [0, n // 2, n])
    assert t.wrong == 0
    assert t.steps == [2, 2, 2]
    assert t.heads == [n, n, n]


@pytest.mark.parametrize("first", [1, 4, 16])
def test_windows_probe_about_twice_the_stored_prefix_at_most(first: int) -> None:
    n = 600
    prefixes = [0, 1, 9, 10, 100, 599, 600]
    t = chains.window_trade(n, first, prefixes)
    assert t.wrong == 0
    for p, heads, steps in zip(prefixes, t.heads, t.steps, strict=True):
        assert min(p + 1, n) <= heads <= min(2 * (p + 1) + first, n), (p, heads)
        assert steps >= 2
    # The longer the stored prefix, the more windows (steps) it takes.
    assert t.steps == sorted(t.steps)


def test_the_report_has_a_row_per_length_and_schedule() -> None:
    report = chains.windows_report(4)
    rows = [line for line in report.splitlines() if line.startswith("| ") and line[2].isdigit()]
    assert len(rows) == len(chains.CHAIN_LENGTHS) * len(chains.SCHEDULES)
    assert all(line.endswith("| 0 |") for line in rows)  # no wrong answer
