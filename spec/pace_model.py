"""The object tier's pace as rules an observer can check: a reference model of ``PaceCore`` (pure, no clock).

Why.  The pace (``kvprobe.backends._pacing.PaceCore``) decides when HEADs
may start and how its rate follows the store's answers.  Its code holds the
decisions; this module holds what must be true of them, written from what
the pace did (each grant, refusal, hold and rate it showed), never from the
predicates it used to decide.  The stateful suite (``tests/pace/``) runs
``PaceCore`` on a virtual clock, feeds :class:`PaceModel` every step, and
each rule names the property that broke.

Rules (their names appear in every violation):

* ``RateBound``: between two paced grants, the grants before the later one
  fit in the time between them at the rates they were granted at, less one
  burst: ``start_j - start_i >= sum(heads_k / rate_k, i <= k < j) - burst_s``.
  A run of grants is cut where the pace was unpaced or a grant was given
  back (its HEADs never went out).
* ``NoEarlyShed``: a reservation is refused only when the earliest start the
  pace would have given it (asked without a deadline) is after its deadline.
* ``HoldHonoured``: inside a ``Retry-After`` hold (capped at
  ``max_hold_s``) a grant starts only as a probe: ``probe_s`` after the
  hold was set or the last probe started.  An answer to a query that
  started since the hold was set ends it.
* ``RateFloor``: a paced rate is never below ``floor``.
* ``DecreaseLowers``: a step in which the pace counted a decrease never
  raises its rate.
* ``UndoRestores``: a step in which it counted an undone decrease never
  lowers its rate.

Rules on each window the pace judged (its HEADs' outcomes, counted here
from the outcomes reported since the last judgement of queries sent since
the window opened; the share failing is the per-HEAD probability that
explains the failed queries):

* ``LoadDecreases``: a window failing more than ``load_share`` of its HEADs
  lowers the rate (a decrease, whatever the holdoff), or holds it at the
  rate the last decrease set while that decrease is being checked.
* ``UndoBelowLoad``: once a decrease on such a window set a rate, the
  undo ending that chain of decreases (no window without a failure
  between) does not lift the rate above it.
* ``SizedCut``: a decrease on a window failing a share ``f`` below
  ``1 - beta`` in which some grant had to wait (the rate, not the demand,
  set its sends), from a paced rate other than the one the last decrease
  set, lands at no less than ``(1 - f)`` times the lower of that rate and
  the window's send rate: a few failures cost the share that failed, not
  ``1 - beta``.

:func:`cubic_rate` is CUBIC's curve and :func:`recovery_bound_s` the stated
bound on the way back from the floor to a store's rate once failures stop.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

__all__ = [
    "Grant",
    "Outcome",
    "PaceModel",
    "PaceRuleBroken",
    "cubic_rate",
    "failed_share",
    "recovery_bound_s",
    "send_rate",
]

# Rounding slack for sums of floats (seconds).
EPS = 1e-9


class PaceRuleBroken(AssertionError):
    """A pace rule did not hold; the message starts with the rule's name."""


@dataclass(frozen=True)
class Grant:
    """HEADs the pace let start at ``start``, granted at ``at`` under ``rate`` (None: unpaced)."""

    ident: int
    at: float
    start: float
    heads: int
    rate: float | None


@dataclass(frozen=True)
class Outcome:
    """A query of ``heads`` HEADs sent at ``sent_at`` was reported answered or ``failed``."""

    sent_at: float
    heads: int
    failed: bool


@dataclass
class PaceModel:
    """What a pace did, and the rules it must keep (each step checked as it is recorded).

    Args:
        floor: the lowest paced rate (HEAD/s).
        burst_s: seconds of the rate that may go out at once.
        max_hold_s: the longest ``Retry-After`` honoured.
        probe_s: the least time between two grants inside a hold.
        load_share: above this share of failed HEADs a window is load.
        beta: the deepest cut of one decrease (the rate kept, as a share).
    """

    floor: float
    burst_s: float
    max_hold_s: float
    probe_s: float
    load_share: float = 0.4
    beta: float = 0.7
    outcomes: list[Outcome] = field(default_factory=list)  # reported since the last judgement
    window_grants: list[Grant] = field(default_factory=list)  # granted since the last judgement
    decrease_set: float | None = None  # the rate the last decrease left
    load_rate: float | None = None  # the rate a decrease on a load window left, until a window without a failure
    run: list[Grant] = field(default_factory=list)  # paced grants since the last cut
    hold_until: float = -math.inf
    held_at: float = -math.inf
    last_probe: float = -math.inf  # the start of the last grant inside the hold
    grants: int = 0
    refusals: int = 0

    def granted(self, grant: Grant) -> None:
        """The pace let ``grant.heads`` HEADs start at ``grant.start``.

        Raises:
            PaceRuleBroken: ``HoldHonoured`` or ``RateBound``.
        """
        self.grants += 1
        self.window_grants.append(grant)
        if grant.start < self.hold_until - EPS:
            since = max(self.held_at, self.last_probe)
            if grant.start < since + self.probe_s - EPS:
                raise PaceRuleBroken(
                    f"HoldHonoured: a grant starts at {grant.start} inside a hold until {self.hold_until}, "
                    f"{grant.start - since:.6f} s after the hold or its last probe (at {since})"
                )
            self.last_probe = grant.start
        if grant.start < grant.at - EPS:
            raise PaceRuleBroken(f"RateBound: a grant starts at {grant.start}, before it was asked for at {grant.at}")
        if grant.rate is None:
            self.run.clear()
            return
        self.run.append(grant)
        later = grant
        owed = 0.0
        for earlier in reversed(self.run[:-1]):
            owed += earlier.heads / earlier.rate if earlier.rate else 0.0
            if later.start - earlier.start < owed - self.burst_s - EPS:
                raise PaceRuleBroken(
                    f"RateBound: the grant at {later.start} follows the one at {earlier.start} by "
                    f"{later.start - earlier.start:.6f} s, but the grants between owe {owed:.6f} s "
                    f"(burst {self.burst_s} s)"
                )

    def released(self, ident: int) -> None:
        """A grant was given back unused: the run of grants is cut there."""
        if any(g.ident == ident for g in self.run):
            self.run.clear()

    def refused(self, now: float, not_after: float, earliest: float | None) -> None:
        """The pace refused a reservation due by ``not_after``; ``earliest``: its start had there been no deadline.

        Raises:
            PaceRuleBroken: ``NoEarlyShed``.
        """
        self.refusals += 1
        if earliest is not None and earliest <= not_after:  # exact: the pace compares the same two floats
            raise PaceRuleBroken(
                f"NoEarlyShed: refused at {now} although it could start at {earliest}, by its deadline {not_after}"
            )

    def told_to_wait(self, now: float, retry_after_s: float) -> None:
        """The store sent ``Retry-After: retry_after_s`` with a failure seen at ``now``."""
        until = now + min(retry_after_s, self.max_hold_s)
        if retry_after_s > 0 and until > self.hold_until:
            self.hold_until, self.held_at = until, now

    def answer_seen(self, now: float, started: float) -> None:
        """A query that started at ``started`` was answered at ``now``: one started during a hold ends it."""
        if started >= self.held_at and now < self.hold_until:
            self.hold_until = now

    def rate_seen(self, before: float | None, after: float | None, *, decreased: bool, undone: bool) -> None:
        """The rate before and after one outcome (None: unpaced), and whether it counted a decrease or an undo.

        Raises:
            PaceRuleBroken: ``RateFloor``, ``DecreaseLowers`` or ``UndoRestores``.
        """
        if after is not None and after < self.floor - EPS:
            raise PaceRuleBroken(f"RateFloor: the rate {after} is below the floor {self.floor}")
        if decreased and not undone and before is not None and after is not None and after > before + 1e-6:
            raise PaceRuleBroken(f"DecreaseLowers: a decrease took the rate from {before} to {after}")
        if undone and after is not None and (before is None or after < before - 1e-6):
            raise PaceRuleBroken(f"UndoRestores: undoing took the rate from {before} to {after}")

    def outcome_seen(self, outcome: Outcome) -> None:
        """A query's outcome was reported to the pace (it counts in the window open then)."""
        self.outcomes.append(outcome)

    def window_judged(
        self, now: float, opened: float, before: float | None, after: float | None, *, decreased: bool, undone: bool
    ) -> None:
        """At ``now`` the pace judged its window opened at ``opened``; rates as in :meth:`rate_seen`.

        Raises:
            PaceRuleBroken: ``LoadDecreases``, ``UndoBelowLoad`` or ``SizedCut``.
        """
        counted = [o for o in self.outcomes if o.sent_at >= opened]
        waited = any(g.at >= opened and g.start > g.at for g in self.window_grants)
        self.outcomes, self.window_grants = [], []
        if not counted:
            return
        share = failed_share(counted)
        if share > self.load_share and not decreased:
            held = before is not None and after is not None and after <= before + 1e-6
            if not (held and self.decrease_set is not None and after is not None and after <= self.decrease_set + 1e-6):
                raise PaceRuleBroken(
                    f"LoadDecreases: a window failing {share:.3f} of its HEADs took the rate from {before} to {after}"
                    f" without a decrease (the last decrease set {self.decrease_set})"
                )
        lifted = after is None or before is None or after > before + 1e-6
        if undone and self.load_rate is not None and lifted and (after is None or after > self.load_rate + 1e-6):
            raise PaceRuleBroken(
                f"UndoBelowLoad: an undo took the rate to {after}, above {self.load_rate} set on a load window"
            )
        if decreased and not undone and before is not None and after is not None and waited:
            if 0.0 < share < 1.0 - self.beta and (self.decrease_set is None or abs(before - self.decrease_set) > 1e-6):
                least = (1.0 - share) * min(before, send_rate(counted, now))
                if after < least * (1 - 1e-9) - 1e-6:
                    raise PaceRuleBroken(
                        f"SizedCut: a window failing {share:.3f} of its HEADs cut the rate from {before} to {after},"
                        f" below {least:.3f}"
                    )
        if decreased:
            self.decrease_set = after
            if share > self.load_share:
                self.load_rate = after
        if undone or not any(o.failed for o in counted):
            # An undo or a window without failure ends the chain of
            # decreases: the next chain starts from the rate regrown since.
            self.load_rate = None


def failed_share(outcomes: list[Outcome]) -> float:
    """The probability of one HEAD failing that explains the failed queries among ``outcomes`` (of their mean size)."""
    answered = sum(1 for o in outcomes if not o.failed)
    if not answered:
        return 1.0
    heads_per_query = sum(o.heads for o in outcomes) / len(outcomes)
    return float(1.0 - (answered / len(outcomes)) ** (1.0 / heads_per_query))


def send_rate(outcomes: list[Outcome], now: float) -> float:
    """HEADs sent per second among ``outcomes``, judged at ``now``.

    Between the first and the last send (the last one's HEADs go out at its
    end, so they are not counted); when all were sent at one instant, over
    the time since then (at least a millisecond).
    """
    first = min(o.sent_at for o in outcomes)
    last = outcomes[0]
    for outcome in outcomes:  # of the sends at the latest instant, the one reported last
        if outcome.sent_at >= last.sent_at:
            last = outcome
    heads = sum(o.heads for o in outcomes)
    if last.sent_at > first and heads > last.heads:
        return (heads - last.heads) / (last.sent_at - first)
    return heads / max(now - first, 1e-3)


def cubic_rate(w_max: float, since_epoch_s: float, *, c: float, beta: float) -> float:
    """CUBIC's rate ``since_epoch_s`` after a decrease from ``w_max``: ``w_max + c * (t - K)**3``.

    ``K = cbrt(w_max * (1 - beta) / c)``: the rate is ``beta * w_max`` at the
    decrease and ``w_max`` again ``K`` seconds later.
    """
    k = _cbrt(w_max * (1 - beta) / c)
    t = since_epoch_s - k
    return w_max + c * t * t * t


def recovery_bound_s(target: float, *, heads: int, floor: float, c: float, beta: float, window_max_s: float) -> float:
    """The stated bound on the seconds from the floor back to ``target`` HEAD/s once every HEAD is answered.

    The first query of ``heads`` HEADs at the floor takes ``heads / floor``
    of rate; a window without failures is judged after at most
    ``window_max_s``; from then the rate follows CUBIC from ``w_max =
    floor / beta``, which reaches ``target`` ``K + cbrt((target - w_max) / c)``
    after its epoch.  Two windows of slack: the epoch starts at the judgement.
    """
    w_max = floor / beta
    k = _cbrt(w_max * (1 - beta) / c)
    return heads / floor + 2 * window_max_s + k + _cbrt(max(0.0, (target - w_max) / c))


def _cbrt(x: float) -> float:
    return float(x ** (1 / 3))
