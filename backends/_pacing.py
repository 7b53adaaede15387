"""The pace's driver: a :class:`PaceCore` behind a lock, on ``time.monotonic``, shared per store.

Why.  Every group, backend and manager of a process that reads the same
store must send at one rate, or each would find the store's limit on its
own (:func:`shared_pacer`).  The rules live in
:mod:`kvprobe.backends._pace_core`; this module adds what a process needs
around them: a lock, the clock, a bounded trace of the pace's decisions,
fork safety (a child forked while another thread held the lock gets a new
lock and, if a change was half done, a fresh pace), and the parser of the
store's ``Retry-After``.
"""

from __future__ import annotations

import contextlib
import email.utils
import math
import os
import sys
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Iterator
from typing import TypeVar

from kvprobe.backends._pace_core import PaceCore, PaceStats, check_positive

__all__ = [
    "TRACE_LEN",
    "PaceCore",
    "PaceStats",
    "Pacer",
    "check_positive",
    "get_or_create",
    "parse_retry_after",
    "shared_pacer",
]

K = TypeVar("K")
P = TypeVar("P", bound="Pacer")


def parse_retry_after(value: str | None, now_epoch_s: float | None = None) -> float | None:
    """Seconds to wait from an HTTP ``Retry-After`` value (delta-seconds or an HTTP date).

    None when the value is absent or malformed; otherwise a finite number of
    seconds, 0 or more (a delta too large for a float is the largest float:
    the pace caps every hold anyway).  Never raises: the value is whatever a
    server sent.
    """
    if not value:
        return None
    text = value.strip()
    # HTTP's digits only: str.isdigit alone takes superscripts and Arabic-Indic digits.
    if text.isascii() and text.isdigit():
        return min(float(text), sys.float_info.max)
    try:
        when = email.utils.parsedate_to_datetime(text)
        now = time.time() if now_epoch_s is None else now_epoch_s
        # A zone may carry a date past datetime's range: timestamp() then overflows.
        return max(0.0, when.timestamp() - now)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None


#: How many of its latest decisions a :class:`Pacer` keeps (:meth:`Pacer.trace`).
TRACE_LEN = 64


class Pacer:
    """A :class:`PaceCore` behind a lock, on ``time.monotonic``: safe to share between threads.

    Reservations are absolute ``time.monotonic()`` values.  The pacer keeps
    the last ``TRACE_LEN`` decisions its calls made (:meth:`trace`).

    Args:
        core: the policy, created at ``clock()`` (default: :class:`PaceCore`'s defaults).
        clock: the pacer's time in seconds (tests pass a virtual clock, so
            that which window judges which outcome does not depend on load).
    """

    def __init__(self, core: PaceCore | None = None, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._lock = threading.Lock()
        self._clock = clock
        self._core = core if core is not None else PaceCore(clock())
        self.fork_resets = 0  # forks that left a call of another thread half done: the pace started afresh
        self._trace: deque[dict[str, float | str | None]] = deque(maxlen=TRACE_LEN)
        _LIVE.add(self)

    def _after_fork_in_child(self, was_held: bool) -> None:
        """In a forked child: a new lock, and a fresh pace if a thread of the parent was changing it.

        Only the forking thread goes on in the child: a lock another thread
        held would never be released there, and that thread's change of the
        pace may be half done.
        """
        self._lock = threading.Lock()
        if was_held:
            self._core = PaceCore(self._clock())
            self.fork_resets += 1

    @contextlib.contextmanager
    def _held(self, *, changes: bool = True) -> Iterator[PaceCore]:
        """The core, held for one call (``changes``: the call may change it; a pace kept elsewhere stores it back)."""
        with self._lock:
            yield self._core

    def reserve(self, heads: int, not_after: float = math.inf) -> float | None:
        """When ``heads`` HEADs may start; None (nothing reserved) when not by ``not_after``."""
        with self._held() as core:
            return core.reserve(self._clock(), heads, not_after)

    def release(self, heads: int) -> None:
        """Return an unused reservation."""
        with self._held() as core:
            core.release(self._clock(), heads)

    def answered(self, sent_at: float, heads: int) -> None:
        """A query sent at ``sent_at`` answered."""
        with self._held() as core:
            now = self._clock()
            before = _decisions(core, now)
            core.answered(now, sent_at, heads)
            self._note(core, before, now)

    def failed(self, sent_at: float, heads: int, retry_after_s: float | None = None) -> None:
        """A query sent at ``sent_at`` failed (not by a timeout)."""
        with self._held() as core:
            now = self._clock()
            before = _decisions(core, now)
            core.failed(now, sent_at, heads, retry_after_s)
            self._note(core, before, now)

    def _note(self, core: PaceCore, before: tuple[int, int, int, float | None], now: float) -> None:
        """Trace what the call just made of the pace: read from its counters, as they moved."""
        decreases, undone, holds, rate_before = before
        stats = core.stats
        for decision, moved in (
            ("decrease", stats.decreases - decreases),
            ("undone", stats.undone - undone),
            ("hold", stats.holds - holds),
        ):
            if moved > 0:
                event: dict[str, float | str | None] = {
                    "at": now,
                    "decision": decision,
                    "rate_before": rate_before,
                    "rate_after": core.rate(now),
                }
                if decision == "hold":
                    event["hold_s"] = core.hold_until - now
                self._trace.append(event)

    def trace(self) -> list[dict[str, float | str | None]]:
        """The latest decisions of this process's calls on the pace, oldest first (at most ``TRACE_LEN``).

        Each is ``{"at": time.monotonic(), "decision": "decrease" | "undone" |
        "hold", "rate_before", "rate_after"}`` (HEAD/s, None while unpaced),
        and for a hold (``Retry-After``) ``hold_s``, how long it holds.
        """
        with self._lock:
            return list(self._trace)

    def snapshot(self) -> dict[str, float | int | None]:
        """``rate`` (HEAD/s, None while unpaced), ``w_max``, ``measured``, ``served``, the :class:`PaceStats` counters.

        ``measured``: the HEADs per second whose outcome (answered or failed)
        came back; ``served``: those the store answered; both smoothed over
        the windows judged.
        """
        with self._held(changes=False) as core:
            stats = core.stats
            return {
                "rate": core.rate(self._clock()),
                "w_max": core.w_max if core.paced else None,
                "measured": core.measured,
                "served": core.served,
                "decreases": stats.decreases,
                "undone": stats.undone,
                "holds": stats.holds,
                "refused": stats.refused,
                "answered_heads": stats.answered_heads,
                "failed_heads": stats.failed_heads,
            }


def _decisions(core: PaceCore, now: float) -> tuple[int, int, int, float | None]:
    """The counters of the pace's decisions, and its rate, before a call (:meth:`Pacer._note`)."""
    stats = core.stats
    return stats.decreases, stats.undone, stats.holds, core.rate(now)


_SHARED: weakref.WeakValueDictionary[tuple[str, str, str], Pacer] = weakref.WeakValueDictionary()
_SHARED_LOCK = threading.Lock()
_LIVE: weakref.WeakSet[Pacer] = weakref.WeakSet()  # every pacer of the process, for a forked child


def _after_fork_in_child() -> None:
    global _SHARED_LOCK
    _SHARED_LOCK = threading.Lock()
    for pacer in list(_LIVE):
        pacer._after_fork_in_child(pacer._lock.locked())


os.register_at_fork(after_in_child=_after_fork_in_child)


def shared_pacer(endpoint: str, bucket: str, prefix: str) -> Pacer:
    """The process's pacer for one store: the same object for the same (endpoint, bucket, prefix).

    It lives while a backend holds it; the next one after that starts unpaced.
    """
    return get_or_create(_SHARED, _SHARED_LOCK, (endpoint, bucket, prefix), Pacer)


def get_or_create(
    registry: weakref.WeakValueDictionary[K, P], lock: threading.Lock, key: K, make: Callable[[], P]
) -> P:
    """The pacer ``registry`` holds for ``key``, made by ``make`` (under ``lock``) if none is alive."""
    with lock:
        pacer = registry.get(key)
        if pacer is None:
            pacer = registry[key] = make()
        return pacer
