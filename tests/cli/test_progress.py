"""Live progress is drawn on a terminal only: nothing extra in logs and pipes."""

from __future__ import annotations

import io
import os
import pty
import subprocess
import sys
from pathlib import Path

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
