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
only when each of them either has been *busy* (running on a CPU or
waiting in the run queue for one: a computing call on a crowded machine
still counts) less than :data:`BUSY_SHARE` of the time (a call that waits is
busy almost never), or has itself run ``hold_s``; and in any case once the
group has been held back ``hold_s`` since its slot was free, so calls that
keep a CPU busy hold a group back by at most that, never by
``lookup_timeout_s``, and holds do not add up from one group to the next.
A call's busy time is its caller thread's plus, for a backend with
``cpu_seconds_of(thread_id)`` such as ``ProcessBackend``, the helper process
serving it.  Each call is judged on its own: its busy time counts from
:data:`WARM_UP_S` after the gate first sees it (a call just handed over is
still waking its thread or its helper), is read every :data:`RECHECK_S`,
and is judged once it spans :data:`JUDGE_S` or more: several GIL switch
intervals, because a computing call on a caller thread is not busy while it
waits for the GIL, which may last a whole interval.  A call that ends
before that is judged on the readings taken while it ran (if they span
:data:`WARM_UP_S` at least).  Groups started beside calls judged waiting
are taken to wait until judged themselves, so free slots fill at once
beside a slow waiting call; so are groups started alone after the last call
judged waited, so that calls shorter than the judging window, which never
run beside a judged call, still run together.  A group started alone with
nothing known, or beside a computing call, holds the others back until
judged.  ``hold_s=0`` starts groups as soon as a slot is free.

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

from kvprobe.backends.cpu_clock import schedstat_busy_seconds

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

#: A call's busy time counts from this long after the gate first sees it.
WARM_UP_S = 0.002

#: The shortest span of busy time the gate judges a running call on: five
#: GIL switch intervals (5 ms each by default), so that a computing call
#: that waited an interval or two for the GIL is still seen computing.  With
#: the warm-up, a group started alone with nothing known holds the others
#: back for about 27 ms at least, or until it ends (groups started beside it
#: once it is judged waiting do not wait).
JUDGE_S = 5 * sys.getswitchinterval()

#: How often the gate reads a call being judged, or judged busy.
RECHECK_S = 0.005

#: A call busy at least this share of the time is computing, not waiting.
#: Low, because a computing call on a caller thread is not busy while it
#: waits for the GIL (a blocking wait, as I/O is): NIXL POSIX calls beside a
#: scheduler thread that loops on lookups are busy about half the time,
#: calls that wait on I/O or a remote store almost never (a sleeping call,
#: about 1 %).
BUSY_SHARE = 0.2

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


class _Watch:
    """What the gate knows of one running call, from the readings it took of it."""

    __slots__ = (
        "busy_read",
        "busy_since",
        "call",
        "counting",
        "judged",
        "judged_waiting",
        "presumed",
        "read_at",
        "since",
    )

    def __init__(self, call: GatedCall, now: float, presumed: bool) -> None:
        self.call = call
        self.since = now  # when the gate first saw it, then when its busy time began to count
        self.busy_since = 0.0  # its busy seconds when they began to count
        self.read_at, self.busy_read = now, 0.0  # the latest reading (none yet: a span of 0)
        self.counting = False  # whether the warm-up is over
        self.presumed = presumed  # started beside calls known to wait: taken to wait until judged
        self.judged = False
        self.judged_waiting = False

    @property
    def waiting(self) -> bool:
        """Judged waiting, or presumed so until judged."""
        return self.presumed or self.judged_waiting

    def share(self) -> float:
        """Its busy share over the span its readings cover (0.0 for no span)."""
        span = self.read_at - self.since
        return (self.busy_read - self.busy_since) / span if span > 0 else 0.0


class CpuGate:
    """Decides, for the dispatcher, whether a further group may start now.

    A further group may start when every running call either has run
    ``hold_s``, or has been judged waiting, or is still being judged but was
    presumed to wait (started beside calls known to wait, or alone when the
    last call judged waited), or when groups have been held back ``hold_s``
    already (every group starts within ``hold_s`` of its slot being free).

    The dispatcher asks :meth:`wait_s` only while a group is pending and a
    slot is free, and calls :meth:`no_demand` when that stops being so: the
    hold a group waits out counts from the first question.

    Args:
        hold_s: the longest that calls keeping a CPU busy hold back a further
            group (0: never).
        backend_cpu: the backend's ``cpu_seconds_of(thread_id)`` (busy time
            spent on that thread's current call outside it), or None.
    """

    def __init__(self, hold_s: float, backend_cpu: Callable[[int], float] | None = None) -> None:
        self.hold_s = hold_s
        self._backend_cpu = backend_cpu
        self._watches: dict[tuple[int, float], _Watch] = {}  # by (id, started): an id alone may be reused
        # The next group admitted starts beside calls that all wait (or alone, after ones that did).
        self._beside_waiting = False
        self._calls_wait = False  # the last call judged waited: a group started alone is presumed to wait
        self._demand_since: float | None = None  # the first question since a group has been pending with a slot free

    def wait_s(self, running: Collection[GatedCall], now: float) -> float:
        """0.0 if a further group may start now, else how long until it is worth asking again.

        Never raises: a busy clock that cannot be read (its thread has just
        ended) counts as no time busy.
        """
        if self._demand_since is None:
            self._demand_since = now
        if self.hold_s <= 0:
            return 0.0
        watches: dict[tuple[int, float], _Watch] = {}
        for call in running:
            key = (id(call), call.started)
            seen = self._watches.pop(key, None)
            watches[key] = seen if seen is not None else _Watch(call, now, self._beside_waiting)
        for ended in self._watches.values():
            self._judge_ended(ended)
        self._watches = watches
        if not running:
            self._beside_waiting = self._calls_wait
            return 0.0
        wait = 0.0
        all_waiting = True
        for watch in watches.values():
            look_again = self._judge(watch, now)
            all_waiting = all_waiting and watch.waiting
            held = self.hold_s - (now - watch.call.started)
            if not watch.waiting and held > 0:
                wait = max(wait, min(look_again, held))
        if wait > 0:
            bound = self.hold_s - (now - self._demand_since)
            wait = 0.0 if bound <= 0 else min(wait, bound)
        # Only calls known (or presumed) to wait let further groups be
        # presumed waiting; a group let in by the bound, or beside a
        # computing call past hold_s, is judged on its own.
        self._beside_waiting = wait == 0.0 and all_waiting
        return wait

    def no_demand(self) -> None:
        """No group is pending, or no slot is free: the next question starts a new hold."""
        self._demand_since = None

    def _judge(self, watch: _Watch, now: float) -> float:
        """Read ``watch``'s call and judge it (a presumption ends once it is judged); when to look again."""
        call = watch.call
        elapsed = now - watch.since
        if not watch.counting:
            if elapsed >= WARM_UP_S:
                watch.counting, watch.since = True, now
                watch.read_at, watch.busy_since = now, self._busy(call)
                watch.busy_read = watch.busy_since
                return min(JUDGE_S, RECHECK_S)
            return WARM_UP_S - elapsed
        watch.read_at, watch.busy_read = now, self._busy(call)
        if elapsed < JUDGE_S:
            # Read every RECHECK_S meanwhile: a call that ends first is
            # judged on the readings taken while it ran.
            return min(JUDGE_S - elapsed, RECHECK_S)
        # Busy share since the warm-up, not since the last look: the longer
        # the call runs, the steadier the figure.  A negative share means a
        # clock went back (the backend stopped counting: the call has just
        # ended and is about to leave the running set): not waiting.
        share = watch.share()
        watch.presumed = False
        watch.judged = True
        watch.judged_waiting = self._calls_wait = 0 <= share < BUSY_SHARE
        return RECHECK_S

    def _judge_ended(self, watch: _Watch) -> None:
        """A call that ended before it was judged: judge it on the readings taken while it ran.

        Its readings must span :data:`WARM_UP_S` at least; a shorter span
        tells nothing, and what the gate knew stays.  No reading is taken
        now: the call's thread is idle and the backend has stopped counting.
        """
        if watch.judged or watch.read_at - watch.since < WARM_UP_S:
            return
        share = watch.share()
        self._calls_wait = 0 <= share < BUSY_SHARE

    def _busy(self, call: GatedCall) -> float:
        total = 0.0
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
