"""Print how busy the CPUs were, window after window: where a CI run left cores idle.

``.ci/run`` runs jobs side by side, and whether the run can get shorter
depends on whether both cores were busy all along or one sat idle while a
long job ran alone.  The step lines say when each job ended, not that; this
prints one line per window from the moment it starts: the seconds since
then, the busy share of all cores together (as ``buildtools.wait_quiet``
counts it) and the share the hypervisor stole.

    python -m buildtools.cpu_timeline [--every 30] [--windows N]

It runs until killed, or for ``--windows`` windows.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from buildtools.wait_quiet import CpuTimes, busy_share, cpu_times

__all__ = ["main", "steal_jiffies", "window_line"]


def steal_jiffies(stat_line: str) -> int:
    """The jiffies stolen by the hypervisor, from a ``/proc/stat`` ``cpu`` line (0 if it has no such field).

    Raises:
        ValueError: the line is not a ``cpu`` line (as :func:`cpu_times` says).
    """
    cpu_times(stat_line)
    fields = stat_line.split()[1:]
    return int(fields[7]) if len(fields) > 7 else 0


def window_line(elapsed_s: float, before: tuple[CpuTimes, int], after: tuple[CpuTimes, int]) -> str:
    """``"[cpu +T s] busy B %, stolen S %"`` for the window between two readings (stolen time is busy)."""
    total = after[0][1] - before[0][1]
    stolen = (after[1] - before[1]) / total if total > 0 else 0.0
    return f"[cpu +{elapsed_s:.0f} s] busy {100 * busy_share(before[0], after[0]):.0f} %, stolen {100 * stolen:.0f} %"


def _read() -> tuple[CpuTimes, int]:
    line = Path("/proc/stat").read_text().splitlines()[0]
    return cpu_times(line), steal_jiffies(line)


def main(argv: Sequence[str] | None = None) -> int:
    """Print a line every ``--every`` seconds; returns 0 (after ``--windows`` lines, if given)."""
    parser = argparse.ArgumentParser(prog="python -m buildtools.cpu_timeline")
    parser.add_argument("--every", type=float, default=30.0, help="seconds per window (default 30)")
    parser.add_argument("--windows", type=int, default=None, help="stop after this many windows (default: never)")
    args = parser.parse_args(argv)
    if args.every <= 0:
        parser.error("--every must be a positive number of seconds")
    if args.windows is not None and args.windows < 1:
        parser.error("--windows must be at least 1")
    start = time.monotonic()
    before = _read()
    printed = 0
    while args.windows is None or printed < args.windows:
        time.sleep(args.every)
        after = _read()
        print(window_line(time.monotonic() - start, before, after), flush=True)
        before = after
        printed += 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
