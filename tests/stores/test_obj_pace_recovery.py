"""From its floor, the object tier's pace is back at what Ceph RGW answers within the stated bound (issue 39).

The bound (``recovery_bound_s``, docs/pace.md) is tested on the virtual
clock; here the same way back runs through the real engine: NIXL's obj
plugin, its threads, calls with 5 s deadlines, RGW's own answer times
(``bench/objstore/pace_recovery.py`` runs it; ``python -m
bench.objstore.pace_recovery`` prints a table).  Before a refused
reservation counted as demand, the first query at the floor owed 32 s and
the next one, granted at 0.7 HEAD/s, 23 s more: nothing was answered
within the bound (48.4 s).

Marked ``quiet``: it judges the pace by what is answered, which the CPU the
engine gets bounds too.
"""

from __future__ import annotations

import pytest
from integ_harness import requires_nixl

from bench.objstore.pace_recovery import BUCKET, from_the_floor
from kvprobe.testing.rgw import RgwServer, rgw_missing, skip_or_fail

pytestmark = [pytest.mark.long, pytest.mark.quiet, requires_nixl]


def test_from_the_floor_the_answers_are_back_within_the_bound() -> None:
    skip_or_fail(rgw_missing())
    with RgwServer() as server:
        server.create_bucket(BUCKET)
        run = from_the_floor(dict(server.credentials()))
    assert run["start_rate"] == pytest.approx(0.5, abs=0.3), f"{run}"  # the file's pace was the one used
    print(f"unpaced {run['target']:.0f} HEAD/s; from the floor {run['sent']:.0f} after {run['took']:.1f} s")
    assert run["back"], f"not back at 90 % within the bound: {run}"  # whole: a failing run is its only record
