"""A slow group never delays another (issue 29): the fast group's verdicts are visible while a slow one runs.

``docs/worker.md``: each request group's outcome is published as soon as its
own call returns, so a short prompt's verdicts never wait for a long one's.
Each test runs the scenario of ``slow_group.py``: a slow group (its call
held until the test releases it) and a fast group, in one flush's batch or
the slow one in an earlier batch; the fast verdicts must be visible through
``lookup`` while the slow call still runs and the slow keys have no
verdict.  With the CPU gate on (the default ``busy_call_hold_s``) and off
(``busy_call_hold_s=0``), on the threaded worker with a backend in this
process and through ``ProcessBackend`` helpers.  Order and visibility are
asserted, never a duration.  ``tests/mutants/test_group_visibility_mutant.py``
shows that the same scenario fails on a worker that holds the fast verdicts
back until nothing else runs.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from slow_group import GATES, fast_group_seen_while_slow_runs, process_tier, serving, thread_tier

ON_AND_OFF = pytest.mark.parametrize("gate", list(GATES))
BATCHES = pytest.mark.parametrize("same_batch", [True, False], ids=["same-batch", "earlier-batch"])


@ON_AND_OFF
@BATCHES
def test_a_fast_group_is_seen_while_a_slow_group_runs(gate: str, same_batch: bool) -> None:
    tier = thread_tier()
    with serving(tier, **GATES[gate]) as m:
        fast_group_seen_while_slow_runs(m, tier, same_batch=same_batch)


@ON_AND_OFF
@BATCHES
def test_through_process_backend_a_fast_group_is_seen_while_a_slow_helper_call_runs(
    gate: str, same_batch: bool, tmp_path: Path
) -> None:
    tier = process_tier(tmp_path)
    with serving(tier, **GATES[gate]) as m:
        fast_group_seen_while_slow_runs(m, tier, same_batch=same_batch)


def test_with_two_slots_the_slow_group_holds_one_and_the_fast_group_takes_the_other() -> None:
    # The fewest slots that let groups run at once: the slow call keeps one
    # for the whole scenario, so the fast group can only run beside it.
    tier = thread_tier()
    with serving(tier, max_concurrent_groups=2) as m:
        fast_group_seen_while_slow_runs(m, tier, same_batch=True)
