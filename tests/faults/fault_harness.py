"""Shared machinery of the fault matrix (imported as ``fault_harness``).

Every fault test drives the manager the way a scheduler does: each step it
looks up every (request, key) still without a verdict, then flushes; it gives
up after a bounded number of seconds.  It then checks four things: every
waiting request got a verdict, the manager still serves (a fresh key gets a
true verdict), the counters recorded the fault, and ``len(m)`` returns to 0
once every request is cleaned up.

Each test reports what it saw through the ``reliability`` fixture
(``conftest.py``); with ``KVPROBE_UPDATE_DOCS=1`` in the environment the
session writes those rows to ``docs/data/faults.json``, which
``docs/performance.md`` quotes (:func:`write_matrix`).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from bench.common import DOCS_DIR
from bench.docdata import dumps, machine_record, requote
from kvprobe.backends._nixl_import import nixl_unavailable
from kvprobe.statemachine import AsyncLookupManager, ReqContext

#: Liveness bound: a verdict must arrive within this many seconds of the
#: first lookup (generous: the machine is shared; the figures measured are
#: in the Reliability table).
VERDICT_BOUND_S = 20.0
STEP_SLEEP_S = 0.002


def nixl_missing() -> str | None:
    """Why NIXL cannot be used here, or None if it can (a skip reason)."""
    return nixl_unavailable()


@dataclass
class Drive:
    """What one scheduler-like drive saw."""

    verdicts: dict[tuple[str, bytes], bool]
    seconds: float  # from the first lookup to the last verdict
    steps: int

    def of(self, req_id: str, key: bytes) -> bool:
        return self.verdicts[(req_id, key)]

    @property
    def values(self) -> list[bool]:
        return list(self.verdicts.values())


def drive(
    m: AsyncLookupManager,
    wants: Mapping[str, Sequence[bytes]],
    *,
    bound_s: float = VERDICT_BOUND_S,
    between_steps: Callable[[int], None] | None = None,
) -> Drive:
    """Look up every (request, key) each step and flush, until all have a verdict.

    Fails the test, naming what still waits, if that takes longer than
    ``bound_s``.  ``between_steps(step)`` runs after each flush (to inject a
    fault mid-run).
    """
    contexts = {req_id: ReqContext(req_id) for req_id in wants}
    total = sum(len(keys) for keys in wants.values())
    verdicts: dict[tuple[str, bytes], bool] = {}
    start = time.monotonic()
    steps = 0
    while True:
        for req_id, keys in wants.items():
            for key in keys:
                if (req_id, key) in verdicts:
                    continue
                verdict = m.lookup(key, contexts[req_id])
                if verdict is not None:
                    verdicts[(req_id, key)] = verdict
        if len(verdicts) == total:
            return Drive(verdicts, time.monotonic() - start, steps)
        m.flush()
        steps += 1
        if between_steps is not None:
            between_steps(steps)
        if time.monotonic() - start > bound_s:
            waiting = [(r, k.hex()) for r, keys in wants.items() for k in keys if (r, k) not in verdicts]
            raise AssertionError(f"{len(waiting)} lookups still without a verdict after {bound_s} s: {waiting[:5]}")
        time.sleep(STEP_SLEEP_S)


def finish(m: AsyncLookupManager, req_ids: Sequence[str], *, bound_s: float = VERDICT_BOUND_S) -> int:
    """Clean up the requests, then wait (bounded) for in-flight orphans to go.

    Returns the number of states still held (the caller asserts it is 0):
    an IN_FLIGHT probe nobody waits on is kept until its result arrives.
    """
    for req_id in req_ids:
        m.cleanup(req_id)
    deadline = time.monotonic() + bound_s
    while len(m) and time.monotonic() < deadline:
        m.drain_results()
        time.sleep(STEP_SLEEP_S)
    return len(m)


def still_serves(m: AsyncLookupManager, store: Callable[[bytes], None], *, key: bytes = b"fresh-key-0001") -> Drive:
    """A fresh key that is stored gets a true verdict; the state is reclaimed after."""
    store(key)
    result = drive(m, {"after-fault": [key]})
    assert result.of("after-fault", key) is True, f"after the fault a stored key got {result.values}"
    assert finish(m, ["after-fault"]) == 0
    return result


def keys(prefix: str, n: int) -> list[bytes]:
    """``n`` distinct, deterministic 16-byte keys that look like block hashes.

    Hash-like, so that keys spread over the file layout's shard directories
    as real ones do (a shared text prefix would put them all in one shard).
    """
    return [hashlib.sha256(f"{prefix}-{i}".encode()).digest()[:16] for i in range(n)]


def calls_from_another_thread(calls: Mapping[str, Callable[[], object]]) -> dict[str, BaseException | None]:
    """Make each call from a new thread named "intruder"; what each raised (None: it returned)."""
    errors: dict[str, BaseException | None] = {}

    def intruder() -> None:
        for name, call in calls.items():
            try:
                call()
                errors[name] = None
            except BaseException as exc:
                errors[name] = exc

    thread = threading.Thread(target=intruder, name="intruder")
    thread.start()
    thread.join(VERDICT_BOUND_S)
    return errors


def process_alive(pid: int) -> bool:
    """Whether process ``pid`` exists and has not exited (a zombie counts as exited)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state not in ("Z", "X")


# --- the Reliability table ---------------------------------------------------------


@dataclass
class Row:
    fault: str
    backend: str
    verdicts: str  # "delivered/asked"
    seconds: float
    leaked: int
    counters: str
    command: str


@dataclass
class Reliability:
    """Collects one row per fault test (written out at the end of the session)."""

    nodeid: str
    rows: list[Row] = field(default_factory=list)

    def record(
        self,
        fault: str,
        backend: str,
        *,
        delivered: int,
        asked: int,
        seconds: float,
        leaked: int,
        counters: str,
        verdicts: str | None = None,
    ) -> None:
        """One row; ``verdicts`` replaces "delivered/asked" where that does not apply."""
        command = "pytest " + shlex.quote(self.nodeid)
        shown = verdicts if verdicts is not None else f"{delivered}/{asked}"
        self.rows.append(Row(fault, backend, shown, seconds, leaked, counters, command))


def counters(m: AsyncLookupManager, *names: str) -> str:
    """The named counters (and failures by kind) as ``name=value`` text for the table."""
    stats = m.stats
    parts = [f"{name}={getattr(stats, name)}" for name in names]
    parts += [f"{kind}={count}" for kind, count in sorted(stats.failures.items()) if kind not in names]
    return ", ".join(parts)


COLUMNS = ["fault", "backend", "verdicts delivered", "time to verdict", "states leaked", "counters", "test"]


def row_cells(row: Row) -> list[str]:
    """A row of the fault matrix, one string per column of :data:`COLUMNS`."""
    return [
        row.fault,
        row.backend,
        row.verdicts,
        f"{row.seconds * 1000:.0f} ms",
        str(row.leaked),
        row.counters,
        f"`{test_of(row.command)}`",
    ]


def test_of(command: str) -> str:
    """The test a ``pytest NODEID`` command runs, as the table shows it: its node id under ``tests/faults/``."""
    return shlex.split(command)[1].removeprefix("tests/faults/")


def merged_rows(old_rows: Sequence[Sequence[str]], rows: Sequence[Row]) -> list[list[str]]:
    """The old rows, those of the tests that recorded ``rows`` replaced in place; new tests' appended.

    A row is known by its last cell, the test's node id.
    """
    fresh: dict[str, list[list[str]]] = {}
    for row in rows:
        cells = row_cells(row)
        fresh.setdefault(cells[-1], []).append(cells)
    merged: list[list[str]] = []
    placed: set[str] = set()
    for old in old_rows:
        command = old[-1]
        if command not in fresh:
            merged.append(list(old))
        elif command not in placed:
            merged += fresh[command]
            placed.add(command)
    for command, new in fresh.items():
        if command not in placed:
            merged += new
    return merged


#: Where a session run with ``KVPROBE_UPDATE_DOCS=1`` writes the matrix, and the page that quotes it.
DOCS_DATA = DOCS_DIR / "data" / "faults.json"
DOCS_PAGE = DOCS_DIR / "performance.md"


def by_file(matrix: Sequence[Sequence[str]]) -> list[list[str]]:
    """The matrix summed per test file: its faults, verdicts delivered of those due, longest time, states leaked.

    A row whose verdicts are not ``delivered/asked`` (a closed manager owes
    none) is counted apart, so no row is dropped from the sums unseen.
    """
    files: dict[str, list[Sequence[str]]] = {}
    for row in matrix:
        files.setdefault(row[-1].strip("`").split("::")[0], []).append(row)
    summary = []
    for name, rows in files.items():
        counted = [tuple(map(int, r[2].split("/"))) for r in rows if re.fullmatch(r"\d+/\d+", r[2])]
        verdicts = f"{sum(d for d, _ in counted):,}/{sum(a for _, a in counted):,}"
        if len(counted) < len(rows):
            verdicts += f" (and {len(rows) - len(counted)} with none due)"
        longest = max(int(r[3].removesuffix(" ms")) for r in rows)
        leaked = sum(int(r[4]) for r in rows)
        summary.append([f"`{name}`", str(len(rows)), verdicts, f"{longest:,} ms", str(leaked)])
    return summary


BY_FILE_COLUMNS = ["test file", "faults", "verdicts delivered", "longest time to verdict", "states leaked"]


def write_matrix(rows: Sequence[Row], exitstatus: int, data_path: Path = DOCS_DATA, page: Path = DOCS_PAGE) -> None:
    """Merge ``rows`` into the matrix of ``data_path`` and re-render the table ``page`` quotes from it.

    The data file keeps every row (``matrix``) and their sums per test file
    (``by-file``), which the page quotes.

    Raises:
        ValueError: ``page`` does not quote the sums (``<!-- data: faults#by-file -->``).
    """
    old: list[list[str]] = []
    if data_path.exists():
        old = json.loads(data_path.read_text())["tables"]["matrix"]["rows"]
    matrix = merged_rows(old, rows)
    data = {
        "title": "The fault matrix: every fault injected, a verdict for every request",
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "machine": machine_record(),
        "command": "KVPROBE_UPDATE_DOCS=1 pytest tests/faults",
        "note": f"pytest exit status {exitstatus}; rows of tests this run did not run are kept from earlier runs",
        "source": "written by tests/faults/conftest.py at the end of the session",
        "tables": {
            "matrix": {"columns": COLUMNS, "rows": matrix},
            "by-file": {"columns": BY_FILE_COLUMNS, "rows": by_file(matrix)},
        },
    }
    data_path.write_text(dumps(data))
    if "by-file" in requote(page, data_path.stem, data):
        raise ValueError(f"{page} does not quote {data_path.stem}#by-file")
