"""When the threaded worker may start a further group beside running calls.

Running groups at once pays when the calls *wait* (a remote store, a slow
disk, a frozen server): one slow group then holds back no other.  It does
not pay when the calls *compute*: calls on caller threads hold the GIL
together and the scheduler thread gets a fraction of it, and helper
processes that outnumber the cores take the scheduler's CPU share; the
batch is done no sooner, and the scheduler loses more time than the
overlap saves (``docs/performance.md``, "Starvation with concurrent
groups").  Nothing in a call's duration tells the two apart; the CPU it
wants does.

:class:`CpuGate` therefore lets a further group start beside running calls
only when they have been *busy* (running on a CPU or waiting in the run
queue for one: a computing call on a crowded machine still counts) less
than :data:`BUSY_SHARE` of the time each (a call that waits is busy almost
never), or
when the youngest of them has run ``hold_s``: a call that keeps a CPU busy
holds the others back by at most that, never by ``lookup_timeout_s``.  A
call's busy time is its caller thread's plus, for a backend with
``cpu_seconds_of(thread_id)`` such as ``ProcessBackend``, the helper process
serving it.  Busy time is counted from :data:`WARM_UP_S` after the running
calls last changed (a call just handed over is still waking its thread or
its helper) and judged once it spans :data:`JUDGE_S` or more: several GIL
switch intervals, because a computing call on a caller thread is not busy
while it waits for the GIL, which may last a whole interval.
``hold_s=0`` starts groups as soon as a slot is free.

The gate decides only *when* a group starts, never *whether*: every group
starts within ``hold_s`` of a slot being free, and the model already allows
groups to run and finish in any order.  Busy time is read from Linux's
``/proc/.../schedstat``; elsewhere the thread's CPU clock stands in (no run
queue wait), and where neither can be read a call counts as waiting, which
is the ungated behaviour.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Collection
from typing import Protocol

__all__ = [
    "BUSY_SHARE",
    "DEFAULT_HOLD_S",
    "JUDGE_S",
    "RECHECK_S",
    "WARM_UP_S",
    "BusyClock",
    "CpuGate",
    "GatedCall",
    "thread_busy_clock",
]

#: Seconds a thread (or process) has been busy so far; raises OSError once it has ended.
BusyClock = Callable[[], float]

#: After the running calls change, busy time counts from this much later.
WARM_UP_S = 0.002

#: The shortest span of busy time the gate judges: three GIL switch
#: intervals (5 ms each by default), so that a computing call that waited a
#: whole interval for the GIL is still seen computing.  With the warm-up,
#: a further group starts at the earliest about 17 ms after the previous one.
JUDGE_S = 3 * sys.getswitchinterval()

#: How often the gate looks again at calls judged busy.
RECHECK_S = 0.005

#: A call busy at least this share of the time is computing, not waiting.
#: Low, because a computing call on a caller thread is not busy while it
#: waits for the GIL (a blocking wait, as I/O is): NIXL POSIX calls beside a
#: scheduler thread that loops on lookups are busy about half the time,
#: calls that wait on I/O or a remote store almost never.
BUSY_SHARE = 0.25

#: How long, by default, calls that keep a CPU busy hold back a further group.
#: A 10,000-file NIXL POSIX group takes about 50-100 ms here, so fast
#: CPU-bound groups run one after another as they did before groups ran at
#: once, while a slow CPU-bound group delays the others by at most this.
DEFAULT_HOLD_S = 0.25


class GatedCall(Protocol):
    """What the gate reads of a running call."""

    @property
    def started(self) -> float: ...  # time.monotonic() when it was handed to its caller

    @property
    def thread_id(self) -> int: ...  # its caller thread's threading.get_ident()

    @property
    def clock(self) -> BusyClock | None: ...  # its caller thread's busy time, if readable


def schedstat_busy_seconds(path: str) -> float:
    """Run plus run-queue seconds from a Linux ``schedstat`` file (nanoseconds there).

    Raises:
        OSError: the file cannot be read (the thread or process has ended).
        ValueError: it is not a schedstat file.
    """
    with open(path, "rb") as stat:
        fields = stat.read().split()
    return (int(fields[0]) + int(fields[1])) / 1e9


def thread_busy_clock(thread: threading.Thread) -> BusyClock | None:
    """A clock of ``thread``'s busy seconds (started), or None where none can be read."""
    path = f"/proc/self/task/{thread.native_id}/schedstat"
    try:
        schedstat_busy_seconds(path)
    except (OSError, ValueError, IndexError):
        pass
    else:
        return lambda: schedstat_busy_seconds(path)
    try:
        assert thread.ident is not None
        clock = time.pthread_getcpuclockid(thread.ident)
        time.clock_gettime(clock)
    except (AttributeError, OSError):
        return None
    return lambda: time.clock_gettime(clock)


class CpuGate:
    """Decides, for the dispatcher, whether a further group may start now.

    Args:
        hold_s: the longest that calls keeping a CPU busy hold back a further
            group (0: never).
        backend_cpu: the backend's ``cpu_seconds_of(thread_id)`` (CPU used
            on behalf of that thread's current call outside it), or None.
    """

    def __init__(self, hold_s: float, backend_cpu: Callable[[int], float] | None = None) -> None:
        self.hold_s = hold_s
        self._backend_cpu = backend_cpu
        self._watched: tuple[tuple[int, float], ...] = ()  # the calls the sample is of
        self._judged = False  # whether busy time counts since _since (the warm-up is over)
        self._since = 0.0
        self._cpu = 0.0

    def wait_s(self, running: Collection[GatedCall], now: float) -> float:
        """0.0 if a further group may start now, else how long until it is worth asking again.

        Never raises: a CPU clock that cannot be read (its thread has just
        ended) counts as no CPU used.
        """
        if not running or self.hold_s <= 0:
            return 0.0
        held = self.hold_s - (now - max(call.started for call in running))
        if held <= 0:
            return 0.0
        watched = tuple((id(call), call.started) for call in running)  # an id alone may be reused
        if watched != self._watched:
            # Another set of calls: a warm-up, then a span of their own.
            self._watched, self._judged, self._since = watched, False, now
            return min(WARM_UP_S, held)
        elapsed = now - self._since
        if not self._judged:
            if elapsed < WARM_UP_S:
                return min(WARM_UP_S - elapsed, held)
            self._judged, self._since, self._cpu = True, now, self._cpu_of(running)
            return min(JUDGE_S, held)
        if elapsed < JUDGE_S:
            return min(JUDGE_S - elapsed, held)
        # Busy share since the warm-up, not since the last look: the longer
        # the calls run, the steadier the figure.
        share = (self._cpu_of(running) - self._cpu) / elapsed / len(running)
        if share < 0:
            # A clock went back: a call has just ended (its backend stopped
            # counting for it) and the set is about to change; judge that one.
            return min(RECHECK_S, held)
        return 0.0 if share < BUSY_SHARE else min(RECHECK_S, held)

    def _cpu_of(self, running: Collection[GatedCall]) -> float:
        total = 0.0
        for call in running:
            if call.clock is not None:
                try:
                    total += call.clock()
                except (OSError, ValueError, IndexError):
                    pass  # its thread has just ended
            if self._backend_cpu is not None:
                try:
                    total += self._backend_cpu(call.thread_id)
                except Exception:
                    pass  # a backend's gauge must not stop the dispatcher
        return total
