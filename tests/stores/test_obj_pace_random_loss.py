"""Issue 39's acceptance, small: random 503s that are not load cost no verdict (RGW behind a fault proxy).

``bench/objstore/random_loss.py`` runs the whole campaign (20 runs per
setting); here three runs per setting.  Asserted in every run: no absent
key True, every key answered, no start-up refused, no key shed (the pace
never gives a key up for loss that is not load), and every stored key not
answered True counted by its cause (a retry still failing, a query still
running or not started at the deadline).  The share kept (>= 99 % of the
stored keys True) is asserted at 5 %; at 20 % it depends on the host's
load (a 2,000-key run needs about 3,500 HEADs through a Python proxy
within 4.5 s), so there it is reported by the campaign
(docs/performance.md), not asserted.

Marked ``quiet``: make test-long runs these alone, after its stages (side by
side, CI run 51d's 20 % campaign shed 738 keys at a pace of 44).  Beside
liveness2's TLC run in CI (698dc1a) a 5 % run kept 86.2 % and shed 161
keys: the starved proxy served 144 HEAD/s and the pace fell to 100.  That
a CPU-starved host still costs verdicts is issue 39's open part, not a
pass here.
"""

from __future__ import annotations

import pytest
from integ_harness import requires_nixl

from bench.objstore.random_loss import STORED, Run, campaign, store_under_loss
from kvprobe.testing.rgw import rgw_missing, skip_or_fail

pytestmark = [pytest.mark.long, pytest.mark.quiet, requires_nixl]


def _check_counts(run: Run) -> None:
    assert run["refused_start"] == 0, f"{run}"  # whole: pytest cuts a dict short, and a failing run is its only record
    assert run["absent_true"] == 0 and run["unanswered"] == 0, f"{run}"
    assert run["shed"] == 0 and run["manager_timeouts"] == 0, f"{run}"
    lost = len(STORED) - run["stored_true"]
    assert lost <= run["miss_failing"] + run["miss_in_flight"] + run["miss_not_started"], f"{run}"


def test_random_503s_cost_no_verdict() -> None:
    skip_or_fail(rgw_missing())
    with store_under_loss() as (proxy, creds):
        runs = campaign(0.05, 3, False, proxy, creds)["fresh each run"]
    for run in runs:
        _check_counts(run)
        assert run["stored_true"] >= 0.99 * len(STORED), f"{run}"


def test_one_shared_pace_at_20_percent_sheds_nothing_and_loses_no_key_silently() -> None:
    skip_or_fail(rgw_missing())
    with store_under_loss() as (proxy, creds):
        runs = campaign(0.20, 3, True, proxy, creds)["one shared"]
    for run in runs:
        _check_counts(run)
