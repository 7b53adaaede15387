"""Pacing HEADs to an object store: one rate per (endpoint, bucket, prefix), adjusted by its failures.

Why.  A prefix of an S3 bucket serves a bounded request rate (5,500 GET/HEAD
per second per partition; a new prefix is one partition) and answers
``503 SlowDown`` beyond it; Ceph RGW's limits answer 503 too.  Every engine
that retries at once only adds load, and every group then waits out its
deadline.  So the object backend sends its HEADs at a rate that a client-side
limiter adjusts to the store's answers, shared by every group, every
backend and every manager of the process that reads the same store
(:func:`shared_pacer`), and a group whose HEADs cannot go out before its
deadline is told so at once (:meth:`PaceCore.reserve` returns None) instead of
waiting for it.

Theory of operation.  :class:`PaceCore` is pure: no clock, no lock, no I/O;
each method takes ``now`` (seconds on the caller's monotonic clock), so it is
tested, and simulated, without sleeping.  :class:`Pacer` is the thin driver:
a lock and ``time.monotonic`` around one core.

* **Unpaced until the store pushes back.**  Until the first congestion
  signal :meth:`PaceCore.reserve` answers "now" for everything: a store that
  never throttles costs nothing.
* **Signals.**  A query that failed for any cause except a timeout is a
  congestion signal (a ``503`` on a HEAD counts whether or not it has a
  body: a HEAD's never has one, which is why botocore's adaptive mode never
  paces on HEADs; NIXL reports a 503, a 500 and a reset alike, so all count).
  Outcomes are judged per **window** (at least ``window_heads`` HEADs over
  at least ``window_min_s``, or, without a failure, ``window_max_s``
  whatever the HEADs: at a low rate 64 HEADs take minutes, and each window
  may at most double the rate, so the way back from the floor took about
  four minutes), counting only queries sent after the window
  opened: a failure of a query sent before the last decrease says nothing
  about the new rate (TCP's one decrease per round trip); a pause in the
  demand opens a new window (idle time is not a rate the store imposed).
* **CUBIC.**  A window with failures sets ``w_max`` to the rate actually
  achieved (but at most ``1 / beta`` times the HEADs per second the store
  answered, so that far over the store's capacity one decrease lands near
  it) and the rate to ``beta * w_max``, held there until the next window
  has checked the decrease (a few failures in that window, fewer than
  ``1 - beta`` of its HEADs, are the store still recovering from the rate
  that was cut, and do not step it down again).  Except when the demand,
  not the pace, set the window's sends and the store failed fewer than
  ``1 - beta`` of its HEADs: then what was sent measures a moment's demand, not the store, and
  ``w_max`` is the rate the pace had (or, from unpaced, the most HEADs per
  second a window served without a failure in the last ``KEPT_UP_S``
  seconds, if more than was sent): one step down, not down to the demand.
  Then the rate follows ``w_max + c * (t - K)**3`` with
  ``K = cbrt(w_max * (1 - beta) / c)``: back at ``w_max`` after ``K``
  seconds, flat near it, then growing fast.  The constants are botocore's
  adaptive mode's (``c = 0.4``, ``beta = 0.7``, a floor of ``0.5``
  requests/s), and the rate never exceeds twice the rate measured (nor
  ``w_max``, whichever is higher), so an idle process does not grow a rate
  it never used.  Why CUBIC rather than AIMD: its growth depends on the time
  since the last decrease, not on how many requests a process sent, so
  engines with different loads grow alike (AIMD per answer favours the
  busiest); it returns to the last good rate in ``K`` seconds whatever the
  scale (an additive step fitted to 5,500 HEAD/s is far too slow at 50); and
  it probes fast far above it, where a split partition's doubled capacity is.
* **A decrease must help.**  A store that fails a fixed fraction of
  requests whatever the rate (a fault, or a gateway's noise) would drive any
  loss-based limiter to its floor (botocore's adaptive mode would send 0.5
  requests/s under 20 % random 503s).  So the windows after a decrease check
  it, the rate held meanwhile.  It helped when the failures per HEAD fell
  (halved, and by more than chance: :func:`fell`).  It is not tested yet
  while the sends have not come down to it (the pace bound them, but the
  HEADs held for the lower rate and its burst kept them up) or the demand
  stayed below it (the client's own concurrency set the sends): held, not
  stepped down again, for up to ``UNTESTED_WINDOWS`` windows.  It did not
  help when the pace bound the sends, they came down, and the HEADs the
  store answered per second fell with them (below ``(1 + beta) / 2`` of
  before, counting the HEADs of failed queries it did answer) while the
  failures per HEAD did not: a store at its capacity keeps answering as
  many HEADs per second at the lower rate, or stops failing.  Seen once,
  the rate steps down once more (a decrease that did not reach the capacity
  is not noise); seen twice, every decrease since the store last kept up (a
  window without failures) is undone, back to unpaced if it was, and the
  next decrease waits ``holdoff`` windows (1, 2, 4, ... up to
  ``holdoff_max`` while decreases keep not helping).
* **Noise.**  The share of HEADs that kept failing at the lower rate (if at
  most ``1 - beta``: a larger one is more likely a decrease that fell short)
  is the store's **noise**: a window failing no more than
  ``2 * noise + NOISE_MARGIN`` is not a congestion signal, and the rate is
  held through it; the retries, not a lower rate, answer its keys.  The
  noise decays as windows fail less.  So under a flaky gateway's 5 % or
  20 % the pace tries one decrease, sees it not help, and stays at the
  store's rate; a store at its limit with such noise is still paced down
  once its failures exceed the limit.  A window in which the store
  answered nothing (an outage) decreases nothing: a store that is down is
  not congested.
* **Retry-After** (seconds or an HTTP date, as the store sends it) holds
  every reservation until then (at most ``max_hold_s``).
* **Reservations** follow GCRA (a virtual-time token bucket): ``n`` HEADs
  may start at ``max(now, tat - burst_s)`` and push ``tat`` on by
  ``n / rate``; a reservation that could not start by ``not_after`` is
  refused (the caller sheds those keys) and costs nothing.
"""

from __future__ import annotations

import contextlib
import dataclasses
import email.utils
import math
import os
import sys
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

from kvprobe.spec.option_values import as_float

__all__ = ["TRACE_LEN", "PaceCore", "PaceStats", "Pacer", "get_or_create", "parse_retry_after", "shared_pacer"]

K = TypeVar("K")
P = TypeVar("P", bound="Pacer")


@dataclass
class PaceStats:
    """What a pacer did: ``decreases`` of its rate, of which ``undone`` did not help, and ``holds`` (Retry-After)."""

    decreases: int = 0
    undone: int = 0
    holds: int = 0
    refused: int = 0  # reservations refused: they could not start before the caller's deadline


@dataclass
class _Window:
    start: float
    first_sent: float = math.inf  # the earliest send of a query counted (idle time before it is not the window's)
    last_sent: float = -math.inf
    last_heads: int = 0  # HEADs of the query sent last
    queries: int = 0
    failures: int = 0  # failed queries (congestion signals)
    answered_heads: int = 0  # HEADs of the queries that answered
    heads: int = 0  # HEADs of the queries counted
    binding: bool = False  # a reservation had to wait: the rate, not the demand, was the limit

    def add(self, sent_at: float, heads: int, failed: bool) -> None:
        if sent_at >= self.start:  # sent before the window opened: judged by an older rate
            self.first_sent = min(self.first_sent, sent_at)
            if sent_at >= self.last_sent:
                self.last_sent, self.last_heads = sent_at, heads
            self.queries += 1
            self.failures += failed
            self.heads += heads
            self.answered_heads += 0 if failed else heads

    def send_rate(self, now: float) -> float:
        """HEADs sent per second, over the sends counted (the last one's HEADs went out at its end)."""
        span = self.last_sent - self.first_sent
        if span > 0 and self.heads > self.last_heads:
            return (self.heads - self.last_heads) / span
        return self.heads / max(now - self.first_sent, 1e-3)

    def failed_per_head(self) -> float:
        """The HEADs' failure probability that explains the failed queries (queries of the mean size)."""
        if self.failures == self.queries:
            return 1.0
        mean_size = self.heads / self.queries
        return float(1.0 - (1.0 - self.failures / self.queries) ** (1.0 / mean_size))


class PaceCore:
    """A HEAD rate adjusted by the store's answers (CUBIC, with each decrease checked); pure, clock injected.

    Args:
        now: the creation time on the caller's clock.
        c, beta, floor: CUBIC's scale (HEAD/s per s**3), its decrease factor,
            and the lowest rate (HEAD/s).
        burst_s: seconds of the rate that may go out at once.
        window_heads, window_min_s: a window is judged once it has this
            many HEADs' outcomes, half of them answered, over at least
            ``window_min_s``.
        window_max_s: a window without a failure is judged after this
            long whatever its HEADs (at least one answered).
        idle_s: a pause in reservations longer than this (or than two
            reservations' worth of the rate) starts a new window: idle time
            is not a rate the store imposed.
        holdoff_max: most windows a decrease waits after decreases that did not help.
        max_hold_s: the longest Retry-After honoured.
        start_rate: None: unpaced until the store pushes back; a rate
            (HEAD/s): paced from the start, as just after a decrease to it
            (a store whose limit is known).

    Raises:
        ValueError: a parameter out of range (each must be positive and finite;
            ``beta`` in (0, 1)).
    """

    # Seconds a window the store served without a failure anchors a decrease
    # from unpaced (a store's capacity changes slowly; a quiet moment's demand
    # does not measure it).
    KEPT_UP_S = 10.0

    def __init__(
        self,
        now: float,
        *,
        c: float = 0.4,
        beta: float = 0.7,
        floor: float = 0.5,
        burst_s: float = 0.1,
        window_heads: int = 64,
        window_min_s: float = 0.25,
        window_max_s: float = 1.0,
        idle_s: float = 0.5,
        holdoff_max: int = 8,
        max_hold_s: float = 30.0,
        start_rate: float | None = None,
    ) -> None:
        for name, value in (("c", c), ("floor", floor), ("burst_s", burst_s), ("window_min_s", window_min_s)):
            check_positive(name, value)
        check_positive("idle_s", idle_s)
        check_positive("window_max_s", window_max_s)
        check_positive("max_hold_s", max_hold_s)
        if not 0.0 < beta < 1.0:
            raise ValueError(f"beta must be in (0, 1), got {beta!r}")
        for name, count in (("window_heads", window_heads), ("holdoff_max", holdoff_max)):
            if isinstance(count, bool) or not isinstance(count, int) or count < 1:
                raise ValueError(f"{name} must be a positive int, got {count!r}")
        self.c, self.beta, self.floor, self.burst_s = c, beta, floor, burst_s
        self.window_heads, self.window_min_s, self.idle_s = window_heads, window_min_s, idle_s
        self.holdoff_max, self.max_hold_s = holdoff_max, max_hold_s
        self.window_max_s = window_max_s
        self.stats = PaceStats()
        self.paced = False  # False until the first decrease: reservations start at once
        self.w_max = 0.0  # the rate at the last decrease (HEAD/s)
        self.t_decrease = now  # CUBIC's epoch: the rate is beta * w_max here
        self.k = 0.0
        self.measured = 0.0  # HEADs with an outcome per second, smoothed over windows
        # The last window judged had no failure and its reservations waited:
        # the demand uses all the rate, which then grows as CUBIC says, not
        # capped at twice what was measured (that cap keeps an idle
        # process's rate down; at a low rate it made the way back from the
        # floor one doubling per window, minutes).
        self.demand_above = False
        self.tat = now  # GCRA's theoretical arrival time
        self.hold_until = -math.inf  # Retry-After
        self._window = _Window(now)
        self._last_reserved = (now, 0)  # when, and how many HEADs
        # (served/s, failed per HEAD, sent/s) in the window that decided the last decrease
        self._verify: tuple[float, float, float] | None = None
        self._unsettled = 0  # windows after the last decrease whose sends had not come down to it yet
        # The rate before the first of the decreases since the store last kept
        # up (None: unpaced then), and whether there were any.
        self._top: float | None = None
        self._decreasing = False
        self._doubted = False  # the last window judged the last decrease useless
        # Failures per HEAD a decrease showed not to come from the rate (a
        # flaky gateway's share): windows failing no more are not signals.
        self.noise = 0.0
        self._holdoff = 1  # windows the next undone decrease makes later ones wait
        self._holdoff_left = 0
        # The most HEADs per second a window served without a failure, and
        # when (the store kept up with that much: an anchor for a decrease
        # from unpaced that a quiet moment's demand would otherwise set).
        self._kept_up: tuple[float, float] = (-math.inf, 0.0)
        if start_rate is not None:
            check_positive("start_rate", start_rate)
            self._set_epoch(start_rate / beta, now)
            self.paced = True

    # --- its state, for a pace kept outside the process ---------------------------

    def state(self) -> dict[str, Any]:
        """Every field of the pace as JSON-ready values (:meth:`from_state` builds it back)."""
        state = dict(vars(self))
        state["stats"] = dataclasses.asdict(self.stats)
        state["_window"] = dataclasses.asdict(self._window)
        return state

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> PaceCore:
        """The pace :meth:`state` described (its tuples may come back as lists, as JSON gives them).

        Raises:
            ValueError: ``state`` lacks a field, has one more, or one of the wrong kind.
        """
        expected = set(vars(cls(0.0)))
        if set(state) != expected:
            raise ValueError(f"not a pace's state: the fields {sorted(set(state) ^ expected)} differ")
        core = cls.__new__(cls)
        try:
            for name, value in state.items():
                if name == "stats":
                    value = PaceStats(**value)
                elif name == "_window":
                    value = _Window(**value)
                elif name in ("_last_reserved", "_verify", "_kept_up") and value is not None:
                    value = tuple(value)
                setattr(core, name, value)
        except TypeError as exc:
            raise ValueError(f"not a pace's state: {exc}") from exc
        return core

    # --- the rate ---------------------------------------------------------------

    def rate(self, now: float) -> float | None:
        """HEADs per second allowed at ``now``, or None while unpaced."""
        if not self.paced:
            return None
        if self._verify is not None:
            # Held while the window after a decrease checks it (a small
            # w_max would otherwise regrow within that window).
            return max(self.floor, self.beta * self.w_max)
        t = now - self.t_decrease - self.k
        cubic = self.w_max + self.c * t * t * t
        last_at, last_heads = self._last_reserved
        if self.demand_above and now - last_at <= max(
            self.window_max_s, 2 * last_heads / max(self.floor, self.measured)
        ):
            return max(self.floor, cubic)  # the demand is still there: not an idle process
        return max(self.floor, min(cubic, max(2.0 * self.measured, self.w_max)))

    def reserve(self, now: float, heads: int, not_after: float = math.inf) -> float | None:
        """When ``heads`` HEADs may start (``>= now``), reserving them.

        None (nothing reserved, counted ``refused``) when that is after ``not_after``.
        """
        start = max(now, self.hold_until)
        rate = self.rate(now)
        last_at, last_heads = self._last_reserved
        if now - last_at > max(self.idle_s, 2 * last_heads / rate if rate else 0.0):
            self._window = _Window(now)  # the demand paused: measure from here
        self._last_reserved = (now, heads)
        if rate is not None:
            start = max(start, self.tat - self.burst_s)
        if start > not_after:
            self.stats.refused += 1
            return None
        if rate is not None:
            self.tat = max(self.tat, start) + heads / rate
        if start > now:
            self._window.binding = True
        return start

    def release(self, now: float, heads: int) -> None:
        """Give back a reservation of ``heads`` that will not be used (it started no query)."""
        rate = self.rate(now)
        if rate is not None:
            self.tat = max(now, self.tat - heads / rate)

    # --- outcomes ---------------------------------------------------------------

    def answered(self, now: float, sent_at: float, heads: int) -> None:
        """A query of ``heads`` HEADs sent at ``sent_at`` answered (stored or not, every key)."""
        self._window.add(sent_at, heads, failed=False)
        self._maybe_judge(now)

    def failed(self, now: float, sent_at: float, heads: int, retry_after_s: float | None = None) -> None:
        """A query of ``heads`` HEADs sent at ``sent_at`` failed (not by a timeout).

        ``retry_after_s``: the store's ``Retry-After``, if it sent one.
        """
        if retry_after_s is not None and retry_after_s > 0:
            until = now + min(retry_after_s, self.max_hold_s)
            if until > self.hold_until:
                self.hold_until = until
                self.stats.holds += 1
        self._window.add(sent_at, heads, failed=True)
        self._maybe_judge(now)

    def _maybe_judge(self, now: float) -> None:
        window = self._window
        if window.queries == 0:
            return
        span = now - window.first_sent
        full = window.heads >= self.window_heads and window.answered_heads >= self.window_heads // 2
        # What the store served is measured, not guessed: half the HEADs
        # answered, or a long quiet window (a low rate's way back up).
        quiet = not window.failures and span >= self.window_max_s
        if not (full or quiet) or span < self.window_min_s:
            return
        sent = window.send_rate(now)
        failed = window.failed_per_head()
        # HEADs the store answered per second, whether or not NIXL kept the
        # answers: at its capacity this stays when we slow down.
        served = sent * (1.0 - failed)
        # The rate this window was sent under (held while a decrease is
        # checked), before its own sends raise the cap on regrowth: a
        # decrease steps down from it, never from a rate it never had.
        held = self.rate(now)
        self.measured = 0.8 * sent + 0.2 * self.measured
        self.demand_above = window.binding and not window.failures
        self._window = _Window(now)
        verify, self._verify = self._verify, None
        if not window.failures:
            at, most = self._kept_up
            if served >= most or now - at > self.KEPT_UP_S:
                self._kept_up = (now, served)
            self._decreasing = False  # the store is keeping up: the decreases so far stand
            self._holdoff = 1
        elif verify is not None and self._decreasing and not fell(verify[1], failed, window.heads):
            # The failures per HEAD did not fall at the lower rate.  Either
            # the pace held the sends (binding) and the store answered fewer
            # HEADs per second with them (a store at its capacity answers as
            # many), or the demand stayed below the lower rate (the
            # client's concurrency, not the pace, set the sends): in both
            # cases the rate is not what the store fails.
            served_before, _, sent_before = verify
            if window.binding:
                untested = sent >= (1 + self.beta) / 2 * sent_before
            else:
                untested = held is not None and sent < held
            if untested and self._unsettled < UNTESTED_WINDOWS:
                # The sends have not come down to the lower rate yet (the
                # HEADs held for it, its burst), or the demand was below it:
                # the decrease is not tested yet.  Held, not stepped down again.
                self._unsettled += 1
                self._verify = verify
                return
            if window.binding and served < (1 + self.beta) / 2 * served_before:
                # Twice in a row before undoing, the second time one step
                # lower still: one window's noise at a store at its capacity
                # must not send the pace back up, and a decrease that did
                # not reach the capacity (what a store far over it served is
                # overestimated) must not be taken for noise.
                if self._doubted:
                    self._undo(now, (verify[1] + failed) / 2)
                    return
                self._doubted = True
                self._verify = verify  # judged against the same window as before
                self.w_max *= self.beta
                self.tat = max(self.tat, now + self.burst_s)
                self.stats.decreases += 1
                return
        self._doubted = False
        if verify is not None:
            self.t_decrease = now  # kept: CUBIC's regrowth starts from here
        noise = self.noise
        if failed <= self.noise_limit():
            # What a decrease showed not to come from the rate: a window with
            # no more than that is the store as it is, not a congestion
            # signal.  Forgotten as windows fail less (never raised here: a
            # store at its capacity failing just under the limit must not
            # lift it).
            self.noise = min(noise, 0.9 * noise + 0.1 * failed)
        if self._holdoff_left:
            self._holdoff_left -= 1
        elif (
            window.failures
            and failed < 1.0
            and failed > self.noise_limit()
            and (verify is None or failed >= 1 - self.beta)
        ):
            # A few failures in the window right after a decrease do not
            # step down again: they are the store still recovering from the
            # window that was cut (a drained token bucket refills at its
            # rate, not ours), and the step down has not been seen yet.  On
            # Ceph RGW such back-to-back steps took a host's pace from 578 to
            # 198 HEAD/s within a second (0.7 cubed), under the demand that
            # followed.  The next window judges the new rate; heavier
            # failures still cut at once.
            self._decrease(now, served, failed, sent, held)

    def _decrease(self, now: float, served: float, failed: float, achieved: float, current: float | None) -> None:
        # What a few failures step down from: the pace's rate or, from
        # unpaced, the most the store served without a failure of late.
        step_from = current
        if step_from is None and now - self._kept_up[0] <= self.KEPT_UP_S:
            step_from = self._kept_up[1]
        if step_from is not None and achieved < step_from and failed < 1 - self.beta:
            # The demand, not the pace, set this window's sends (it sent less
            # than that), and the store served most of them.  Then
            # what was sent measures that moment's demand, not the store: a
            # decrease to it would hold the pace below the next moment's
            # demand for CUBIC's K seconds (on Ceph RGW: a host's pace from
            # 378 to ~130 HEAD/s, long walks waiting out their deadlines).
            # The few failures say only that the rate, and the bursts it
            # allows, are too high: one step down.
            base = max(self.floor, step_from)
        else:
            base = achieved if current is None else min(current, achieved)
            # Never down to less than beta times what we sent, but never above
            # what the store served either: far over its capacity one decrease
            # lands near it instead of one per window.
            base = max(self.floor, min(base, served / self.beta))
        if not self._decreasing:
            self._decreasing, self._top = True, current
        self._verify = (served, failed, achieved)
        self._unsettled = 0
        self._set_epoch(base, now)
        # No burst credit (the next window measures the new rate), and the
        # HEADs already granted keep their time: a later start than theirs.
        self.tat = max(self.tat, now + self.burst_s)
        self.paced = True
        self.stats.decreases += 1

    def noise_limit(self) -> float:
        """The failures per HEAD a window may have without being a congestion signal (0 until a decrease was undone)."""
        return 2.0 * self.noise + NOISE_MARGIN if self.noise else 0.0

    def _undo(self, now: float, failed: float) -> None:
        # Back to before the decreases that did not help: unpaced if it was,
        # else that rate as if K seconds had passed since (CUBIC's plateau).
        # The share of HEADs that kept failing at the lower rate is noise,
        # if it is a share a gateway's noise has: above 1 - beta, a
        # decrease that did not help is more likely one that did not go
        # low enough (far over a store's capacity, what it served is
        # overestimated from queries of a few HEADs), and the holdoff,
        # not the noise, spaces the next ones.
        if failed <= 1 - self.beta:
            self.noise = max(self.noise, failed)
        if self._top is None:
            self.paced = False
        else:
            self._set_epoch(self._top, now)
            self.t_decrease = now - self.k
        self._decreasing = False
        self._doubted = False
        self.stats.undone += 1
        self._holdoff_left = self._holdoff
        self._holdoff = min(2 * self._holdoff, self.holdoff_max)

    def _set_epoch(self, w_max: float, now: float) -> None:
        self.w_max = w_max
        self.k = (w_max * (1 - self.beta) / self.c) ** (1 / 3)
        self.t_decrease = now


# Windows a decrease waits for sends that test it (held at the lower rate)
# before it is judged as if they had.
UNTESTED_WINDOWS = 3

# Above twice the noise, this much more of the HEADs failing is a signal:
# a window of 64 HEADs measures a 5 % share within about +-3 %.
NOISE_MARGIN = 0.05


def fell(before: float, after: float, heads: int) -> bool:
    """Whether a share of failed HEADs fell from ``before`` to ``after`` (over ``heads`` HEADs): halved, beyond chance.

    Beyond chance: by more than two standard deviations of the count
    ``before`` would give over ``heads`` HEADs (Poisson).  A window of 64
    HEADs at a 5 % share holds about 3 failures: one window with 1 says
    nothing, and judged by halving alone such windows kept decreases that
    did not help, one after another (the pace stepped from 530 to 67 HEAD/s
    under 5 % random 503s in 8 seconds, on the virtual clock).
    """
    expected = before * heads
    return after <= 0.5 * before and after * heads < expected - 2.0 * math.sqrt(expected)


def check_positive(name: str, value: float) -> None:
    """Raise ValueError naming ``name`` unless ``value`` is a positive finite number (not a bool)."""
    # An int too large for a float is not finite as the float it is used as.
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < as_float(value) < math.inf:
        raise ValueError(f"{name} must be a positive finite number, got {value!r}")


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
        core: the policy, created at ``time.monotonic()`` (default: :class:`PaceCore`'s defaults).
    """

    def __init__(self, core: PaceCore | None = None) -> None:
        self._lock = threading.Lock()
        self._core = core if core is not None else PaceCore(time.monotonic())
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
            self._core = PaceCore(time.monotonic())
            self.fork_resets += 1

    @contextlib.contextmanager
    def _held(self, *, changes: bool = True) -> Iterator[PaceCore]:
        """The core, held for one call (``changes``: the call may change it; a pace kept elsewhere stores it back)."""
        with self._lock:
            yield self._core

    def reserve(self, heads: int, not_after: float = math.inf) -> float | None:
        """When ``heads`` HEADs may start; None (nothing reserved) when not by ``not_after``."""
        with self._held() as core:
            return core.reserve(time.monotonic(), heads, not_after)

    def release(self, heads: int) -> None:
        """Return an unused reservation."""
        with self._held() as core:
            core.release(time.monotonic(), heads)

    def answered(self, sent_at: float, heads: int) -> None:
        """A query sent at ``sent_at`` answered."""
        with self._held() as core:
            now = time.monotonic()
            before = _decisions(core, now)
            core.answered(now, sent_at, heads)
            self._note(core, before, now)

    def failed(self, sent_at: float, heads: int, retry_after_s: float | None = None) -> None:
        """A query sent at ``sent_at`` failed (not by a timeout)."""
        with self._held() as core:
            now = time.monotonic()
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
        """``rate`` (HEAD/s, None while unpaced), ``w_max``, ``measured`` and the :class:`PaceStats` counters.

        ``measured``: the HEADs per second whose outcome (answered or failed)
        came back, smoothed over the windows judged.
        """
        with self._held(changes=False) as core:
            stats = core.stats
            return {
                "rate": core.rate(time.monotonic()),
                "w_max": core.w_max if core.paced else None,
                "measured": core.measured,
                "decreases": stats.decreases,
                "undone": stats.undone,
                "holds": stats.holds,
                "refused": stats.refused,
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
