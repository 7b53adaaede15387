"""A store's pace shared by the processes of a host (``pace_scope="host"``): one rate, one judge, kept in a file.

No S3 and no NIXL, except the last test's argument check.  The pace is the
process pace's :class:`PaceCore`; what is asserted here is the sharing:
that its state survives the file unchanged, that reservations and
Retry-After from one process hold back another, that a stale, torn or
foreign file is never trusted, and that a file the pacer cannot use never
fails a lookup.
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kvprobe.backends import _host_pace
from kvprobe.backends._host_pace import HostPacer, _boot_id
from kvprobe.backends._pace_core import PaceCore

HOLD_THE_LOCK = """
import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o600)
fcntl.flock(fd, fcntl.LOCK_EX)
print("locked", flush=True)
time.sleep(60)
"""


def _drive(core: PaceCore, start: float) -> float:
    """Single-HEAD queries at 250 HEAD/s, half of them failed (load): a decrease, then regrowth."""
    t = start
    for i in range(320):
        t = start + 0.004 * i
        if i % 2:
            core.failed(t + 0.01, t, 1)
        else:
            core.answered(t + 0.01, t, 1)
    return t + 0.01


def test_a_pace_comes_back_from_its_state_unchanged() -> None:
    core = PaceCore(0.0, window_min_s=0.5)
    end = _drive(core, 0.0)
    assert core.stats.decreases >= 1 and core.rate(end) is not None
    copy = PaceCore.from_state(json.loads(json.dumps(core.state())))
    assert copy.state() == core.state()
    # The copy behaves as the original from here on: the same reservations, the same regrowth.
    for t in (end, end + 0.5, end + 3.0, end + 30.0):
        assert copy.reserve(t, 16) == core.reserve(t, 16)
        assert copy.rate(t) == core.rate(t)


@pytest.mark.parametrize(
    "state",
    [
        {},
        {"paced": True},
        PaceCore(0.0).state() | {"extra": 1},
        PaceCore(0.0).state() | {"stats": {"bogus": 1}},
        # A pace file written before the served-without-failure anchor: refused, so the host starts a fresh pace.
        {name: value for name, value in PaceCore(0.0).state().items() if name != "_kept_up"},
    ],
)
def test_a_state_that_is_not_a_pace_is_refused(state: dict[str, object]) -> None:
    with pytest.raises(ValueError, match="not a pace's state"):
        PaceCore.from_state(state)


def test_two_pacers_on_one_file_share_retry_after_and_reservations(tmp_path: Path) -> None:
    path = tmp_path / "pace.json"
    a, b = HostPacer(path), HostPacer(path)
    assert a.reserve(1) is not None and a.snapshot()["rate"] is None  # unpaced until the store pushes back
    a.failed(time.monotonic(), 1, retry_after_s=30.0)
    assert b.reserve(1, time.monotonic() + 5) is None  # b was told nothing; the file was
    assert b.snapshot()["holds"] == 1 and b.snapshot()["refused"] == 1 == a.snapshot()["refused"]
    # One rate for both: a paced store at 10 HEAD/s; a's 5 HEADs push b's start by half a second (less the burst).
    path.write_text(json.dumps({"boot": _boot_id(), "used": time.monotonic(), "pace": _paced(10.0).state()}))
    first, second = a.reserve(5), b.reserve(5)
    assert first is not None and second is not None and second - first >= 0.35, (first, second)
    assert oct(path.stat().st_mode & 0o777) == "0o600"


def _paced(rate: float) -> PaceCore:
    return PaceCore(time.monotonic(), start_rate=rate)


def test_another_process_holds_this_one_back(tmp_path: Path) -> None:
    path = tmp_path / "pace.json"
    here = HostPacer(path)
    assert here.reserve(1, time.monotonic() + 5) is not None
    child = (
        "import sys, time\n"
        "from kvprobe.backends._host_pace import HostPacer\n"
        "HostPacer(sys.argv[1]).failed(time.monotonic(), 4, retry_after_s=30.0)\n"
    )
    subprocess.run([sys.executable, "-c", child, str(path)], check=True, timeout=60)
    assert here.reserve(1, time.monotonic() + 5) is None  # the other process's Retry-After holds this one
    assert here.snapshot()["holds"] == 1 and here.fallbacks == 0


def test_an_idle_a_torn_or_another_boots_pace_starts_afresh(tmp_path: Path) -> None:
    path = tmp_path / "pace.json"
    HostPacer(path, idle_reset_s=0.05).failed(time.monotonic(), 1, retry_after_s=30.0)
    time.sleep(0.1)
    fresh = HostPacer(path, idle_reset_s=0.05)
    assert fresh.reserve(1, time.monotonic() + 5) is not None and fresh.snapshot()["holds"] == 0
    for text in ('{"boot": "other", "used": 0, "pace": {}}', '{"boot": ', "[]", "\x00" * 10):
        path.write_text(text)
        pacer = HostPacer(path)
        assert pacer.reserve(1, time.monotonic() + 5) is not None and pacer.snapshot()["rate"] is None
    stale = {"boot": "another boot", "used": time.monotonic(), "pace": _paced(1.0).state()}
    path.write_text(json.dumps(stale))
    assert HostPacer(path).snapshot()["rate"] is None  # its times are on another boot's clock
    with pytest.raises(ValueError, match="idle_reset_s"):
        HostPacer(path, idle_reset_s=0.0)


def test_a_file_that_is_not_ours_is_never_read_and_never_fails_a_call(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    shared = tmp_path / "writable.json"
    shared.write_text(json.dumps({"boot": _boot_id(), "used": time.monotonic(), "pace": _paced(1.0).state()}))
    shared.chmod(0o666)  # anyone could have written this pace (a hold of an hour, say)
    target = tmp_path / "elsewhere.json"
    link = tmp_path / "link.json"
    link.symlink_to(target)
    for path in (shared, link):
        pacer = HostPacer(path)
        with caplog.at_level(logging.WARNING, logger="kvprobe.backends._host_pace"):
            assert pacer.reserve(1, time.monotonic() + 5) is not None  # this process's own pace: unpaced
            pacer.failed(time.monotonic(), 1)
        assert pacer.snapshot()["host_fallbacks"] == 3 and pacer.snapshot()["rate"] is None
        assert str(path) in caplog.text
        caplog.clear()
    assert not target.exists()  # the link was not followed


def test_a_process_holding_the_lock_never_holds_this_ones_lookups(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "pace.json"
    holder = subprocess.Popen(  # a stopped or hung process that keeps the lock
        [sys.executable, "-c", HOLD_THE_LOCK, str(path)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        tries: list[int] = []
        real_flock = _host_pace.fcntl.flock
        monkeypatch.setattr(_host_pace.fcntl, "flock", lambda fd, op: (tries.append(op), real_flock(fd, op))[1])
        monkeypatch.setattr(_host_pace, "ALONE_S", 0.2)
        pacer = HostPacer(path)
        with caplog.at_level(logging.WARNING, logger="kvprobe.backends._host_pace"):
            assert pacer.reserve(1, time.monotonic() + 5) is not None  # paced alone, not refused
        assert pacer.snapshot()["host_fallbacks"] == 2 and "held it" in caplog.text
        assert tries  # it tried the lock, then gave up
        tries.clear()
        pacer.failed(time.monotonic(), 1, retry_after_s=30.0)
        assert not tries and pacer.reserve(1, time.monotonic() + 5) is None  # alone: no wait, its own word holds
    finally:
        holder.kill()
        holder.wait(timeout=10)
    time.sleep(0.25)  # past ALONE_S: the file again, the holder gone
    assert pacer.reserve(1, time.monotonic() + 5) is not None  # the host's pace: the alone pace's hold is not in it
    assert tries and json.loads(path.read_text())["pace"]


def test_a_snapshot_leaves_the_file_alone(tmp_path: Path) -> None:
    path = tmp_path / "pace.json"
    pacer = HostPacer(path)
    pacer.failed(time.monotonic(), 1)
    before = path.read_bytes()
    pacer.snapshot()
    assert path.read_bytes() == before


def test_the_object_backend_takes_a_pace_scope(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("boto3")
    monkeypatch.setenv("KVPROBE_PACE_DIR", str(tmp_path))
    from kvprobe.backends._nixl_import import nixl_unavailable

    if nixl_unavailable():
        pytest.skip(str(nixl_unavailable()))
    from kvprobe.backends.nixl_obj import NixlObjBackend

    with pytest.raises(ValueError, match="pace_scope must be one of"):
        NixlObjBackend("kvblocks", endpoint_url="http://127.0.0.1:9", pace_scope="cluster", check=False)
    with NixlObjBackend("kvblocks", endpoint_url="http://127.0.0.1:9", pace_scope="host", check=False) as backend:
        assert isinstance(backend.pacer, HostPacer) and backend.pacing["host_fallbacks"] == 0
        assert backend.pacer.path.parent == tmp_path and backend.pacer.path.exists()
