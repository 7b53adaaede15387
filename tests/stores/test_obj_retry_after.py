"""A store's ``Retry-After`` (issue 39 part 3): parsed without ever raising, and no parse can lose a call.

The parser reads what a server sent: any text at all.  It is documented never
to raise, and the lookup engine calls it (through ``retry_after_of``) on its
own thread for every failed query; an exception there would end the call
with its answered keys lost and its queued queries still queued.
"""

from __future__ import annotations

import math
import threading
import time
from typing import Any

import pytest
from hypothesis import example, given, strategies as st
from obj_fakes import FakeStore

from kvprobe.backends._obj_lookup import ChunkedLookup, RetryPolicy
from kvprobe.backends._pacing import Pacer, parse_retry_after


def _http_dates() -> st.SearchStrategy[str]:
    """RFC 7231-shaped dates with any year, time and zone: the parser's second branch, at its edges."""
    return st.builds(
        "{} {:02d} {} {:04d} {:02d}:{:02d}:{:02d} {}".format,
        st.sampled_from(["Mon,", "Fri,", ""]),
        st.integers(0, 40),
        st.sampled_from(["Jan", "Dec", "Foo"]),
        st.integers(0, 99999),
        st.integers(0, 99),
        st.integers(0, 99),
        st.integers(0, 99),
        st.one_of(st.sampled_from(["GMT", "UTC", "EST", "+0000", "-2359", "+2359"]), st.from_regex(r"[+-][0-9]{4,9}")),
    )


@given(st.one_of(st.text(), _http_dates(), st.from_regex(r"\s*[0-9]{1,400}\s*", fullmatch=True)))
@example("²")  # a digit to str.isdigit, not to float()
@example("\u0661\u0662")  # Arabic-Indic digits: not HTTP's delta-seconds
@example("Fri, 31 Dec 9999 23:59:59 -2359")  # a date whose zone takes it past datetime's range
@example("Mon, 01 Jan 0001 00:00:00 +2359")
def test_the_parser_never_raises_and_answers_none_or_a_finite_wait(value: str) -> None:
    seconds = parse_retry_after(value, now_epoch_s=1.7e9)
    assert seconds is None or (isinstance(seconds, float) and 0.0 <= seconds < math.inf), seconds


def test_delta_seconds_are_ascii_digits_only() -> None:
    assert parse_retry_after("\u0661\u0662") is None and parse_retry_after("²") is None
    assert parse_retry_after("0012") == 12.0
    assert parse_retry_after("9" * 400) == pytest.approx(
        1.7976931348623157e308
    )  # absurd, but a wait: capped by the pace


class _Boom(Exception):
    pass


def test_a_retry_after_reader_that_raises_loses_no_answer_and_leaves_nothing_queued() -> None:
    """Answered keys keep their verdicts; the failed query's keys are retried; no query starts after the call."""
    names = [f"k{i}" for i in range(64)]
    store = FakeStore(set(names[::2]), {"k20": 1})  # one query fails once
    reads: list[BaseException] = []

    def raising_reader(exc: BaseException) -> float | None:
        reads.append(exc)
        raise _Boom("a Retry-After no parser should have let through")

    engine = ChunkedLookup(
        store.query,
        agents=2,
        chunk=8,
        retry=RetryPolicy(0.001, 0.01),
        seed=1,
        pacer=Pacer(),
        retry_after=raising_reader,
    )
    try:
        verdicts, answered, shed, _ = engine.run(names, deadline_s=5.0)
        assert reads, "the failure's Retry-After was never read: the test did not reach the defect"
        assert (verdicts, answered, shed) == ([i % 2 == 0 for i in range(64)], 64, 0)
        queried = sum(store.sizes)
        time.sleep(0.05)
        assert sum(store.sizes) == queried, "a query ran after the call returned"
    finally:
        engine.close()


def test_an_exception_anywhere_in_a_call_cancels_its_queued_queries() -> None:
    """Whatever escapes a call (here: the pace itself), its queries still queued in the pool never run.

    Call B holds both pool threads; call A queues one query behind them, then
    its next reservation raises.  A's queued query must be cancelled with it.
    """
    a_names = [f"a{i}" for i in range(64)]
    b_names = [f"b{i}" for i in range(8)]
    store = FakeStore(set(a_names) | set(b_names), {})
    b_running = threading.Semaphore(0)
    release = threading.Event()

    def query(batch: Any) -> list[Any]:
        if batch[0].startswith("b"):
            b_running.release()
            release.wait(5.0)
        return store.query(batch)

    class BrokenPacer(Pacer):
        reservations = 0

        def reserve(self, heads: int, not_after: float = math.inf) -> float | None:
            BrokenPacer.reservations += 1
            if BrokenPacer.reservations == 4:  # B's two, A's first, then A's second breaks
                raise _Boom("the pace broke")
            return super().reserve(heads, not_after)

    engine = ChunkedLookup(query, agents=2, chunk=4, retry=None, seed=1, pacer=BrokenPacer())
    try:
        b = threading.Thread(target=lambda: engine.run(b_names, deadline_s=5.0))
        b.start()
        assert b_running.acquire(timeout=5.0) and b_running.acquire(timeout=5.0)
        with pytest.raises(_Boom):
            engine.run(a_names, deadline_s=5.0)
        release.set()
        b.join(10.0)
        time.sleep(0.05)
        assert not [first for first in store.order if first.startswith("a")], "call A's queued query ran after it ended"
    finally:
        release.set()
        engine.close()
