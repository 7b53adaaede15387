"""Wait until the CPUs are idle before the ``quiet`` tests, and name what kept them busy.

The tests marked ``quiet`` judge work by the CPU it gets (the CPU gate's:
a helper that spins must be seen computing). ``make test`` runs them alone,
after its stages, but what a stage leaves behind can still hold the CPUs
for a while: a daemon shutting down, a JVM exiting, a helper process not
yet reaped. Two busy processes on two cores were enough to make the gate
judge a spinning helper waiting (4 of 5 runs failed), and one fresh-clone
CI run failed that way, alone after the stages, beside something unseen.

So before the quiet tests this waits, up to ``--timeout`` seconds, for two
consecutive windows of ``--window`` seconds in which the CPUs were busy less
than ``--busy`` of the time (all cores together), printing the busiest
processes of each window it waited on. Past the timeout it says so and
exits 0: the tests then run and judge for themselves, and the log says what
ran beside them.

    python -m buildtools.wait_quiet [--busy 0.25] [--window 0.5] [--timeout 60] [--most 5]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

__all__ = ["busiest", "busy_share", "main"]

#: (busy jiffies, all jiffies) of every CPU together, from /proc/stat's first line.
CpuTimes = tuple[int, int]


def cpu_times(stat_line: str) -> CpuTimes:
    """(busy, total) jiffies of a ``/proc/stat`` ``cpu`` line; idle and iowait are not busy.

    Raises:
        ValueError: the line is not a ``cpu`` line of at least four counters.
    """
    name, *fields = stat_line.split()
    if not name.startswith("cpu") or len(fields) < 4:
        raise ValueError(f"not a /proc/stat cpu line: {stat_line!r}")
    counters = [int(f) for f in fields[:8]]
    idle = counters[3] + (counters[4] if len(counters) > 4 else 0)
    return sum(counters) - idle, sum(counters)


def busy_share(before: CpuTimes, after: CpuTimes) -> float:
    """The share of the time between two readings that the CPUs were busy (0 when no time passed)."""
    total = after[1] - before[1]
    return (after[0] - before[0]) / total if total > 0 else 0.0


def busiest(before: Mapping[int, tuple[str, int]], after: Mapping[int, tuple[str, int]], most: int = 5) -> list[str]:
    """``"pid name: N jiffies"`` for the processes that ran most between two readings, busiest first."""
    ran = [
        (ticks - before[pid][1], pid, name)
        for pid, (name, ticks) in after.items()
        if pid in before and ticks > before[pid][1]
    ]
    return [f"{pid} {name}: {delta} jiffies" for delta, pid, name in sorted(ran, reverse=True)[:most]]


def _read_cpu() -> CpuTimes:
    with open("/proc/stat", encoding="ascii") as stat:
        return cpu_times(stat.readline())


def _read_processes() -> dict[int, tuple[str, int]]:
    """{pid: (command name, user + system jiffies)} of every process that could be read."""
    seen: dict[int, tuple[str, int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            text = (entry / "stat").read_text(encoding="utf-8", errors="replace")
        except OSError:  # it ended while we looked
            continue
        name = text[text.find("(") + 1 : text.rfind(")")]
        fields = text[text.rfind(")") + 2 :].split()
        seen[int(entry.name)] = (name, int(fields[11]) + int(fields[12]))
    return seen


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m buildtools.wait_quiet", description=__doc__.splitlines()[0])
    parser.add_argument("--busy", type=float, default=0.25, help="busy share of all CPUs still quiet (0.25)")
    parser.add_argument("--window", type=float, default=0.5, help="seconds per reading (0.5)")
    parser.add_argument("--timeout", type=float, default=60.0, help="most seconds to wait (60)")
    parser.add_argument("--most", type=int, default=5, help="how many of the busiest processes to name (5)")
    args = parser.parse_args(argv)
    if not 0 < args.busy < 1 or args.window <= 0 or args.timeout < 0 or args.most < 1:
        parser.error("--busy must be in (0, 1), --window above 0, --timeout at least 0, --most at least 1")
    if not os.path.exists("/proc/stat"):
        print("wait_quiet: no /proc/stat here; not waiting")
        return 0
    start = time.monotonic()
    quiet_windows = 0
    while True:
        cpu, processes = _read_cpu(), _read_processes()
        time.sleep(args.window)
        share = busy_share(cpu, _read_cpu())
        if share < args.busy:
            quiet_windows += 1
            if quiet_windows == 2:
                print(f"wait_quiet: CPUs {share:.0%} busy; quiet after {time.monotonic() - start:.1f} s")
                return 0
            continue
        quiet_windows = 0
        named = busiest(processes, _read_processes(), args.most)
        print(f"wait_quiet: CPUs {share:.0%} busy; busiest: {'; '.join(named)}")
        if time.monotonic() - start >= args.timeout:
            print(f"wait_quiet: still busy after {args.timeout:.0f} s; the quiet tests run anyway")
            return 0


if __name__ == "__main__":
    sys.exit(main())
