"""Named mutants of the pace's rules: each a ``PaceCore`` with one rule broken, and the property that must catch it.

``MUTANTS[name] = (class, property)``; ``tests/pace/test_pace_mutants.py``
runs each against its property and asserts it is caught.
"""

from __future__ import annotations

import math
from typing import Any

from kvprobe.backends._pace_chain import ChainVerdict
from kvprobe.backends._pace_core import NOISE_MARGIN, PaceCore

__all__ = ["MUTANTS"]


class ReserveIgnoresRate(PaceCore):
    """Every reservation starts at once (no GCRA spacing): the rate is not enforced."""

    def reserve(self, now: float, heads: int, not_after: float = math.inf) -> float | None:
        start = super().reserve(now, heads, not_after)
        return None if start is None else max(now, min(start, self.hold_until if self.hold_until > now else now))


class DecreaseForgetsGrants(PaceCore):
    """A decrease sets the bucket to now + burst even when HEADs are granted beyond it (the pace before issue 39)."""

    def _decrease(
        self, now: float, served: float, failed: float, achieved: float, current: float | None, binding: bool = False
    ) -> None:
        super()._decrease(now, served, failed, achieved, current, binding)
        self.tat = now + self.burst_s


class ShedsEarly(PaceCore):
    """A reservation is refused half a second before its deadline would truly be missed."""

    def reserve(self, now: float, heads: int, not_after: float = math.inf) -> float | None:
        return super().reserve(now, heads, not_after - 0.5)


class IgnoresRetryAfter(PaceCore):
    """The store's Retry-After is dropped."""

    def failed(self, now: float, sent_at: float, heads: int, retry_after_s: float | None = None) -> None:
        super().failed(now, sent_at, heads, None)


class AnyAnswerEndsHold(PaceCore):
    """An answer to a query sent before the Retry-After ends the hold (it says nothing of the store since)."""

    def answered(self, now: float, sent_at: float, heads: int) -> None:
        self.hold_until = min(self.hold_until, now)
        super().answered(now, sent_at, heads)


class NoFloor(PaceCore):
    """The rate may fall below its floor."""

    def rate(self, now: float) -> float | None:
        rate = super().rate(now)
        return None if rate is None else rate * (0.5 if rate <= self.floor * 1.01 else 1.0)


class DecreaseFromRegrownRate(PaceCore):
    """A decrease steps down from the rate recomputed after its own window raised the cap (fixed in issue 39)."""

    def _decrease(
        self, now: float, served: float, failed: float, achieved: float, current: float | None, binding: bool = False
    ) -> None:
        super()._decrease(now, served, failed, achieved, self.rate(now), binding)


class UndoLowers(PaceCore):
    """Undoing decreases lands one step below where they started."""

    def _undo(self, now: float, failed: float) -> None:
        top = self._top
        super()._undo(now, failed)
        if top is not None:
            self._set_epoch(top * self.beta * self.beta, now)


class CappedAtTwiceMeasured(PaceCore):
    """Regrowth capped at twice the rate measured per window even under demand (the slow way back from the floor)."""

    def rate(self, now: float) -> float | None:
        self.demand_above = False
        return super().rate(now)


class RefusalNotDemand(PaceCore):
    """A reservation refused for the rate leaves the demand unknown: the rate stays capped by what was measured."""

    def reserve(self, now: float, heads: int, not_after: float = math.inf) -> float | None:
        demand_above = self.demand_above
        start = super().reserve(now, heads, not_after)
        if start is None:
            self.demand_above = demand_above
        return start


class LossStayedIgnored(PaceCore):
    """A chain of decreases begun where the demand set the sends is never undone for a loss that stayed."""

    def _judge_chain(self, *args: Any) -> ChainVerdict:
        return ChainVerdict.STANDS


class LoadWindowUndone(PaceCore):
    """A window failing more than LOAD_SHARE may end a chain in an undo (its share pooled)."""

    def _judge_chain(self, *args: Any) -> ChainVerdict:
        load_share = self.LOAD_SHARE
        self.LOAD_SHARE = 1.0  # for the test of this chain only
        try:
            return super()._judge_chain(*args)
        finally:
            self.LOAD_SHARE = load_share


class NoNoise(PaceCore):
    """Every decrease that does not help is undone, but nothing is learnt: random 503s keep cutting the rate."""

    def _undo(self, now: float, failed: float) -> None:
        super()._undo(now, failed)
        self.noise = 0.0


class NeverUndo(PaceCore):
    """A decrease is kept whatever the next windows show (a plain loss-based limiter)."""

    def _undo(self, now: float, failed: float) -> None:
        self._decreasing = False
        self._doubted = False


class LoadIgnored(PaceCore):
    """No share of failed HEADs is load for certain: learnt noise, holdoff and undo apply to a window of 503s alone."""

    LOAD_SHARE = 1.0


class NoiseHidesLoad(PaceCore):
    """The noise limit is not capped at LOAD_SHARE: noise learnt at 0.2 or more hides a window of 503s."""

    def noise_limit(self) -> float:
        return 2.0 * self.noise + NOISE_MARGIN if self.noise else 0.0


class LoadUndone(PaceCore):
    """A decrease on a load window may be undone back to the rate before it, as a noisy one's."""

    def _decrease(
        self, now: float, served: float, failed: float, achieved: float, current: float | None, binding: bool = False
    ) -> None:
        decreasing, top = self._decreasing, self._top
        super()._decrease(now, served, failed, achieved, current, binding)
        if failed > self.LOAD_SHARE:
            self._top = top if decreasing else current


class CutByBeta(PaceCore):
    """Every decrease cuts the rate by ``1 - beta`` whatever share failed (the pace before issue 38's capped case)."""

    def _set_epoch(self, w_max: float, now: float, cut: float | None = None) -> None:
        super()._set_epoch(w_max, now)


class NoiseOnlyFalls(PaceCore):
    """Noise learnt is only ever lowered by the windows since (it sinks to the quietest windows' share)."""

    def _maybe_judge(self, now: float) -> None:
        self._noise_learnt = self.noise
        super()._maybe_judge(now)


MUTANTS: dict[str, tuple[type[PaceCore], str]] = {
    "reserve-ignores-rate": (ReserveIgnoresRate, "RateBound"),
    "decrease-forgets-grants": (DecreaseForgetsGrants, "RateBound"),
    "sheds-early": (ShedsEarly, "NoEarlyShed"),
    "ignores-retry-after": (IgnoresRetryAfter, "HoldHonoured"),
    "any-answer-ends-hold": (AnyAnswerEndsHold, "HoldHonoured"),
    "no-floor": (NoFloor, "RateFloor"),
    "decrease-from-regrown-rate": (DecreaseFromRegrownRate, "DecreaseLowers"),
    "undo-lowers": (UndoLowers, "UndoRestores"),
    "capped-at-twice-measured": (CappedAtTwiceMeasured, "RecoveryWithinBound"),
    "refusal-not-demand": (RefusalNotDemand, "SendsRecoverWithinBound"),
    "loss-stayed-ignored": (LossStayedIgnored, "NoiseAtCapacity"),
    "load-window-undone": (LoadWindowUndone, "LoadDecreases"),
    "no-noise": (NoNoise, "NoiseKeepsCapacity"),
    "never-undo": (NeverUndo, "NoiseKeepsCapacity"),
    "load-ignored": (LoadIgnored, "FleetWithinCap"),
    "noise-hides-load": (NoiseHidesLoad, "LoadDecreases"),
    "load-undone": (LoadUndone, "UndoBelowLoad"),
    "cut-by-beta": (CutByBeta, "SizedCut"),
    "cut-by-beta-near-cap": (CutByBeta, "NearCap"),
    "noise-only-falls": (NoiseOnlyFalls, "NoiseKeepsDemand"),
}
