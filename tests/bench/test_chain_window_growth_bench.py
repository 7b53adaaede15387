"""bench.chains.run --part windows with a growth other than 2: the keys and steps follow from the schedule.

For a stored prefix ``p`` below the chain's length the walk probes every
window up to the one holding key ``p`` (the first missing block) and
decides one step after that window answered: exactly the window ends of
``windows.window_end`` for the growth asked for.
"""

from __future__ import annotations

import pytest

from bench.chains import run as chains
from kvprobe.statemachine.windows import window_end


def windows_up_to(first: int, index: int, growth: float) -> int:
    count, end = 1, window_end(first, 0, growth)
    while end <= index:
        count, end = count + 1, window_end(first, end, growth)
    return count


@pytest.mark.parametrize("growth", [1.25, 1.5, 3.0])
@pytest.mark.parametrize("first", [1, 4, 16])
def test_a_growth_probes_the_windows_up_to_the_first_missing_block(first: int, growth: float) -> None:
    n = 600
    prefixes = [0, 1, 9, 10, 100, 599, 600]
    t = chains.window_trade(n, first, prefixes, growth)
    assert t.wrong == 0
    for p, heads, steps in zip(prefixes, t.heads, t.steps, strict=True):
        index = min(p, n - 1)  # a whole chain stored: its last window is the last
        assert heads == min(window_end(first, index, growth), n), (p, heads)
        assert steps == windows_up_to(first, index, growth) + 1, (p, steps)


def test_the_schedules_hold_the_growths_the_issue_weighs() -> None:
    growths = {growth for first, growth in chains.SCHEDULES if first != "all"}
    assert {2.0, 1.5, 1.25} <= growths
