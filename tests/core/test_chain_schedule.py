"""A backend's ``chain_schedule``: the windows its chains are walked with when the manager is not told.

The object tier asks for narrow windows (4, growth 1.25) because HEADs past
a chain's stored prefix are what throttle a fleet sharing a bucket; a local
tier says nothing and gets the manager's default (16, growth 2).  The
caller's arguments always win, each on its own, and a schedule that is not
a (first window, growth) pair is refused naming the backend's attribute.
"""

from __future__ import annotations

import inspect
from typing import Any

import pytest
from test_chain_windows import CountingTier, chain, manager, walk_until_decided

from kvprobe.backends.nixl_obj import NixlObjBackend
from kvprobe.statemachine import InvalidValueError
from kvprobe.statemachine.windows import DEFAULT_CHAIN_WINDOW, DEFAULT_CHAIN_WINDOW_GROWTH, chain_schedule


class NarrowTier(CountingTier):
    chain_schedule = (4, 1.25)


def test_a_tier_without_a_schedule_is_walked_with_the_default() -> None:
    with manager(CountingTier(set())) as m:
        assert (m.chain_window, m.chain_window_growth) == (DEFAULT_CHAIN_WINDOW, DEFAULT_CHAIN_WINDOW_GROWTH)


def test_a_tier_with_a_schedule_is_walked_with_it() -> None:
    keys = chain(40)
    tier = NarrowTier(set(keys[:20]))
    with manager(tier) as m:
        assert (m.chain_window, m.chain_window_growth) == (4, 1.25)
        walk_until_decided(m, keys)
    # windows end at 4, 9, 16, 24: the first miss (key 20) is in the fourth
    assert [len(keys) for keys, _ in tier.calls] == [4, 5, 7, 8]


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        ({"chain_window": 16}, (16, 1.25)),
        ({"chain_window_growth": 2}, (4, 2.0)),
        ({"chain_window": "all"}, ("all", 1.25)),
        ({"chain_window": 8, "chain_window_growth": 3.0}, (8, 3.0)),
    ],
)
def test_the_callers_arguments_win_each_on_its_own(options: dict[str, Any], expected: tuple[object, float]) -> None:
    with manager(NarrowTier(set()), **options) as m:
        assert (m.chain_window, m.chain_window_growth) == expected


@pytest.mark.parametrize("schedule", [(0, 2.0), (4, 1.0), (4, 17.0), (True, 2.0), (4,), "4,2", 4, (4, "2")])
def test_a_schedule_that_is_not_a_pair_of_window_and_growth_is_refused(schedule: object) -> None:
    class OddTier(CountingTier):
        chain_schedule = schedule

    with pytest.raises(InvalidValueError, match=r"backend's chain_schedule must be a \(first window, growth\) pair"):
        manager(OddTier(set()))
    with pytest.raises(InvalidValueError, match="chain_schedule"):
        chain_schedule(None, None, schedule)


def test_a_bad_argument_is_named_even_on_a_tier_with_a_schedule() -> None:
    with pytest.raises(InvalidValueError, match="chain_window_growth"):
        manager(NarrowTier(set()), chain_window_growth=0.5)


def test_the_object_tier_asks_for_narrow_windows_and_a_host_pace() -> None:
    assert NixlObjBackend.chain_schedule == (4, 1.25)
    assert inspect.signature(NixlObjBackend).parameters["pace_scope"].default == "host"
