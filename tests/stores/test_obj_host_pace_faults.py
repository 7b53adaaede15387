"""The host pace's file when it fails (issue 39 part 3): no lookup fails, waits or is shed for it.

Write failures (a full disk, a file-size limit), torn and stale writes,
files whose fields are wrong, and a fork while a thread is inside a pace
call.  Each degrades to the process's own pace, which keeps serving, and is
counted; none leaves the host's file torn or holding back every HEAD.
"""

from __future__ import annotations

import errno
import json
import math
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from kvprobe.backends import _host_pace
from kvprobe.backends._host_pace import HostPacer, _boot_id, checked_pace
from kvprobe.backends._pacing import PaceCore, Pacer


def _paced_file(path: Path, rate: float, **fields: Any) -> None:
    pace = PaceCore(time.monotonic(), start_rate=rate).state() | fields
    path.write_text(json.dumps({"boot": _boot_id(), "used": time.monotonic(), "pace": pace}))


def _decrease(pacer: Pacer) -> None:
    """Single-HEAD queries sent as they are made, a quarter of the HEADs failed (no store noise is that): a decrease."""
    for i in range(200):
        sent = time.monotonic()
        if i % 4 == 3:
            pacer.failed(sent, 1)
        else:
            pacer.answered(sent, 1)
        time.sleep(0.002)


# --- write failures ---------------------------------------------------------------


def test_a_file_that_cannot_be_written_never_fails_a_call_and_the_pace_goes_on_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "pace.json"
    pacer = HostPacer(path)
    assert pacer.reserve(1) is not None  # the file holds a pace
    before = path.read_bytes()

    def full(*args: object) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(_host_pace.os, "write", full)
    pacer.failed(time.monotonic(), 4, retry_after_s=30.0)  # no OSError out of the call
    assert pacer.reserve(1, time.monotonic() + 5) is None  # the hold it learnt goes on in this process
    assert pacer.snapshot()["host_fallbacks"] >= 1
    assert path.read_bytes() == before, "a failed write changed the host's file"
    assert not [p for p in tmp_path.iterdir() if p != path], "a failed write left a file behind"


FSIZE_CHILD = """
import json, resource, sys, time
from kvprobe.backends._host_pace import HostPacer
path, limit = sys.argv[1], int(sys.argv[2])
resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.RLIM_INFINITY))  # SIGXFSZ: ignored by Python
pacer = HostPacer(path)
for _ in range(3):  # half the HEADs failing: load, a decrease never undone
    start = time.monotonic()
    for i in range(80):
        (pacer.failed if i % 2 else pacer.answered)(start + i * 0.001, 1)
    time.sleep(0.3)
snap = pacer.snapshot()
print(json.dumps({"rate": snap["rate"], "fallbacks": snap["host_fallbacks"]}))
"""


def test_a_file_size_limit_neither_fails_a_call_nor_tears_the_file(tmp_path: Path) -> None:
    """Past RLIMIT_FSIZE a write is cut short, then refused: the calls go on, the file stays whole."""
    path = tmp_path / "pace.json"
    HostPacer(path).reserve(1)  # a small, whole pace in the file
    small = path.stat().st_size
    done = subprocess.run(
        [sys.executable, "-c", FSIZE_CHILD, str(path), str(small + 40)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    seen = json.loads(done.stdout.splitlines()[-1])
    assert seen["fallbacks"] >= 1, seen
    assert seen["rate"] is not None, "the process lost its pace's decrease with the file"
    saved = json.loads(path.read_text())  # whole: never torn
    checked_pace(saved["pace"], time.monotonic())
    reader = HostPacer(path)
    reader.reserve(1)
    assert reader.bad_files == 0


def test_a_shorter_state_over_a_longer_one_leaves_no_tail(tmp_path: Path) -> None:
    path = tmp_path / "pace.json"
    _paced_file(path, 123.456789012345, measured=98765.4321098765, w_max=176.36684144620715)
    long = path.stat().st_size
    path.write_text(path.read_text() + " " * 200)  # longer still
    pacer = HostPacer(path)
    pacer.failed(time.monotonic(), 1, retry_after_s=1.0)
    assert path.stat().st_size < long + 200
    json.loads(path.read_text())  # no tail of the longer state


def test_a_torn_write_does_not_start_the_host_pace_afresh_on_every_call(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A write cut short leaves the last whole pace in the file, and the writer's pace in its process."""
    path = tmp_path / "pace.json"
    pacer = HostPacer(path)
    _decrease(pacer)
    rate = pacer.snapshot()["rate"]
    assert rate is not None
    real_write = os.write
    monkeypatch.setattr(_host_pace.os, "write", lambda fd, data: real_write(fd, bytes(data)[:10]) and 0)
    pacer.failed(time.monotonic(), 1)  # the write is torn
    monkeypatch.setattr(_host_pace.os, "write", real_write)
    other = HostPacer(path)
    assert other.snapshot()["rate"] is not None, "the host pace started afresh from a torn write"
    assert other.bad_files == 0
    assert pacer.snapshot()["rate"] is not None


# --- fields never validated ---------------------------------------------------------


def _chain(**fields: Any) -> dict[str, Any]:
    """A demand chain as a pace file holds it (one window pooled), with ``fields`` changed."""
    return {"cut_rate": 900.0, "first_share": 0.05, "pooled_heads": 64, "pooled_failed": 3.0, "windows": 1} | fields


BAD_FIELDS = [
    ("hold_until-huge", {"hold_until": 1e300}),
    ("tat-huge", {"tat": 1e300}),
    ("tat-string", {"tat": "later"}),
    ("tat-nan", {"tat": math.nan}),
    ("last_reserved-short", {"_last_reserved": [0.0]}),
    ("kept_up-short", {"_kept_up": []}),
    ("stats-string", {"stats": {"decreases": "7", "undone": 0, "holds": 0, "refused": 0}}),
    ("w_max-inf", {"w_max": math.inf}),
    ("measured-negative", {"measured": -5.0}),
    ("noise-above-one", {"noise": 5.0}),
    ("noise-learnt-negative", {"_noise_learnt": -0.1}),
    ("noise-learnt-string", {"_noise_learnt": "some"}),
    ("verify-short", {"_verify": [1.0, 0.5]}),
    ("noise-pool-short", {"_noise_pool": [3, 1]}),
    ("noise-pool-float", {"_noise_pool": [3, 1.5, 12]}),
    ("noise-pool-negative", {"_noise_pool": [3, -1, 12]}),
    ("frozen-at-huge", {"_frozen_at": 1e300}),
    ("frozen-at-string", {"_frozen_at": "then"}),
    ("noise-rate-inf", {"_noise_rate": math.inf}),
    ("noise-rate-negative", {"_noise_rate": -1.0}),
    ("demand-chain-missing-field", {"_demand_chain": {"cut_rate": 900.0, "first_share": 0.05}}),
    ("demand-chain-extra-field", {"_demand_chain": _chain(rose=True)}),
    ("demand-chain-list", {"_demand_chain": [900.0, 0.05, 64, 3.0, 1]}),  # the shape written before it had names
    ("demand-chain-string", {"_demand_chain": _chain(cut_rate="fast")}),
    ("demand-chain-share-above-one", {"_demand_chain": _chain(first_share=2.0)}),
    ("demand-chain-more-failed-than-sent", {"_demand_chain": _chain(pooled_failed=65.0)}),
    ("demand-chain-heads-float", {"_demand_chain": _chain(pooled_heads=64.5)}),
    ("demand-chain-windows-negative", {"_demand_chain": _chain(windows=-1)}),
    ("paced-int", {"paced": 1}),
    ("beta-other", {"beta": 1.5}),
    ("floor-other", {"floor": 1e-300}),
    ("window-list", {"_window": [1, 2]}),
]


@pytest.mark.parametrize(("name", "fields"), BAD_FIELDS, ids=[n for n, _ in BAD_FIELDS])
def test_a_pace_file_with_a_bad_field_is_replaced_and_counted(
    tmp_path: Path, name: str, fields: dict[str, Any]
) -> None:
    path = tmp_path / "pace.json"
    _paced_file(path, 100.0, **fields)
    pacer = HostPacer(path)
    for _ in range(3):  # not once: every call
        assert pacer.reserve(1, time.monotonic() + 5) is not None, "a bad file refused a reservation"
    pacer.failed(time.monotonic(), 1)
    pacer.answered(time.monotonic(), 1)
    assert pacer.snapshot()["host_bad_files"] == 1  # replaced at the first call, good since
    checked_pace(json.loads(path.read_text())["pace"], time.monotonic())


def test_a_good_pace_file_is_read_as_it_is(tmp_path: Path) -> None:
    path = tmp_path / "pace.json"
    pacer = HostPacer(path)
    _decrease(pacer)
    saved = json.loads(path.read_text())["pace"]
    assert saved["_demand_chain"] is not None, "the decrease began no chain: the file does not show one read back"
    assert checked_pace(saved, time.monotonic()).state() == PaceCore.from_state(saved).state()
    assert pacer.bad_files == 0 and pacer.fallbacks == 0


# --- fork during a pace call -------------------------------------------------------

FORK_CHILD_TIMEOUT_S = 10


def _fork_while_held(pacer: Pacer, in_child: Any) -> int:
    """Fork while another thread is inside a pace call; run ``in_child(pacer)`` in the child; its exit status."""
    inside, leave = threading.Event(), threading.Event()

    def hold() -> None:
        with pacer._held():
            inside.set()
            leave.wait(30)

    holder = threading.Thread(target=hold)
    holder.start()
    assert inside.wait(10)
    pid = os.fork()
    if pid == 0:  # the child: only this thread
        try:
            signal.alarm(FORK_CHILD_TIMEOUT_S)  # a hung call ends the child, with a status the parent reads
            in_child(pacer)
            os._exit(0)
        except BaseException:
            os._exit(3)
    leave.set()
    holder.join(10)
    _, status = os.waitpid(pid, 0)
    return status


def _serve(pacer: Pacer) -> None:
    assert pacer.reserve(1, time.monotonic() + 5) is not None
    pacer.failed(time.monotonic(), 1)
    pacer.snapshot()


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # fork with threads: the very case under test
def test_a_child_forked_during_a_process_pace_call_is_served(tmp_path: Path) -> None:
    status = _fork_while_held(Pacer(), _serve)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, f"the child hung or failed: status {status}"


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_a_child_forked_during_a_host_pace_call_is_served_and_keeps_no_lock(tmp_path: Path) -> None:
    path = tmp_path / "pace.json"
    pacer = HostPacer(path)
    pacer.reserve(1)

    def serve_then_stay(child: Pacer) -> None:
        _serve(child)
        time.sleep(3)  # alive while the parent takes the file again

    parent_done: list[int] = []

    def parent_calls() -> None:
        time.sleep(1.0)
        before = pacer.fallbacks
        pacer.reserve(1, time.monotonic() + 5)
        parent_done.append(pacer.fallbacks - before)

    checker = threading.Thread(target=parent_calls)
    checker.start()
    status = _fork_while_held(pacer, serve_then_stay)
    checker.join(20)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, f"the child hung or failed: status {status}"
    assert parent_done == [0], "the child kept the host's lock: the parent paced alone"


def test_a_child_of_a_fork_during_a_call_starts_a_fresh_process_pace() -> None:
    pacer = Pacer(PaceCore(time.monotonic(), start_rate=1.0))
    pacer._lock.acquire()  # as a thread inside a call at the fork
    pacer._after_fork_in_child(was_held=True)
    assert pacer.snapshot()["rate"] is None and pacer.fork_resets == 1  # a new lock, a fresh pace
    quiet = Pacer(PaceCore(time.monotonic(), start_rate=1.0))
    quiet._after_fork_in_child(was_held=False)
    assert quiet.snapshot()["rate"] is not None and quiet.fork_resets == 0  # nothing half done: kept
