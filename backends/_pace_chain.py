"""A chain of the pace's decreases begun where the demand, not the rate, set the sends; and its verdict.

Why.  Unpaced, or paced above what the client sends, a window failing a
few percent cannot say whether the store refuses load or loses a share of
whatever it is sent (a flaky gateway, a busy engine's own timeouts): the
sends did not press on the rate.  The first decrease tests it.  Its rate
is held while the windows after it are pooled, quiet ones too (at a 1 %
share a window of 64 HEADs holds no failure half the time), and the pool
decides: the share stayed (loss that is not load: undone), it fell
beyond chance (load: the decreases stand), or ``CHAIN_WINDOWS`` windows
could not tell (they stand).  Pure, as :mod:`kvprobe.backends._pace_core`,
which keeps one chain at most and acts on its verdict.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from kvprobe.backends._pace_windows import fell

__all__ = ["CHAIN_WINDOWS", "ChainVerdict", "DemandChain"]

# Windows a chain pools at most, its rate held: undecided then (failures
# too rare to tell a fall), its decreases stand.
CHAIN_WINDOWS = 8


class ChainVerdict(enum.Enum):
    """What the windows pooled since a chain's first decrease say of it."""

    OPEN = "open"  # not enough windows yet: the rate stays held
    STANDS = "stands"  # load (or undecided after CHAIN_WINDOWS): the decreases stand
    UNDONE = "undone"  # the share stayed: loss that is not load, the decreases are undone


@dataclass
class DemandChain:
    """The decreases since the first one of a chain, and the windows pooled since.

    ``cut_rate``: the rate its first decrease set (HEAD/s).
    ``first_share``: the share of HEADs that failed in the window that began
    it, or in the next if more (one window of a few HEADs may have failed
    well under the store's share).  ``pooled_heads`` and ``pooled_failed``:
    the HEADs of the windows pooled since, and how many of them failed
    (a share times HEADs, so not a whole number).
    """

    cut_rate: float
    first_share: float
    pooled_heads: int = 0
    pooled_failed: float = 0.0
    windows: int = 0

    @property
    def share(self) -> float:
        """The share of the pooled HEADs that failed (0.0 before any window is pooled)."""
        return self.pooled_failed / self.pooled_heads if self.pooled_heads else 0.0

    def pool(self, heads: int, failed: float) -> None:
        """Add a window of ``heads`` HEADs of which the share ``failed`` failed."""
        self.pooled_heads += heads
        self.pooled_failed += failed * heads
        self.windows += 1

    def verdict(self, held: float | None, noise: float, window_heads: int, beta: float) -> ChainVerdict:
        """The chain's verdict after a window was pooled, at the rate ``held`` it was sent under.

        UNDONE once two windows (and two windows' HEADs) are pooled at a
        rate no higher than the chain's first decrease set and their share
        is at least a third of ``first_share`` or of ``noise``, the lower
        (a chain begun on a window over the noise limit: its first share is
        the noise's tail, the pool's is the noise itself), and at most
        ``1 - beta``; STANDS once the pooled share fell beyond chance, or
        after ``CHAIN_WINDOWS`` windows; else OPEN.
        """
        share = self.share
        if (
            self.windows >= 2
            and self.pooled_heads >= 2 * window_heads
            # The rate is held at the chain's cut while it is open, or lower
            # after later decreases in it: only a floor above the cut
            # (a cut below the floor) sends above it.
            and held is not None
            and held <= self.cut_rate * (1 + 1e-9)
            and min(self.first_share, noise or self.first_share) / 3 <= share <= 1 - beta
        ):
            return ChainVerdict.UNDONE
        if (self.windows >= 2 and fell(self.first_share, share, round(self.pooled_heads))) or (
            self.windows >= CHAIN_WINDOWS
        ):
            return ChainVerdict.STANDS
        return ChainVerdict.OPEN
