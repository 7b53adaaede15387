"""Fixtures of the fault matrix; the machinery is in ``fault_harness.py``.

With ``KVPROBE_RELIABILITY_MD=path`` in the environment, the session writes
the rows the tests recorded into the Reliability table (``docs/reliability.md``
is generated so).  A session replaces the rows of the tests it ran (a row is
known by its ``reproduce`` command) and keeps the others, so one test file
can be re-measured without running the whole matrix.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fault_harness import Reliability, Row, merged_rows

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


BEGIN, END = "<!-- faults:begin -->", "<!-- faults:end -->"

_SKELETON = """# Reliability

A fault in a slow tier must cost a cache hit, never a stalled scheduler, a
crash, or unbounded memory.  The fault matrix (`tests/faults/`) injects each
fault into a real backend where one applies and checks that every waiting
request gets a verdict within a bound, that the same manager keeps serving
afterwards (a fresh stored key gets a true verdict), that the counters
(`m.stats`) record the fault, and that `len(m)` returns to 0 once the requests
finish.  The soak (`bench/reliability/soak.py`) runs a million lookups with faults and
checks that nothing accumulates.

## Fault matrix

{faults}

## Soak

<!-- soak:begin -->
(run `python -m bench.reliability.soak --update-doc docs/reliability.md`)
<!-- soak:end -->
"""


def _fault_table(exitstatus: int, old_table: str) -> str:
    lines = [
        BEGIN,
        "Each row is written by the test it names; a run replaces the rows of the tests it ran "
        f"(the last: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, pytest exit status {exitstatus}, "
        "2 shared cores):",
        "",
        "    KVPROBE_RELIABILITY_MD=docs/reliability.md pytest tests/faults",
        "",
        "*Time to verdict*: from the first lookup of the requests that met the fault to their last verdict "
        "(`tests/faults/fault_harness.py`). *Leaked*: `len(m)` once every request was cleaned up.",
        "",
        "| fault | backend | verdicts delivered | time to verdict | states leaked | counters | reproduce |",
        "|---|---|---|---|---|---|---|",
        *merged_rows(old_table, _ROWS),
        END,
    ]
    return "\n".join(lines)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    target = os.environ.get("KVPROBE_RELIABILITY_MD")
    if not target or not _ROWS:
        return
    path = Path(target)
    text = path.read_text() if path.exists() else _SKELETON.format(faults=BEGIN + "\n" + END)
    if BEGIN not in text or END not in text:
        text = text.rstrip("\n") + "\n\n" + BEGIN + "\n" + END + "\n"
    head, rest = text.split(BEGIN, 1)
    old_table, tail = rest.split(END, 1)
    path.write_text(head + _fault_table(int(exitstatus), old_table) + tail)
