"""``python -m bench.objstore.pace_cost``: what a call on a store's pace costs, a process's pace beside a host's.

The object backend calls its pace twice per NIXL query of up to 16 HEADs
(the reservation, then the outcome).  A process's pace
(:class:`~kvprobe.backends.obj_parts.Pacer`) is a lock around a pure core; a
host's (:class:`~kvprobe.backends.obj_parts.HostPacer`, ``pace_scope="host"``)
also opens, locks, reads and writes its file on every call.  Both run the
same calls (a reservation and an answered query, an unpaced store), in
rounds that alternate between them (so a drift of the machine's load falls
on both); the table gives microseconds per call, median over the rounds,
and the host's over the process's.  The file lives where the backend would
put it (``/dev/shm`` here), in a directory of its own removed after.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from bench.common import load_average, machine
from kvprobe.backends.obj_parts import HostPacer, Pacer, pace_dir

__all__ = ["main", "measure"]


def _per_call_us(pacer: Pacer, calls: int) -> float:
    started = time.perf_counter()
    for _ in range(calls // 2):
        pacer.reserve(16)
        pacer.answered(time.monotonic(), 16)
    return (time.perf_counter() - started) / (calls // 2 * 2) * 1e6


def measure(rounds: int = 5, calls: int = 20_000) -> dict[str, list[float]]:
    """Microseconds per call of each pace, one figure per round.

    Raises:
        ValueError: ``rounds`` or ``calls`` below 1 (2 for calls: one reservation and its outcome).
    """
    if rounds < 1 or calls < 2:
        raise ValueError(f"rounds must be >= 1 and calls >= 2, got {rounds} and {calls}")
    out: dict[str, list[float]] = {"process": [], "host": []}
    with tempfile.TemporaryDirectory(prefix="kvprobe-pace-cost-", dir=pace_dir()) as where:
        paces = {"process": Pacer(), "host": HostPacer(Path(where) / "pace.json")}
        for _ in range(rounds):
            for name, pacer in paces.items():
                out[name].append(_per_call_us(pacer, calls))
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.objstore.pace_cost", description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=20_000, help="calls per pace per round")
    args = parser.parse_args(argv)
    try:
        figures = measure(args.rounds, args.calls)
    except ValueError as exc:
        parser.error(str(exc))
    where, load = machine(), load_average()
    print(f"{where['cpu']}, {where['cores']} cores, Python {where['python']}, load {load[0] if load else 'unknown'}")
    print("| pace | us per call (median [min-max]) | over the process's |")
    print("|---|---|---|")
    base = statistics.median(figures["process"])
    for name, values in figures.items():
        med = statistics.median(values)
        print(f"| {name} | {med:.1f} [{min(values):.1f}-{max(values):.1f}] | {med / base:.0f}x |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
