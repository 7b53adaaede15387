"""One ``Retry-After`` costs a probe's wait, not every key for its whole length (issue 39: Retry-After).

A store's ``Retry-After: 30`` used to refuse every reservation for 30 s: a
call with a 5 s deadline shed every key although the store, answering again
a second later, could have served them.  The hold stands for new HEADs, but
one probe per ``HOLD_PROBE_S`` may test the store; an answer to a query sent
during the hold ends it.  On the virtual clock, no sleeping.
"""

from __future__ import annotations

from pace_sim import ServedStore, VirtualLookup

from kvprobe.backends._pace_core import HOLD_PROBE_S, PaceCore


def _held(now: float = 0.0) -> PaceCore:
    core = PaceCore(now)
    core.failed(now, now, 1, retry_after_s=30.0)
    assert core.stats.holds == 1
    return core


def test_a_store_that_answers_again_ends_the_hold_after_one_probe() -> None:
    core = _held()
    assert core.reserve(0.5, 4, not_after=5.5) is None  # before the first probe: the hold stands
    start = core.reserve(HOLD_PROBE_S, 4, not_after=HOLD_PROBE_S + 5.0)
    assert start == HOLD_PROBE_S  # the probe goes out at once
    core.answered(start + 0.01, start, 4)  # the store answered it
    later = core.reserve(start + 0.02, 16, not_after=start + 5.0)
    assert later is not None and later <= start + 0.02 + core.burst_s  # the hold is over: no key shed


def test_a_store_still_refusing_gets_one_probe_per_interval() -> None:
    core = _held()
    now = HOLD_PROBE_S
    probes = 0
    while now < 10.0:
        start = core.reserve(now, 1, not_after=now + 1e-3)
        if start is not None:
            probes += 1
            core.failed(start + 0.01, start, 1)  # failed, no new Retry-After: the hold stands
        now += 0.05
    # One probe per interval at most, over 9 s of a 30 s hold.
    assert 1 <= probes <= int(9.0 / HOLD_PROBE_S) + 1, probes
    assert core.reserve(10.0, 1, not_after=10.0 + 1e-3) is None or core.hold_until < 10.0


def test_an_answer_to_a_query_sent_before_the_hold_does_not_end_it() -> None:
    core = PaceCore(0.0)
    core.failed(1.0, 0.9, 1, retry_after_s=30.0)
    core.answered(1.1, 0.95, 1)  # sent before the hold was set: says nothing of the store since
    assert core.reserve(1.2, 1, not_after=6.0) is None


def calls_that_lost_stored_keys(retry_after_s: float, seconds: int = 40) -> int:
    """A call of 250 keys (half stored) every second, ``deadline_s=5``; one ``Retry-After`` at t = 5 s.

    Returns how many calls answered any stored key False.  The store (2,000
    HEAD/s) answers everything: the hold alone costs the verdicts.
    """
    core = PaceCore(0.0)
    lookup = VirtualLookup(ServedStore(2000.0), core, seed=7)
    truths = [[i % 2 == 0 for i in range(250)] for _ in range(seconds)]
    calls = [lookup.call(float(t), truth) for t, truth in enumerate(truths)]
    lookup.at(5.0, lambda: core.failed(lookup.now, lookup.now, 1, retry_after_s=retry_after_s))
    lookup.run_until(seconds + lookup.deadline_s + 1.0)
    lost = 0
    for call, truth in zip(calls, truths, strict=True):
        assert call.verdicts is not None
        lost += any(is_stored and not verdict for verdict, is_stored in zip(call.verdicts, truth, strict=True))
    return lost


def test_one_retry_after_costs_no_call_on_a_store_that_answers() -> None:
    # Before the probe, Retry-After: 30 made 26 of these 40 calls lose their stored keys.
    assert calls_that_lost_stored_keys(30.0) == 0
    assert calls_that_lost_stored_keys(5.0) == 0
