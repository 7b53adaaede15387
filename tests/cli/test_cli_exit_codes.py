"""The ``kvprobe`` command as a user meets it, by subprocess: exit codes and one-line errors."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}


def kvprobe(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kvprobe.cli", *args], capture_output=True, text=True, timeout=timeout, env=ENV
    )


def _one_line_error(proc: subprocess.CompletedProcess[str]) -> str:
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    return lines[0]


def test_version() -> None:
    proc = kvprobe("--version")
    assert proc.returncode == 0
    # which build is loaded: tests/packaging/test_layout.py
    assert proc.stdout.strip().startswith("kvprobe 0.1.0 (") and "core" in proc.stdout


@pytest.mark.parametrize("args", [["nope"], ["check", "--bogus"], ["conform"], ["conform", "--examples", "0", "x:y"]])
def test_usage_errors_exit_2(args: list[str]) -> None:
    proc = kvprobe(*args)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr


def test_no_command_prints_usage_and_exits_2() -> None:
    proc = kvprobe()
    assert proc.returncode == 2 and "usage: kvprobe" in proc.stdout


@pytest.mark.parametrize(
    ("args", "names"), [(["--mutant", "nope"], "unknown mutant"), (["--config", "nope"], "no config")]
)
def test_check_unknown_names_exit_2(args: list[str], names: str) -> None:
    proc = kvprobe("check", *args)
    assert proc.returncode == 2
    assert names in _one_line_error(proc)


def test_check_missing_trace_is_a_usage_error(tmp_path: Path) -> None:
    missing = tmp_path / "missing.ndjson"
    proc = kvprobe("check", "--trace", str(missing))
    assert proc.returncode == 2
    line = _one_line_error(proc)
    assert str(missing) in line and "cannot read" in line
    assert "KVPROBE_TLA_DIR" not in line


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ('{"seq": 0, "action": "Lookup"\n', "not a kvprobe NDJSON trace"),
        ("[1, 2]\n", "JSON object"),
        ('{"seq": 0, "action": "NoSuchAction"}\n', "not a kvprobe NDJSON trace"),
    ],
)
def test_check_malformed_trace_is_a_usage_error(tmp_path: Path, text: str, reason: str) -> None:
    bad = tmp_path / "bad.ndjson"
    bad.write_text(text)
    proc = kvprobe("check", "--trace", str(bad))
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    line = _one_line_error(proc)
    assert reason in line and str(bad) in line


def test_check_list_into_a_closed_pipe_ends_quietly() -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "kvprobe.cli", "check", "--list"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=ENV,
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # the reader is gone before the first line is written (| head -0)
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 141
    assert "Traceback" not in err and "BrokenPipeError" not in err


def _sigint_as_at_a_terminal() -> None:
    # A runner started in the background by a shell without job control
    # (`cmd &` in a script) ignores SIGINT, and its children inherit that:
    # Python then installs no KeyboardInterrupt handler and the CLI never
    # sees the signal.  Ctrl-C comes from a terminal, where it is not ignored.
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.skipif(shutil.which("java") is None, reason="TLC needs Java")
def test_ctrl_c_during_check_exits_130_without_traceback() -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "kvprobe.cli", "check", "--config", "deep"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=ENV,
        preexec_fn=_sigint_as_at_a_terminal,
    )
    time.sleep(4)  # TLC is running (the deep config takes minutes)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, (out, err)
    assert "Traceback" not in err and "interrupted" in err


def test_conform_without_hypothesis_says_which_extra(tmp_path: Path) -> None:
    # A core install: importing hypothesis fails.
    (tmp_path / "hypothesis.py").write_text("raise ImportError('not installed')\n")
    env = {**ENV, "PYTHONPATH": os.pathsep.join([str(tmp_path), ENV["PYTHONPATH"]])}
    run = [sys.executable, "-m", "kvprobe.cli", "conform"]
    helped = subprocess.run([*run, "--help"], capture_output=True, text=True, env=env, timeout=60)
    assert helped.returncode == 0 and "kvprobe[conform]" in helped.stdout
    ran = subprocess.run([*run, "kvprobe.testing.stateful:memory_factory"], capture_output=True, text=True, env=env)
    assert ran.returncode == 2
    assert _one_line_error(ran) == "kvprobe conform needs Hypothesis: pip install 'kvprobe[conform]'"


def test_check_mutant_with_a_trace_is_a_usage_error(tmp_path: Path) -> None:
    # A recorded trace is checked against the correct model: a mutant cannot apply.
    trace = tmp_path / "run.ndjson"
    trace.write_text('{"seq": 0, "action": "Shutdown", "size": 0, "after": [], "open": []}\n')
    proc = kvprobe("check", "--trace", str(trace), "--mutant", "double-result")
    assert proc.returncode == 2
    assert "--mutant does not apply to --trace" in _one_line_error(proc)


def test_conform_factory_that_raises_is_a_usage_error(tmp_path: Path) -> None:
    (tmp_path / "raising_factory.py").write_text("def make():\n    raise RuntimeError('no credentials')\n")
    env = {**ENV, "PYTHONPATH": os.pathsep.join([str(tmp_path), ENV["PYTHONPATH"]])}
    cmd = [sys.executable, "-m", "kvprobe.cli", "conform", "raising_factory:make"]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 2
    assert "RuntimeError: no credentials" in _one_line_error(proc)
