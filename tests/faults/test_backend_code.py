"""Faults in backend code: raises, bad results, never returns.

The backend is an :class:`InMemoryBackend` behind a wrapper that misbehaves
while ``faulty`` is set; each test then clears the fault and checks the same
manager still gives a stored key a true verdict.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence

import pytest
from fault_harness import Reliability, counters, drive, finish, keys, still_serves

from kvprobe.backends import InMemoryBackend
from kvprobe.statemachine import AsyncLookupManager, FailureKind, ThreadedWorker

Misbehaviour = Callable[[list[bool]], Iterable[object]]


def _raise_at_call(verdicts: list[bool]) -> Iterable[object]:
    raise OSError(5, "Input/output error (injected)")


def _raise_while_iterated(verdicts: list[bool]) -> Iterator[object]:
    yield verdicts[0]
    raise ConnectionResetError("connection reset while reading results (injected)")


def _short(verdicts: list[bool]) -> Iterable[object]:
    return verdicts[:-1]


def _long(verdicts: list[bool]) -> Iterable[object]:
    return [*verdicts, True]


def _endless(verdicts: list[bool]) -> Iterator[object]:
    while True:
        yield True


def _non_bool(verdicts: list[bool]) -> Iterable[object]:
    # 1/0 look like verdicts but are not bools; the contract says bool.
    return [int(v) for v in verdicts]


def _none_for_missing(verdicts: list[bool]) -> Iterable[object]:
    # The NIXL style (a dict when found, None when missing) leaking through.
    return [{"size": 1} if v else None for v in verdicts]


def _not_iterable(verdicts: list[bool]) -> object:
    return None


class Faulty:
    """Answers through ``misbehave`` while ``faulty`` is set, honestly otherwise."""

    def __init__(self, inner: InMemoryBackend, misbehave: Misbehaviour) -> None:
        self.inner = inner
        self.misbehave = misbehave
        self.faulty = True

    def batch_lookup(self, keys: Sequence[bytes], req_context: object) -> Iterable[object]:
        verdicts = self.inner.batch_lookup(keys, req_context)
        return self.misbehave(verdicts) if self.faulty else verdicts


CASES = [
    ("raises at call", _raise_at_call, FailureKind.RAISED),
    ("raises while iterated", _raise_while_iterated, FailureKind.RAISED_WHILE_ITERATING),
    ("returns None (not iterable)", _not_iterable, FailureKind.RAISED_WHILE_ITERATING),
    ("short result", _short, FailureKind.SHORT_RESULT),
    ("long result", _long, FailureKind.LONG_RESULT),
    ("endless result", _endless, FailureKind.LONG_RESULT),
    ("non-bool verdict (int)", _non_bool, FailureKind.BAD_VERDICT),
    ("non-bool verdict (dict/None)", _none_for_missing, FailureKind.BAD_VERDICT),
]


@pytest.mark.parametrize("timeout", [None, 5.0], ids=["no-timeout", "timeout"])
@pytest.mark.parametrize(("fault", "misbehave", "kind"), CASES, ids=[c[0] for c in CASES])
def test_backend_error_resolves_as_miss(
    fault: str, misbehave: Misbehaviour, kind: FailureKind, timeout: float | None, reliability: Reliability
) -> None:
    # With a timeout the call runs on a caller thread; without, on the worker
    # thread itself: both paths must turn the fault into a MISS.
    stored = keys("stored", 3)
    inner = InMemoryBackend(stored)
    backend = Faulty(inner, misbehave)
    wants = {"r1": [*stored, *keys("absent", 2)], "r2": stored[:2]}
    # Faulty deliberately breaks the Backend protocol (non-bool results).
    with AsyncLookupManager(backend, lookup_timeout_s=timeout) as m:  # type: ignore[arg-type]
        result = drive(m, wants)
        # Every key of a failed call is a MISS, even the stored ones.
        assert result.values == [False] * 7
        stats = m.stats
        assert stats.backend_errors >= 1
        assert stats.failures.get(kind.value, 0) == stats.backend_errors, stats.failures
        assert stats.timeouts == 0
        leaked = finish(m, list(wants))
        assert leaked == 0
        backend.faulty = False
        still_serves(m, inner.store)
        if timeout is not None:
            reliability.record(
                f"backend {fault}",
                "scripted (in-memory)",
                delivered=len(result.verdicts),
                asked=7,
                seconds=result.seconds,
                leaked=leaked,
                counters=counters(m, "backend_errors"),
            )


class Hanging:
    """``batch_lookup`` blocks until ``release`` is set (while ``hang`` is)."""

    def __init__(self, inner: InMemoryBackend) -> None:
        self.inner = inner
        self.hang = True
        self.release = threading.Event()
        self.entered = 0
        self.returned = 0
        self._lock = threading.Lock()

    def batch_lookup(self, keys: Sequence[bytes], req_context: object) -> list[bool]:
        if self.hang:
            with self._lock:
                self.entered += 1
            self.release.wait()
            with self._lock:
                self.returned += 1
        return self.inner.batch_lookup(keys, req_context)


def test_never_returns_times_out_and_late_answer_is_dropped(reliability: Reliability) -> None:
    stored = keys("stored", 4)
    inner = InMemoryBackend(stored)
    backend = Hanging(inner)
    with AsyncLookupManager(backend, lookup_timeout_s=0.2) as m:
        result = drive(m, {"r1": stored})
        assert result.values == [False] * 4
        assert m.stats.timeouts == 1 and m.stats.failures == {"timeout": 1}
        assert finish(m, ["r1"]) == 0
        # The stuck call returns: its answer (True for every key) is late and
        # must not resurrect or override anything.
        backend.hang = False
        backend.release.set()
        deadline = time.monotonic() + 10
        while m.stats.late_results < 1 and time.monotonic() < deadline:
            m.drain_results()
            time.sleep(0.005)
        assert m.stats.late_results == 1
        assert m.stats.hits == 0 and len(m) == 0
        still_serves(m, inner.store)
        reliability.record(
            "backend never returns (timeout 0.2 s), returns later",
            "scripted (in-memory)",
            delivered=len(result.verdicts),
            asked=4,
            seconds=result.seconds,
            leaked=len(m),
            counters=counters(m, "timeouts", "late_results"),
        )


def test_late_answer_does_not_override_a_new_probe() -> None:
    # The timed-out generation's answer (True) arrives while a new request
    # holds a new probe of the same key; the new probe's verdict must be its own.
    key = keys("k", 1)[0]
    inner = InMemoryBackend([key])
    backend = Hanging(inner)
    with AsyncLookupManager(backend, lookup_timeout_s=0.2) as m:
        assert drive(m, {"r1": [key]}).values == [False]
        assert finish(m, ["r1"]) == 0
        inner.remove(key)
        backend.hang = False
        result = drive(m, {"r2": [key]})
        backend.release.set()
        deadline = time.monotonic() + 10
        while m.stats.late_results < 1 and time.monotonic() < deadline:
            m.drain_results()
            time.sleep(0.005)
        assert m.stats.late_results == 1
        assert result.values == [False]
        assert drive(m, {"r2": [key]}).values == [False], "a late True overrode the new probe's verdict"
        assert finish(m, ["r2"]) == 0


@pytest.mark.parametrize(("max_stuck", "concurrent"), [(1, 1), (3, 1), (1, 4), (3, 4)])
def test_hung_calls_keep_threads_bounded_and_service_resumes(
    max_stuck: int, concurrent: int, reliability: Reliability
) -> None:
    # Policy (statemachine/workers.py): a group starts only while fewer than
    # max_stuck_calls calls run on past their timeout; otherwise it fails at
    # once as SATURATED instead of starting another thread.  The calls
    # running together may all time out at once, so at worst
    # max_stuck_calls + max_concurrent_groups - 1 are stuck (exactly
    # max_stuck_calls when groups run one at a time).
    stored = keys("stored", 2)
    inner = InMemoryBackend(stored)
    backend = Hanging(inner)
    threads_before = threading.active_count()
    n_requests = 40
    wants = {f"r{i}": keys(f"req{i}", 2) for i in range(n_requests)}
    with AsyncLookupManager(
        backend, lookup_timeout_s=0.1, max_stuck_calls=max_stuck, max_concurrent_groups=concurrent
    ) as m:
        worker = m.worker
        assert isinstance(worker, ThreadedWorker)
        peak_threads = 0
        peak_callers = 0

        def watch(step: int) -> None:
            nonlocal peak_threads, peak_callers
            peak_threads = max(peak_threads, threading.active_count())
            peak_callers = max(peak_callers, worker.caller_threads)

        result = drive(m, wants, between_steps=watch)
        assert finish(m, list(wants)) == 0
        # Two more rounds of hung requests after saturation: still no new threads.
        for extra in range(2):
            more = {f"x{extra}-{i}": keys(f"x{extra}-{i}", 1) for i in range(10)}
            assert drive(m, more, between_steps=watch).values == [False] * 10
            assert finish(m, list(more)) == 0
        watch(0)
        assert result.values == [False] * (2 * n_requests)
        stats = m.stats
        stuck = stats.timeouts
        assert max_stuck <= stuck <= max_stuck + concurrent - 1, stats.failures
        if concurrent == 1:
            assert stuck == max_stuck
        assert stats.saturated == n_requests + 20 - stuck
        # A timed-out caller may reach batch_lookup late on a loaded machine:
        # wait (bounded) for the stuck ones, then none may be beyond them.
        deadline = time.monotonic() + 10
        while backend.entered < stuck and time.monotonic() < deadline:
            time.sleep(0.005)
        assert backend.entered == stuck, "a call was started while the worker was saturated"
        assert worker.stuck_calls == stuck
        # Caller threads: the stuck ones plus at most max_concurrent_groups at work.
        assert peak_callers <= max_stuck + concurrent
        # The dispatcher, the callers, nothing else.
        assert peak_threads <= threads_before + 1 + max_stuck + concurrent, (peak_threads, threads_before)

        # The hung calls return: their late answers are dropped, the stuck
        # slots free up, and the tier serves true verdicts again.
        backend.hang = False
        backend.release.set()
        deadline = time.monotonic() + 10
        while worker.stuck_calls and time.monotonic() < deadline:
            m.drain_results()
            time.sleep(0.005)
        assert worker.stuck_calls == 0
        m.drain_results()
        assert m.stats.late_results == stuck
        still_serves(m, inner.store)
        assert worker.caller_threads <= max_stuck + concurrent
        reliability.record(
            f"{n_requests + 20} groups on a backend that never returns "
            f"(max_stuck_calls={max_stuck}, max_concurrent_groups={concurrent})",
            "scripted (in-memory)",
            delivered=len(result.verdicts),
            asked=2 * n_requests,
            seconds=result.seconds,
            leaked=len(m),
            counters=counters(m, "timeouts", "saturated", "late_results") + f"; peak caller threads {peak_callers}",
        )


def test_slow_but_within_timeout_is_a_true_verdict() -> None:
    # The timeout must not turn a merely slow answer into a MISS.
    stored = keys("stored", 2)
    inner = InMemoryBackend(stored)

    class Slow:
        def batch_lookup(self, keys: Sequence[bytes], req_context: object) -> list[bool]:
            time.sleep(0.05)
            return inner.batch_lookup(keys, req_context)

    with AsyncLookupManager(Slow(), lookup_timeout_s=5.0) as m:
        assert drive(m, {"r1": stored}).values == [True, True]
        assert m.stats.timeouts == 0
        assert finish(m, ["r1"]) == 0
