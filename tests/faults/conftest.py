"""Fixtures of the fault matrix; the machinery is in ``fault_harness.py``.

With ``KVPROBE_UPDATE_DOCS=1`` in the environment, the session writes the
rows the tests recorded into the fault matrix, ``docs/data/faults.json``,
and the table ``docs/performance.md`` quotes from it.  A session replaces the
rows of the tests it ran (a row is known by its ``reproduce`` command) and
keeps the others, so one test file can be re-measured without running the
whole matrix.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from fault_harness import Reliability, Row, write_matrix

_ROWS: list[Row] = []
_ROWS_LOCK = threading.Lock()


@pytest.fixture
def reliability(request: pytest.FixtureRequest) -> Iterator[Reliability]:
    sink = Reliability(request.node.nodeid)
    yield sink
    with _ROWS_LOCK:
        _ROWS.extend(sink.rows)


@pytest.fixture(scope="session")
def rgw() -> Iterator[Any]:
    """A Ceph RGW cluster on loopback for the session's fault tests (stopped by its pids after them).

    One cluster, not one per module: starting one waits about 25 s.  Each
    test that stops, freezes or suspends it restores it before the next.

    Skips with one line naming the install command when Ceph is missing, or
    fails instead under ``KVPROBE_REQUIRE_RGW=1``.
    """
    from kvprobe.testing.rgw import running_rgw

    with running_rgw() as server:
        yield server


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if os.environ.get("KVPROBE_UPDATE_DOCS") == "1" and _ROWS:
        write_matrix(_ROWS, int(exitstatus))
