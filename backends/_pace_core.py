"""The pace's rules: a HEAD rate adjusted by an object store's answers, pure (no clock, lock or I/O).

Why.  A prefix of an S3 bucket serves a bounded request rate and answers
``503 SlowDown`` beyond it (Ceph RGW's limits answer 503 too); clients that
retry at once only add load.  :class:`PaceCore` holds the rate one process
sends its HEADs at, for one (endpoint, bucket, prefix), and the rules that
move it.  Every method takes ``now`` (seconds on the caller's monotonic
clock), so the rules are tested, simulated and model-checked without
sleeping; :mod:`kvprobe.backends._pacing` drives a core with a lock and
``time.monotonic``.

Theory of operation (docs/backends.md, "Pacing to the store", says it in
full; docs/pace.md says how it is verified):

* **Unpaced until the store pushes back**: until the first congestion
  signal every reservation starts at once.
* **Windows**: outcomes are judged per window of at least ``window_heads``
  HEADs over at least ``window_min_s`` (or ``window_max_s`` without a
  failure), counting only queries sent after it opened, so one decrease
  is judged per round trip and idle time never reads as a rate the store
  imposed.
* **CUBIC** (botocore's constants ``c = 0.4``, ``beta = 0.7``, floor 0.5):
  a window with failures sets ``w_max`` from the rate achieved (capped by
  what the store served, so one decrease lands near its capacity) and the
  rate to ``beta * w_max``, or, when the rate bound the window's sends and
  a share ``f`` under ``1 - beta`` failed, to ``(1 - f) * w_max`` (a store
  just over its cap is cut by what it refused, not by 30 %; windows failing
  up to ``NOISE_MARGIN`` after such a cut are no signal); the rate then
  follows ``w_max + c * (t - K)**3``, or the line from the rate the cut set
  plus ``FAIR_INCREASE * t`` where higher (the same HEAD/s per second for every pace: paces
  sharing a bucket converge towards equal shares).  Its growth depends on
  time, not on requests, so engines with different loads grow alike.
* **A decrease must help**: the windows after a decrease check that the
  failures per HEAD fell (:func:`fell`).  A decrease whose sends came down
  while the HEADs the store answered per second fell with them, and the
  failures per HEAD did not, is loss that is not load: after two such
  windows the decreases are undone, that share is kept as the store's
  **noise** (windows failing no more than ``2 * noise + NOISE_MARGIN``,
  at most ``LOAD_SHARE``, are not signals), and later decreases wait a
  growing holdoff.  A window
  failing more than ``LOAD_SHARE`` is load: always a decrease, never undone.
  Noise learnt follows the windows failing under its limit, never above
  the share the undo learnt; it is forgotten when a decrease helps, when
  the first window after an undo fails above it (the failures rose with
  the rate), or when the windows since it was learnt (pooled from the last
  one failing no more than it) fail more than it beyond chance, as of a
  window within its limit (loss that is not load fails alike in every
  window; paces sharing a capped bucket learn the share the others keep
  failing).  Nor is such noise room to grow: while windows fail more than
  ``NOISE_MARGIN`` within its limit, CUBIC's clock stops and the rate
  stays at most the one the undo that learnt it restored.  A chain begun
  where the demand, not the rate, set the sends (unpaced, or paced above
  them) holds its rate while the windows since its first decrease are
  pooled (those without a failure too): undone, the pooled share learnt,
  once two windows fail at least a third of the first one's share (or of
  the noise, if less); its decreases stand once the pooled share fell
  beyond chance, or after ``CHAIN_WINDOWS`` undecided.  At a store whose
  answers queue at its capacity the HEADs answered per second do not fall
  with the rate, so they cannot tell its random 503s from load; one window
  without a failure cannot either when failures are rare.
* **Retry-After** holds new reservations until then (at most ``max_hold_s``),
  but one per ``HOLD_PROBE_S`` goes out as a probe, and an answer to a
  query sent during the hold ends it.
* **Reservations** follow GCRA: ``n`` HEADs start at
  ``max(now, tat - burst_s)`` and push ``tat`` on by ``n / rate``; one that
  could not start by its ``not_after`` is refused and costs nothing.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

from kvprobe.backends._pace_chain import ChainVerdict, DemandChain
from kvprobe.backends._pace_windows import Window, fell
from kvprobe.spec.option_values import as_float

__all__ = [
    "FAIR_INCREASE",
    "HOLD_PROBE_S",
    "NOISE_MARGIN",
    "UNTESTED_WINDOWS",
    "PaceCore",
    "PaceStats",
    "check_positive",
]


@dataclass
class PaceStats:
    """What a pacer did: ``decreases`` of its rate, of which ``undone`` did not help, and ``holds`` (Retry-After).

    ``refused``: reservations that could not start before their caller's
    deadline.  ``answered_heads`` and ``failed_heads``: the HEADs of the
    queries reported answered, and failed other than by a timeout (throttled
    or erroring: NIXL reports a 503, a 500 and a reset alike).
    """

    decreases: int = 0
    undone: int = 0
    holds: int = 0
    refused: int = 0
    answered_heads: int = 0
    failed_heads: int = 0


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

    # A window failing more than this share of its HEADs is load, whatever
    # the noise learnt: it is never held off, and a decrease it causes is never
    # undone.  Random loss up to 20 % stays under it over a window (at 0.3,
    # issue 39's run at 20 % lost a quarter of its stored keys in 1 run of 20);
    # paces sharing one capped bucket step down before they send 1 / (1 -
    # LOAD_SHARE) times its cap together.
    LOAD_SHARE = 0.4

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
        self.served = 0.0  # HEADs the store answered per second, smoothed over windows
        # The last window judged had no failure and its reservations waited,
        # or a reservation was refused for the rate since: the demand uses
        # all the rate, which then grows as CUBIC says, not
        # capped at twice what was measured (that cap keeps an idle
        # process's rate down; at a low rate it made the way back from the
        # floor one doubling per window, minutes).
        self.demand_above = False
        self.tat = now  # GCRA's theoretical arrival time
        self.hold_until = -math.inf  # Retry-After
        self.held_at = -math.inf  # when the hold was set: an answer to a query sent since ends it
        self.probe_at = -math.inf  # the earliest start of the hold's next probe
        self._window = Window(now)
        self._last_reserved = (now, 0)  # when, and how many HEADs
        # (served/s, failed per HEAD, sent/s) in the window that decided the last decrease
        self._verify: tuple[float, float, float] | None = None
        self._unsettled = 0  # windows after the last decrease whose sends had not come down to it yet
        # The rate before the first of the decreases since the store last kept
        # up (None: unpaced then), and whether there were any.
        self._top: float | None = None
        self._decreasing = False
        # A chain of decreases begun where the demand set the sends (unpaced,
        # or the rate above them) on a window failing under 1 - beta (None:
        # no such chain).
        self._demand_chain: DemandChain | None = None
        self._doubted = False  # the last window judged the last decrease useless
        # Failures per HEAD a decrease showed not to come from the rate (a
        # flaky gateway's share): windows failing no more are not signals.
        self.noise = 0.0
        self._noise_learnt = 0.0  # the share the last undo learnt: the most the windows since may lift noise to
        # The windows judged since the noise was learnt, from the last one
        # after which they failed no more than it: [queries, of which
        # failed, HEADs].
        self._noise_pool: list[int] = [0, 0, 0]
        # When the growth stopped (None: it runs): the windows judged since
        # failed more than NOISE_MARGIN, within the noise limit.
        self._frozen_at: float | None = None
        # The rate the undo that learnt the noise restored: the highest at
        # which it was shown not to come from the rate (0.0: unpaced then).
        self._noise_rate = 0.0
        self._holdoff = 1  # windows the next undone decrease makes later ones wait
        self._holdoff_left = 0
        self._undo_unchecked = False  # an undo whose first window back has not been judged yet
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
        if self._demand_chain is not None:
            state["_demand_chain"] = dataclasses.asdict(self._demand_chain)
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
                    value = Window(**value)
                elif name == "_demand_chain" and value is not None:
                    value = DemandChain(**value)
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
        if self._verify is not None or self._demand_chain is not None:
            # Held while the window after a decrease checks it (a small
            # w_max would otherwise regrow within that window), and while
            # the windows pooled since a chain's first decrease decide it.
            return max(self.floor, self._epoch_rate())
        # Failures the noise hides are no signal to step down, nor time to
        # grow: a pace sharing a capped bucket learns the 503s the others
        # keep up as noise, and grew on them while the others cut (one
        # window without such failures released seconds of CUBIC's growth
        # at once, to many times its share).
        cubic = self._growth(now if self._frozen_at is None else min(now, max(self._frozen_at, self.t_decrease)))
        if self._frozen_at is not None and self.noise and self._noise_rate:
            cubic = min(cubic, max(self._noise_rate, self._epoch_rate()))
        last_at, last_heads = self._last_reserved
        if self.demand_above and now - last_at <= max(
            self.window_max_s, 2 * last_heads / max(self.floor, self.measured)
        ):
            return max(self.floor, cubic)  # the demand is still there: not an idle process
        return max(self.floor, min(cubic, max(2.0 * self.measured, self.w_max)))

    def _growth(self, now: float) -> float:
        # CUBIC's curve, or the additive line from the decrease if higher:
        # near w_max CUBIC is flat, and paces sharing one capped bucket,
        # cut together by the same 503s, would each come back to its own
        # w_max, their shares frozen.  The line adds the same HEAD/s per
        # second to every pace, so each common cut shrinks the gap between
        # two paces by beta (AIMD's fairness); far from w_max, CUBIC's
        # convex part is the faster way back.  The line starts one long
        # window after the decrease was kept: that window judges the rate
        # it was kept at.
        t = now - self.t_decrease - self.k
        cubic = self.w_max + self.c * t * t * t
        line = self._epoch_rate() + FAIR_INCREASE * (now - self.t_decrease - self.window_max_s)
        return max(cubic, line)

    def reserve(self, now: float, heads: int, not_after: float = math.inf) -> float | None:
        """When ``heads`` HEADs may start (``>= now``), reserving them.

        None (nothing reserved, counted ``refused``) when that is after ``not_after``.
        """
        # Inside a hold, one reservation per HOLD_PROBE_S goes out as a probe.
        probe = now < self.hold_until and now >= self.probe_at
        start = now if probe else max(now, self.hold_until)
        rate = self.rate(now)
        last_at, last_heads = self._last_reserved
        if now - last_at > max(self.idle_s, 2 * last_heads / rate if rate else 0.0):
            self._window = Window(now)  # the demand paused: measure from here
        self._last_reserved = (now, heads)
        if rate is not None:
            start = max(start, self.tat - self.burst_s)
        if start > not_after:
            self.stats.refused += 1
            if rate is not None and max(now, self.hold_until) <= not_after:
                # The rate, not a hold, refused it: the demand is above the
                # rate, which grows as CUBIC says.  Capped at twice what was
                # measured instead, a pace at its floor whose refused
                # reservations measure nothing granted the next one at the
                # floor's rate: queries of 16 HEADs owed 23 s more and the
                # way back took 54 s where the bound says 48.
                self.demand_above = True
            return None
        if rate is not None:
            self.tat = max(self.tat, start) + heads / rate
        if probe:
            self.probe_at = start + HOLD_PROBE_S
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
        self.stats.answered_heads += heads
        if sent_at >= self.held_at and now < self.hold_until:
            self.hold_until = now  # the store answered a query sent during the hold: it serves again
        self._window.add(sent_at, heads, failed=False)
        self._maybe_judge(now)

    def failed(self, now: float, sent_at: float, heads: int, retry_after_s: float | None = None) -> None:
        """A query of ``heads`` HEADs sent at ``sent_at`` failed (not by a timeout).

        ``retry_after_s``: the store's ``Retry-After``, if it sent one.
        """
        if retry_after_s is not None and retry_after_s > 0:
            until = now + min(retry_after_s, self.max_hold_s)
            if until > self.hold_until:
                self.hold_until, self.held_at = until, now
                self.probe_at = max(self.probe_at, now + HOLD_PROBE_S)
                self.stats.holds += 1
        self.stats.failed_heads += heads
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
        self.served = 0.8 * served + 0.2 * self.served
        self.demand_above = window.binding and not window.failures
        self._window = Window(now)
        verify, self._verify = self._verify, None
        chain = self._demand_chain
        verdict = ChainVerdict.OPEN if chain is None else self._judge_chain(chain, window, failed, held, verify)
        if verdict is ChainVerdict.STANDS:
            self._demand_chain = None
            self.t_decrease = now  # its rate was held: CUBIC regrows from here
        elif verdict is ChainVerdict.UNDONE:
            # The rate was held at the chain's cut or lower, and the share
            # of HEADs failing stayed: not a store refusing what exceeds its
            # rate (below it, that share goes), a store losing a share of
            # whatever it is sent (a gateway's 503s, also at a store whose
            # answers queue at its capacity, which answers as many at the
            # lower rate: the undo below, which asks that it answer fewer,
            # never came there, and each window failing a few percent cut
            # again).  Back to before the chain, the share learnt as noise.
            assert chain is not None
            self._undo(now, chain.share)
            return
        if not window.failures:
            at, most = self._kept_up
            if served >= most or now - at > self.KEPT_UP_S:
                self._kept_up = (now, served)
            if self._demand_chain is None:
                # The store is keeping up: the decreases so far stand (a
                # chain decides that from its pooled windows: where failures
                # are rare, one window without any says nothing).
                self._decreasing = False
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
            if self._top is not None:
                # Decreases sized by a few failures cut a little each: the
                # chain's fall in what the store answered is measured from
                # what it answered at the rate before the first of them.
                served_before = max(served_before, self._top * (1.0 - verify[1]))
            if (
                window.binding
                and served < (1 + self.beta) / 2 * served_before
                and max(failed, (verify[1] + failed) / 2) <= self.LOAD_SHARE
            ):
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
                self._set_epoch(self.w_max * self.beta, self.t_decrease, self._epoch_rate() / self.w_max)
                self.tat = max(self.tat, now + self.burst_s)
                self.stats.decreases += 1
                return
        self._doubted = False
        noise = self.noise
        if verify is not None:
            self.t_decrease = now  # kept: CUBIC's regrowth starts from here
            if self._helped(verify[1], failed, window.heads):
                # The decrease helped: these failures came from the rate,
                # so no noise learnt before them holds them back any more.
                noise = self.noise = 0.0
        if failed <= self.noise_limit():
            # What a decrease showed not to come from the rate: a window with
            # no more than that is the store as it is, not a congestion
            # signal.  Forgotten as windows fail less (never raised here: a
            # store at its capacity failing just under the limit must not
            # lift it above what the undo learnt, where the rate was lower;
            # only ever lowered, it fell to the quietest windows' share, and
            # the next window of the noise's own spread above twice that cut
            # the rate).
            self.noise = min(self._noise_learnt, 0.9 * noise + 0.1 * failed) if noise else 0.0
        if self._undo_unchecked:
            # The first window back at the rate an undo restored: loss that is
            # not load fails as much there as at the lower rate; more is the
            # rate (paces sharing a capped bucket, whose 503s fell only because
            # the others slowed): the noise learnt is forgotten, and it counts.
            self._undo_unchecked = False
            if window.failures and failed > self.noise_limit():
                self.noise = 0.0
                self._holdoff_left = 0
        if self.noise and failed <= self.noise_limit() and self._noise_exceeded(window):
            # Loss that is not load fails the same share at every rate and in
            # every window; these failed more, beyond chance: load (a pace
            # sharing a capped bucket learns as noise the 503s the others
            # kept up, then grows on them while the others cut, to several
            # times its share).  Forgotten, and this window judged as a signal.
            # (Asked of windows the noise hides: one above its limit is a
            # signal anyway, and forgetting there too lifted the simulated
            # fleet's paced/unpaced throttled HEADs from 0.73 to 0.75.)
            self.noise = 0.0
            self._holdoff_left = 0
        if NOISE_MARGIN < failed <= self.noise_limit():
            if self._frozen_at is None:
                self._frozen_at = now
        elif self._frozen_at is not None:
            # The growth resumes where it stopped.
            self.t_decrease += now - max(self._frozen_at, self.t_decrease)
            self._frozen_at = None
        if self._holdoff_left and failed <= self.LOAD_SHARE:
            self._holdoff_left -= 1
        elif (
            window.failures
            and failed < 1.0
            and failed > self.noise_limit()
            and (verify is None or failed >= 1 - self.beta)
            and not (failed <= NOISE_MARGIN and self._sized())
        ):
            # A few failures in the window right after a decrease do not
            # step down again: they are the store still recovering from the
            # window that was cut (a drained token bucket refills at its
            # rate, not ours), and the step down has not been seen yet.  On
            # Ceph RGW such back-to-back steps took a host's pace from 578 to
            # 198 HEAD/s within a second (0.7 cubed), under the demand that
            # followed.  The next window judges the new rate; heavier
            # failures still cut at once.
            self._decrease(now, served, failed, sent, held, binding=window.binding)

    def _decrease(
        self, now: float, served: float, failed: float, achieved: float, current: float | None, binding: bool = False
    ) -> None:
        # What a few failures step down from: the pace's rate or, from
        # unpaced, the most the store served without a failure of late.
        step_from = current
        if step_from is None and now - self._kept_up[0] <= self.KEPT_UP_S:
            step_from = self._kept_up[1]
        if step_from is not None and achieved < step_from and failed < 1 - self.beta and not binding:
            # The demand, not the pace, set this window's sends (it sent less
            # than that), and the store served most of them.  Then
            # what was sent measures that moment's demand, not the store: a
            # decrease to it would hold the pace below the next moment's
            # demand for CUBIC's K seconds (on Ceph RGW: a host's pace from
            # 378 to ~130 HEAD/s, long walks waiting out their deadlines).
            # The few failures say only that the rate, and the bursts it
            # allows, are too high: one step down.
            base = max(self.floor, step_from)
            cut = self.beta
        else:
            base = achieved if current is None else min(current, achieved)
            # Never down to less than beta times what we sent, but never above
            # what the store served either: far over its capacity one decrease
            # lands near it instead of one per window.  From unpaced, beta:
            # engines sharing a capped bucket each see a few percent fail
            # and, cut by that alone, sent 0.8-0.9 of their unpaced
            # throttled HEADs in the simulated fleet (0.4-0.6 by beta);
            # a chain decides whether the cut stands (below).
            cut = self.beta if current is None else max(self.beta, 1.0 - failed)
            base = max(self.floor, min(base, served / cut))
        self._verify = (served, failed, achieved)
        self._unsettled = 0
        self._set_epoch(base, now, cut)
        if failed > self.LOAD_SHARE:
            # Load, never noise: no undo goes back above the rate it set.
            self._decreasing, self._top = True, self._epoch_rate()
            self._demand_chain = None
        elif not self._decreasing:
            self._decreasing, self._top = True, current
            # The demand, not the rate, set the sends (unpaced, or a rate
            # above what the client sent): what a cut tests is whether the
            # failures come from the rate at all.
            open_chain = (current is None or not binding) and failed < 1 - self.beta
            self._demand_chain = DemandChain(self._epoch_rate(), failed) if open_chain else None
        # No burst credit (the next window measures the new rate), and the
        # HEADs already granted keep their time: a later start than theirs.
        self.tat = max(self.tat, now + self.burst_s)
        self.paced = True
        self.stats.decreases += 1

    def _judge_chain(
        self,
        chain: DemandChain,
        window: Window,
        failed: float,
        held: float | None,
        verify: tuple[float, float, float] | None,
    ) -> ChainVerdict:
        # Pools the window into the chain and says what the pool shows
        # (DemandChain.verdict), but for the windows the pool must not see.
        if not self._decreasing or failed > self.LOAD_SHARE:
            # Refused load: the decreases stand.
            return ChainVerdict.STANDS
        if verify is not None and verify[1] == chain.first_share and not self._unsettled:
            # The window right after the chain's first decrease: the store may
            # still be recovering from the rate that was cut (a drained token
            # bucket refills at its rate): not pooled, but its share joins the
            # first one's as what a rise is measured from.
            chain.first_share = max(chain.first_share, failed)
            return ChainVerdict.OPEN
        chain.pool(window.heads, failed)
        verdict = chain.verdict(held, self.noise, self.window_heads, self.beta)
        if verdict is ChainVerdict.STANDS:
            self._decreasing = False  # the failures fell with the rate, or the windows cannot tell
        return verdict

    def _helped(self, before: float, after: float, heads: int) -> bool:
        # Whether the window after a decrease showed it helped: its failures
        # fell beyond chance.  Not for a chain: its first window failed
        # above the noise limit, the tail of the noise's spread, and one
        # window under that is the noise again; the chain judges from its
        # pooled windows.
        return self._demand_chain is None and fell(before, after, heads)

    def _sized(self) -> bool:
        # The last decrease was sized by a few failures: from then, a window
        # failing no more than NOISE_MARGIN is no signal.  A store capped
        # just below the rate fails more as the rate climbs past it (and the
        # next cut lands on what it served); a gateway failing a few percent
        # at random fails as much at every rate, and cut on each such window
        # the pace would settle wherever it happened to be (under 1 % random
        # 503s, at half the store's rate on the virtual clock).
        return self.paced and self._epoch_rate() > self.beta * self.w_max * (1 + 1e-9)

    def _noise_exceeded(self, window: Window) -> bool:
        # Pools the window with those judged since the pool last failed no
        # more than the noise (a one-sided CUSUM: windows under it do not
        # hide a rise after them); whether the pool fails more queries than
        # the noise gives queries of its mean size, by more than three standard
        # deviations of the difference between the pool's share and the
        # noise's own (learnt over two windows; at two, one window of 60
        # queries failing 10 % over a noise of 4 % forgot it, and a client
        # bound by its concurrency cut to a quarter of its sends).
        pool = self._noise_pool
        pool[0] += window.queries
        pool[1] += window.failures
        pool[2] += window.heads
        size = pool[2] / pool[0]
        expected = float(1.0 - (1.0 - self.noise) ** size)  # a query's chance to fail
        if pool[1] <= expected * pool[0]:
            self._noise_pool = [0, 0, 0]
            return False
        learnt = 2 * self.window_heads / size  # queries the noise was learnt from
        sigma = math.sqrt(expected * (1 - expected) * (1 / learnt + 1 / pool[0]))
        return pool[1] / pool[0] > expected + 3.0 * sigma

    def noise_limit(self) -> float:
        """The failures per HEAD a window may have without being a congestion signal (0 until a decrease was undone)."""
        return min(2.0 * self.noise + NOISE_MARGIN, self.LOAD_SHARE) if self.noise else 0.0

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
            self.noise = self._noise_learnt = max(self.noise, failed)
            self._noise_pool = [0, 0, 0]
        if self._top is None:
            self.paced = False
        else:
            # CUBIC's plateau at that rate (K = 0: its curve grows from
            # there, and the fair line from there after one long window:
            # restored as if K seconds had passed, the line would already
            # stand 10 HEAD/s per second of K above it).  Never below the
            # rate the decrease being undone held (regrowth since the first
            # decrease of the chain may have passed that rate).
            self._set_epoch(max(self._top, self._epoch_rate()), now, cut=1.0)
        self._noise_rate = self._epoch_rate() if self.paced else 0.0
        self._decreasing = False
        self._doubted = False
        self._demand_chain = None  # undone whole, by whichever rule
        self.stats.undone += 1
        self._undo_unchecked = True
        self._holdoff_left = self._holdoff
        self._holdoff = min(2 * self._holdoff, self.holdoff_max)

    def _set_epoch(self, w_max: float, now: float, cut: float | None = None) -> None:
        # ``cut``: the share of ``w_max`` the rate restarts from (beta unless
        # the decrease was sized by a small share of failures); CUBIC's K is
        # the time its curve takes back to ``w_max``.
        self.w_max = w_max
        self._frozen_at = None
        self.k = (w_max * (1 - (self.beta if cut is None else cut)) / self.c) ** (1 / 3)
        self.t_decrease = now

    def _epoch_rate(self) -> float:
        # Where CUBIC's curve starts: the rate the last decrease set.
        return self.w_max - self.c * self.k**3


# During a Retry-After hold, one reservation per this many seconds may go
# out at once to test the store: a hold of 30 s, honoured whole, shed every
# key of every call on the host although the store may answer again in a
# second.  An answer to a query sent during the hold ends it.
HOLD_PROBE_S = 1.0

# HEAD/s per second every pace adds after a decrease, whatever its rate (its
# fair-share line; docs/pace.md, "FairShare").
FAIR_INCREASE = 10.0

# Windows a decrease waits for sends that test it (held at the lower rate)
# before it is judged as if they had.
UNTESTED_WINDOWS = 3

# Above twice the noise, this much more of the HEADs failing is a signal:
# a window of 64 HEADs measures a 5 % share within about +-3 %.
NOISE_MARGIN = 0.05


def check_positive(name: str, value: float) -> None:
    """Raise ValueError naming ``name`` unless ``value`` is a positive finite number (not a bool)."""
    # An int too large for a float is not finite as the float it is used as.
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < as_float(value) < math.inf:
        raise ValueError(f"{name} must be a positive finite number, got {value!r}")
