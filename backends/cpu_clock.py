"""Busy time of a thread or a process, read from Linux's scheduler statistics.

A ``schedstat`` file (``/proc/<pid>/task/<tid>/schedstat``,
``/proc/self/task/<tid>/schedstat``) holds the nanoseconds its thread has
run and has waited in the run queue.  Both count as *busy*: a computing call
on a crowded machine is still computing while it waits for a CPU.
``/proc/<pid>/schedstat`` is the process's main thread alone, so a process
is read thread by thread.  ``ProcessBackend`` reads its helpers' threads;
the threaded worker's CPU gate reads its caller threads'.
"""

from __future__ import annotations

import os

__all__ = ["process_threads_busy_seconds", "schedstat_busy_seconds"]


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


def process_threads_busy_seconds(pid: int) -> float:
    """Run plus run-queue seconds of every live thread of process ``pid``, summed.

    A tier may compute on threads of its own while the thread that called
    it waits; they all count.  A thread that has ended is no longer listed,
    so its time drops out of the sum (a later reading can be lower).

    Raises:
        OSError: the process's threads cannot be listed (it has ended, or
            there is no ``/proc``).
    """
    task_dir = f"/proc/{pid}/task"
    total = 0.0
    for tid in os.listdir(task_dir):
        try:
            total += schedstat_busy_seconds(f"{task_dir}/{tid}/schedstat")
        except (OSError, ValueError, IndexError):
            continue  # the thread ended between the listing and the read, or has no schedstat
    return total
