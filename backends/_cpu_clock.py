"""Busy time of a thread or a process, read from Linux's scheduler statistics.

A ``schedstat`` file (``/proc/<pid>/schedstat``, ``/proc/self/task/<tid>/schedstat``)
holds the nanoseconds its thread or process has run and has waited in the
run queue.  Both count as *busy*: a computing call on a crowded machine is
still computing while it waits for a CPU.  ``ProcessBackend`` reads its
helpers' files; the threaded worker's CPU gate reads its caller threads'.
"""

from __future__ import annotations

__all__ = ["schedstat_busy_seconds"]


def schedstat_busy_seconds(path: str) -> float:
    """Run plus run-queue seconds from a Linux ``schedstat`` file (nanoseconds there).

    Raises:
        OSError: the file cannot be read (the thread or process has ended).
        ValueError: it is not a schedstat file.
        IndexError: it holds fewer than two fields.
    """
    with open(path, "rb") as stat:
        fields = stat.read().split()
    return (int(fields[0]) + int(fields[1])) / 1e9
