"""A model of S3 answering HEADs for one key prefix, on a virtual clock.

The key space ``[0, 1)`` (a key's position: its first 8 bytes as a fraction;
kvprobe's object names start with the key's hex, so S3's lexicographic
partitions cut this space in intervals) is cut into partitions.  Each
partition serves ``head_limit_per_s`` HEADs per second from a token bucket of
``burst_s`` seconds; a HEAD that finds the bucket empty is answered
``503 SlowDown``.  A partition that keeps throttling, with no quiet second,
for ``split_after_s`` splits into two halves.  Every HEAD takes a lognormal
round trip (a 503 as long as an answer).

Counted inside the measurement window ``[measure_from, measure_to)``:
arrivals, throttled answers, and each partition's arrivals per whole second
(its peak is the largest of those counts).  At the end, the partitions
throttling through the whole window without a quiet second (those that
would split if the load went on) are counted as ``hot``.
"""

from __future__ import annotations

import bisect
import math
import random
from dataclasses import dataclass

from bench.fleet.params import StoreParams

__all__ = ["Partition", "S3Model", "key_position"]

_SCALE = 2.0**-64


def key_position(key: bytes) -> float:
    """Where ``key`` falls in the store's key space: its first 8 bytes as a fraction of 2**64."""
    return int.from_bytes(key[:8].ljust(8, b"\0"), "big") * _SCALE


@dataclass
class Partition:
    lo: float
    hi: float
    tokens: float
    refilled_at: float
    hot_since: float | None = None  # start of the current run of throttling
    last_throttle: float = -math.inf
    second: int = -1  # the whole second being counted
    count: int = 0  # arrivals in it


class S3Model:
    """S3's HEAD path: partitions with a rate limit, 503s above it, splits, RTTs.

    Args:
        params: the store's figures.
        rng: draws the RTTs.
        measure_from, measure_to: the window whose load is counted.
    """

    def __init__(self, params: StoreParams, rng: random.Random, measure_from: float, measure_to: float) -> None:
        if params.partitions < 1 or params.head_limit_per_s <= 0:
            raise ValueError(f"a store needs partitions >= 1 and a positive limit, got {params}")
        self.p = params
        self._rng = rng
        self._mu = math.log(params.rtt_median_s)
        self._depth = max(1.0, params.head_limit_per_s * params.burst_s)
        n = params.partitions
        self.parts = [Partition(i / n, (i + 1) / n, self._depth, 0.0) for i in range(n)]
        self._los = [part.lo for part in self.parts]
        self.measure_from = measure_from
        self.measure_to = measure_to
        self.arrivals = 0  # every HEAD ever received
        self.throttled_total = 0
        self.measured = 0  # HEADs received inside the window
        self.measured_throttled = 0
        self.peak_per_partition = 0  # most arrivals at one partition in one whole second of the window
        self.splits: list[float] = []  # when each split happened
        self.hot = 0  # partitions throttling through the whole window (set by finish)
        #: Per whole second of virtual time: [HEADs received, of which throttled].
        self.series: dict[int, list[int]] = {}

    def head(self, position: float, now: float) -> tuple[bool, float]:
        """One HEAD arriving at ``now`` for the key at ``position``: (throttled, round trip in seconds)."""
        index = bisect.bisect_right(self._los, position) - 1
        part = self.parts[index]
        tokens = part.tokens + (now - part.refilled_at) * self.p.head_limit_per_s
        part.tokens = self._depth if tokens > self._depth else tokens
        part.refilled_at = now
        throttled = part.tokens < 1.0
        if throttled:
            if part.hot_since is None or now - part.last_throttle > 1.0:
                part.hot_since = now
            part.last_throttle = now
        else:
            part.tokens -= 1.0
        self.arrivals += 1
        self.throttled_total += throttled
        tally = self.series.get(int(now))
        if tally is None:
            tally = self.series[int(now)] = [0, 0]
        tally[0] += 1
        tally[1] += throttled
        if self.measure_from <= now < self.measure_to:
            self.measured += 1
            self.measured_throttled += throttled
            second = int(now)
            if second != part.second:
                self._close_second(part)
                part.second = second
                part.count = 0
            part.count += 1
        if throttled and part.hot_since is not None and now - part.hot_since >= self.p.split_after_s:
            self._split(index, now)
        return throttled, self._rng.lognormvariate(self._mu, self.p.rtt_sigma)

    def finish(self) -> None:
        """Count the seconds still open and the hot partitions (call once the window is over)."""
        self.hot = 0
        for part in self.parts:
            self._close_second(part)
            part.second = -1
            # A run of throttling with no quiet second that spans the window.
            started = part.hot_since is not None and part.hot_since <= self.measure_from
            self.hot += started and part.last_throttle >= self.measure_to - 1.0

    def _close_second(self, part: Partition) -> None:
        # Only whole seconds inside the window count towards the peak.
        if part.second >= 0 and part.second >= self.measure_from and part.second + 1 <= self.measure_to:
            self.peak_per_partition = max(self.peak_per_partition, part.count)

    def _split(self, index: int, now: float) -> None:
        if len(self.parts) >= self.p.max_partitions:
            return
        part = self.parts[index]
        self._close_second(part)
        mid = (part.lo + part.hi) / 2
        halves = [Partition(part.lo, mid, self._depth, now), Partition(mid, part.hi, self._depth, now)]
        self.parts[index : index + 1] = halves
        self._los = [p.lo for p in self.parts]
        self.splits.append(now)
