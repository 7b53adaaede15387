"""Run pytest stages side by side and report them as one run: ``make test``'s driver.

The suite's two halves use the machine differently: the TLC runs are Java
processes that keep a core busy, most of the rest waits on worker threads,
sockets and local servers.  Run one after the other they leave a core idle
most of the time; run side by side (two processes, no shared state but the
temporary directory) they take little more than the longer of the two.

A stage is a marker expression, optionally followed by ``@`` and a comma
list of test paths it runs (``tests/core,tests/cli``) or, prefixed with
``!``, leaves out (``!tests/core,!tests/cli``): one expression cut in two
by folder, the second half the complement of the first, so that no test
falls between the stages.  A path may be one test's id
(``tests/x.py::test_y[p]``): a long test then gets a stage of its own.

Each stage's output goes to its own log, printed whole when the stage ends
(so two runs never interleave line by line), and the last line sums the
stages' counts in pytest's words.  The exit status is the first non-zero
stage status (pytest's 5, "no tests collected", counts as a failure: a
stage that selects nothing is a broken selection, not a pass).

With ``--first-ahead N`` every stage but the first runs at a niceness N
higher: the first is then the run's long pole (a single-threaded TLC run
that needs a core to itself to end with the rest), and the others share
what it leaves, as they would share both cores without it.

    python -m buildtools.stages "not long and tlc" "not long and not tlc@tests/core" \\
        "not long and not tlc@!tests/core" -- [pytest args]
    python -m buildtools.stages --first-ahead 5 "long and tlc@tests/x.py::test_long" ...
"""

from __future__ import annotations

import functools
import os
import re
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

__all__ = ["main", "stage_arguments", "summary_counts"]

_COUNT = re.compile(r"(\d+) (passed|failed|skipped|deselected|errors?|xfailed|xpassed)")


def summary_counts(log: str) -> Counter[str]:
    """The counts of pytest's closing line in ``log`` (``error`` and ``errors`` merged)."""
    for line in reversed(log.strip().splitlines()):
        found = _COUNT.findall(line)
        if found and (" in " in line):
            return Counter({word.rstrip("s") if word.startswith("error") else word: int(n) for n, word in found})
    return Counter()


def stage_arguments(stage: str) -> list[str]:
    """The pytest arguments that select one stage: ``-m EXPR``, then its paths or what it leaves out.

    Raises:
        ValueError: the stage mixes paths it runs and paths it leaves out
            (pytest would run everything but the left-out ones), or names an
            empty path.
    """
    marker, _, where = stage.partition("@")
    arguments = ["-m", marker.strip()]
    if not where:
        return arguments
    paths = [path.strip() for path in where.split(",")]
    if any(not path.lstrip("!") for path in paths):
        raise ValueError(f"stage {stage!r} names an empty path")
    left_out = [path.startswith("!") for path in paths]
    if any(left_out) and not all(left_out):
        raise ValueError(f"stage {stage!r} mixes paths to run with paths to leave out ('!')")
    if all(left_out):
        # --ignore takes files and folders only; a test's id is deselected.
        return arguments + [f"--{'deselect' if '::' in path else 'ignore'}={path[1:]}" for path in paths]
    return arguments + paths


def _wait(process: subprocess.Popen[bytes]) -> tuple[int, float]:
    """Wait for a stage's pytest; its exit status and the CPU seconds it and what it waited for used.

    A stage's CPU, not its wall time, says what it costs a machine whose
    cores its neighbours keep busy: Linux's wait4 counts the process and
    every descendant it reaped (TLC's JVMs, the S3 servers a test stopped).
    """
    _, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    return process.returncode, usage.ru_utime + usage.ru_stime


def main(argv: list[str]) -> int:
    """Run one pytest per stage before ``--``, side by side; arguments after it go to each.

    Returns 2 (usage) when no stage is given or a stage is malformed (see
    :func:`stage_arguments`), otherwise the first non-zero stage status.
    """
    if "--" in argv:
        cut = argv.index("--")
        stages, extra = argv[:cut], argv[cut + 1 :]
    else:
        stages, extra = argv, []
    usage = "usage: python -m buildtools.stages [--first-ahead N] MARKEXPR[@PATHS] ... -- [pytest args]"
    ahead = 0
    if stages[:1] == ["--first-ahead"]:
        if len(stages) < 2 or not stages[1].isdigit() or not 0 < int(stages[1]) <= 19:
            print(f"buildtools.stages: --first-ahead takes a niceness from 1 to 19\n{usage}", file=sys.stderr)
            return 2
        ahead, stages = int(stages[1]), stages[2:]
    if not stages:
        print(usage, file=sys.stderr)
        return 2
    try:
        selections = [stage_arguments(stage) for stage in stages]
    except ValueError as exc:
        print(f"buildtools.stages: {exc}", file=sys.stderr)
        return 2
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="kvprobe-stages-") as tmp:
        runs = []
        for index, (stage, selection) in enumerate(zip(stages, selections, strict=True)):
            log = Path(tmp) / f"stage-{index}.log"
            # The extra arguments first: a stage's paths must not read as an option's value.
            command = [sys.executable, "-m", "pytest", *extra, *selection]
            handle = log.open("w")
            # Each stage its own pytest base temp: two runs must not clean each other's.
            env = {**os.environ, "PYTEST_ADDOPTS": f"{os.environ.get('PYTEST_ADDOPTS', '')} --basetemp={tmp}/t{index}"}
            behind = ahead if index > 0 else 0
            process = subprocess.Popen(
                command, stdout=handle, stderr=subprocess.STDOUT, env=env, preexec_fn=functools.partial(os.nice, behind)
            )
            runs.append((stage, log, handle, process))
            print(f"stage {index}: {stage!r} (log {log})", flush=True)
        status = 0
        total: Counter[str] = Counter()
        for index, (stage, log, handle, process) in enumerate(runs):
            code, cpu_s = _wait(process)
            handle.close()
            text = log.read_text(errors="replace")
            print(f"\n===== stage {index}: {stage!r}: exit {code}, {cpu_s:.0f} CPU s =====", flush=True)
            sys.stdout.write(text)
            counts = summary_counts(text)
            total += counts
            if code != 0 and status == 0:
                status = code
    order = ["failed", "passed", "skipped", "deselected", "error", "xfailed", "xpassed"]
    words = [f"{total[w]} {w}" for w in order if total[w] or w in ("failed", "passed")]
    print(f"\nall {len(stages)} stages: {', '.join(words)} in {time.monotonic() - started:.0f}s (exit {status})")
    # The plain closing line a CI reads: "N passed, N failed".
    print(f"{total['passed']} passed, {total['failed'] + total['error']} failed, {total['skipped']} skipped")
    return status


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
