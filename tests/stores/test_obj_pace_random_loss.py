"""Issue 39's acceptance, small: random 503s that are not load cost no verdict (RGW behind a fault proxy).

``bench/objstore/random_loss.py`` runs the whole campaign (20 runs per
setting); this is three runs at 5 % random ``503 SlowDown``, each with a
fresh host pace.  Every key must be answered, no absent key True, and at
least 99 % of the stored keys True in each run (40 of 40 campaign runs at
5 % kept 100 %).  Not asserted here because NOT met: at 20 % with one host
pace shared across runs, 2 of 20 campaign runs kept 97.8 % and 91.3 % (keys
whose retries still failed at the deadline; docs/performance.md).
"""

from __future__ import annotations

import pytest
from integ_harness import requires_nixl

from bench.objstore.random_loss import STORED, campaign, store_under_loss
from kvprobe.testing.rgw import rgw_missing, skip_or_fail

pytestmark = [pytest.mark.long, requires_nixl]


def test_random_503s_cost_no_verdict() -> None:
    skip_or_fail(rgw_missing())
    with store_under_loss() as (proxy, creds):
        runs = campaign(0.05, 3, False, proxy, creds)
    for run in runs:
        assert run["refused_start"] == 0, run
        assert run["absent_true"] == 0 and run["unanswered"] == 0, run
        assert run["stored_true"] >= 0.99 * len(STORED), run
