"""What the pace measures: a window of query outcomes, and whether a share of failed HEADs fell beyond chance.

Pure (no clock, lock or I/O), as :mod:`kvprobe.backends._pace_core`, whose
rules judge one :class:`Window` at a time.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["Window", "fell"]


@dataclass
class Window:
    """The outcomes of the queries sent since ``start``, judged together once there are enough of them."""

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
        """Count a query's outcome, unless it was sent before the window opened (an older rate's)."""
        if sent_at >= self.start:
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
