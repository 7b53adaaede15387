"""``kvprobe_backend_call_duration_seconds`` times each call from its own start.

With groups running at once, a slow call's answer arrives after fast calls
started later have answered; timing it from the last publication instead of
its own start recorded a one-second call as a few milliseconds.  The
durations compared here are sleeps inside the backend (a floor, never a
ceiling), so no assertion depends on how fast the machine is.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence

from kvprobe.backends import InMemoryBackend
from kvprobe.metrics import MeteredCore, MeteredManager
from kvprobe.statemachine import ReqContext, ThreadedWorker
from kvprobe.testing.lifetimes import nothing_outlives

SLOW_S = 1.0
FAST_S = 0.01


class Sleepy:
    """Sleeps ``SLOW_S`` for the request ``"slow"``, ``FAST_S`` for any other, then answers."""

    def __init__(self) -> None:
        self.inner = InMemoryBackend()
        self.slow_returned = threading.Event()

    def batch_lookup(self, keys: Sequence[bytes], req_context: object) -> list[bool]:
        slow = getattr(req_context, "req_id", "") == "slow"
        time.sleep(SLOW_S if slow else FAST_S)
        if slow:
            self.slow_returned.set()
        return self.inner.batch_lookup(keys, req_context)


def _observations_above(core: MeteredCore, seconds: float) -> int:
    core.fold()
    buckets, _ = core.call_seconds.snapshot()
    counts = dict(buckets)
    return int(counts["+Inf"] - counts[repr(seconds)])


def test_a_slow_call_among_fast_ones_is_recorded_at_its_own_length() -> None:
    backend = Sleepy()
    with nothing_outlives():
        m = MeteredManager(backend, worker=ThreadedWorker(name="timed", busy_call_hold_s=0))
        m.lookup(b"slow-key", ReqContext("slow"))
        m.flush()
        # Fast groups keep answering while the slow call runs: one new
        # request per step until the slow answer is in.
        step = 0
        while not backend.slow_returned.is_set():
            m.lookup(b"fast-%d" % step, ReqContext(f"fast-{step}"))
            m.flush()
            step += 1
            time.sleep(FAST_S)
        while m.core.outstanding:
            time.sleep(FAST_S)
            m.drain_results()
        core = m.core
        assert isinstance(core, MeteredCore)
        assert step > 10, "fast groups answered while the slow call ran"
        assert _observations_above(core, 0.5) >= 1, "the 1 s call is recorded at 0.5 s or more"
        assert core.call_seconds.count == step + 1
        m.shutdown()
