"""buildtools.wait_quiet: what it reads from /proc, and that it names a process that keeps a CPU busy."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from buildtools.wait_quiet import busiest, busy_share, cpu_times, main  # noqa: E402


def test_idle_and_iowait_are_not_busy() -> None:
    # user nice system idle iowait irq softirq steal
    assert cpu_times("cpu  10 2 3 80 5 0 0 0 0 0") == (15, 100)
    assert busy_share((15, 100), (65, 200)) == 0.5
    assert busy_share((15, 100), (15, 100)) == 0.0


def test_a_line_that_is_not_a_cpu_line_is_refused() -> None:
    with pytest.raises(ValueError, match="not a /proc/stat cpu line"):
        cpu_times("intr 1 2 3")


def test_the_busiest_come_first_and_new_or_idle_processes_are_left_out() -> None:
    before = {1: ("java", 100), 2: ("ceph-osd", 50), 3: ("sleepy", 7)}
    after = {1: ("java", 160), 2: ("ceph-osd", 140), 3: ("sleepy", 7), 4: ("new", 30)}
    assert busiest(before, after) == ["2 ceph-osd: 90 jiffies", "1 java: 60 jiffies"]


def test_bad_options_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["--busy", "1.5"])
    assert exit_info.value.code == 2
    assert "--busy must be in (0, 1)" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["--most", "0"])
    assert "--most at least 1" in capsys.readouterr().err


@pytest.mark.skipif(not Path("/proc/stat").exists(), reason="reads Linux's /proc")
def test_spinning_processes_are_named_and_the_wait_ends_at_its_timeout() -> None:
    # One spinner per core (at most 16), and a threshold of half what they
    # take: the window is busy whatever else runs.  Every process that ran
    # is named (--most): beside busier jobs (CI's test-compiled runs beside
    # TLC), a spinner need not be among the five busiest.
    cores = os.cpu_count() or 1
    count = min(cores, 16)
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]
    try:
        command = [
            "-m",
            "buildtools.wait_quiet",
            "--window",
            "1",
            "--timeout",
            "0",
            "--busy",
            f"{0.5 * count / cores:.3f}",
            "--most",
            "100000",
        ]
        done = subprocess.run(
            [sys.executable, *command],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait()
    assert "busiest:" in done.stdout, done.stdout
    assert any(f"{spinner.pid} python" in done.stdout for spinner in spinners), done.stdout
    assert "still busy after 0 s; the quiet tests run anyway" in done.stdout, done.stdout


def test_the_timeline_says_how_busy_each_window_was_and_what_was_stolen() -> None:
    from buildtools.cpu_timeline import steal_jiffies, window_line

    # user nice system idle iowait irq softirq steal: 15 busy (5 of it stolen) in 100
    assert steal_jiffies("cpu  10 0 0 80 5 0 0 5 0 0") == 5
    assert steal_jiffies("cpu  10 0 0 80") == 0
    before = ((15, 100), 5)
    after = ((65, 200), 25)
    assert window_line(30.4, before, after) == "[cpu +30 s] busy 50 %, stolen 20 %"
    with pytest.raises(ValueError, match="not a /proc/stat cpu line"):
        steal_jiffies("intr 1 2 3")


def test_the_timeline_prints_a_line_per_window_and_stops_when_told(capsys: pytest.CaptureFixture[str]) -> None:
    from buildtools.cpu_timeline import main as timeline

    assert timeline(["--every", "0.01", "--windows", "3"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 3
    assert all(re.fullmatch(r"\[cpu \+\d+ s\] busy \d+ %, stolen \d+ %", line) for line in lines), lines


@pytest.mark.parametrize(
    ("option", "message"), [("--every=0", "--every must be a positive"), ("--windows=0", "--windows must be")]
)
def test_the_timeline_refuses_bad_options(option: str, message: str, capsys: pytest.CaptureFixture[str]) -> None:
    from buildtools.cpu_timeline import main as timeline

    with pytest.raises(SystemExit) as exit_info:
        timeline([option])
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err
