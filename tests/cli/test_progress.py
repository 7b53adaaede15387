"""Live progress is drawn on a terminal only; elsewhere nothing, or, for ``kvprobe check``, sparse plain lines."""

from __future__ import annotations

import io
import os
import pty
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kvprobe.progress import Progress

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}


class FakeTty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_not_a_terminal_writes_nothing() -> None:
    stream = io.StringIO()
    progress = Progress(stream)
    progress.show("working", force=True)
    progress.clear()
    assert stream.getvalue() == ""


def test_a_terminal_gets_one_redrawn_line_then_a_clean_line() -> None:
    stream = FakeTty()
    progress = Progress(stream, interval_s=3600)
    progress.show("step 1", force=True)
    progress.show("step 2")  # within the interval: not redrawn
    progress.show("step 3", force=True)
    progress.clear()
    assert stream.getvalue() == "\r\x1b[Kstep 1\r\x1b[Kstep 3\r\x1b[K"


def test_a_broken_stream_turns_the_display_off() -> None:
    stream = FakeTty()
    stream.close()
    progress = Progress(stream)
    progress.show("x", force=True)  # no exception
    assert not progress.enabled


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_log_gets_sparse_plain_lines_with_the_time_since_the_start() -> None:
    stream, clock = io.StringIO(), FakeClock()
    progress = Progress(stream, log_every_s=20, clock=clock)
    progress.note("started")
    clock.now += 5
    progress.show("depth 3", force=True)  # 5 s after the last line: not yet
    clock.now += 16
    progress.show("depth 7", force=True)  # 21 s: written
    clock.now += 1
    progress.show("depth 8")
    progress.tick()
    clock.now += 19
    progress.tick()  # 20 s after the last line, nothing new reported: the latest status again
    clock.now += 50
    progress.note("finished")
    progress.clear()
    assert stream.getvalue() == ("[0 s] started\n[21 s] depth 7\n[41 s] depth 8\n[1 min 31 s] finished\n")


def test_a_log_needs_a_positive_interval() -> None:
    with pytest.raises(ValueError, match="log_every_s"):
        Progress(io.StringIO(), log_every_s=0)


def test_a_terminal_gets_no_log_lines() -> None:
    stream = FakeTty()
    progress = Progress(stream, log_every_s=1)
    progress.note("started")
    progress.tick()
    assert stream.getvalue() == ""


@pytest.mark.skipif(shutil.which("java") is None, reason="TLC needs Java")
def test_check_into_a_pipe_prints_a_start_line_progress_and_an_end_line() -> None:
    cmd = [sys.executable, "-m", "kvprobe.cli", "check", "--config", "liveness", "--progress-every", "1"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=ENV)
    assert proc.returncode == 0, proc.stderr
    assert "OK, no violation" in proc.stdout
    lines = proc.stderr.splitlines()
    assert "\r" not in proc.stderr and "\x1b" not in proc.stderr
    assert re.fullmatch(r"\[0 s\] kvprobe check: TLC started on liveness.cfg \(MC.tla, 1 worker\)", lines[0])
    assert re.fullmatch(r"\[\d+( min \d\d)? s\] kvprobe check: TLC finished liveness.cfg after [\d.]+ s", lines[-1])
    # Between them, TLC's status (it reports its phases as it starts), each line stamped.
    assert all(re.match(r"\[\d+( min \d\d)? s\] TLC: ", line) for line in lines[1:-1]), lines
    seconds = float(re.findall(r"after ([\d.]+) s", lines[-1])[0])
    if seconds >= 3:  # a second between lines at most, so a run this long logs something in between
        assert len(lines) > 2, lines


def _conform(stderr: int | None) -> subprocess.Popen[bytes]:
    cmd = [sys.executable, "-m", "kvprobe.cli", "conform", "kvprobe.testing.stateful:memory_factory"]
    return subprocess.Popen([*cmd, "--examples", "30", "--derandomize"], stdout=subprocess.PIPE, stderr=stderr, env=ENV)


def test_conform_shows_runs_on_a_terminal_only() -> None:
    piped = _conform(subprocess.PIPE)
    _, err = piped.communicate(timeout=300)
    assert piped.returncode == 0 and err == b""
    leader, follower = pty.openpty()
    on_tty = _conform(follower)
    os.close(follower)
    assert on_tty.wait(timeout=300) == 0
    seen = b""
    try:
        while chunk := os.read(leader, 4096):
            seen += chunk
    except OSError:  # the terminal is closed once the child has gone
        pass
    os.close(leader)
    assert b"conform: " in seen and b" runs (up to 30 examples" in seen
