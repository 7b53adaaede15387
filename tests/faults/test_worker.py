"""Faults of the worker and of the manager's life cycle.

The worker thread dying, caller threads dying, shutdown while batches are in
flight, shutdown twice, cleanup of an unknown request, mark_miss of unknown
keys.
"""

from __future__ import annotations

import io
import threading
import time
from collections.abc import Sequence
from typing import Any

import pytest
from fault_harness import Reliability, counters, drive, finish, keys, still_serves

from kvprobe.backends import InMemoryBackend
from kvprobe.statemachine import AsyncLookupManager, ManagerClosedError, NdjsonTrace, ReqContext, ThreadedWorker
from kvprobe.statemachine.trace import read_ndjson
from kvprobe.statemachine.types import Batch, GroupOutcome
from kvprobe.testing.lifetimes import nothing_outlives


class Killer:
    """Raises ``SystemExit`` (which ends the thread it runs on) for the first ``kills`` calls.

    ``SystemExit`` is a ``BaseException``: ``probe_group`` deliberately does not
    swallow it, so it ends whichever thread runs the call.
    """

    def __init__(self, inner: InMemoryBackend, kills: int, *, spare_first: int = 0) -> None:
        self.inner = inner
        self.kills = kills
        self.spare_first = spare_first
        self.calls = 0

    def batch_lookup(self, keys: Sequence[bytes], req_context: object) -> list[bool]:
        self.calls += 1
        if self.calls > self.spare_first and self.kills > 0:
            self.kills -= 1
            raise SystemExit("backend called sys.exit() (injected)")
        return self.inner.batch_lookup(keys, req_context)


# The injected SystemExit ends a thread on purpose; pytest reports every
# thread that ends by an exception.
_thread_ends = pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")


def kill_dispatcher(monkeypatch: pytest.MonkeyPatch, *, kills: int, spare_first: int = 0) -> None:
    """Make the threaded worker's dispatcher end (``SystemExit`` in its own machinery)
    when it starts a call: the first ``spare_first`` starts go through, then ``kills`` die."""
    real = ThreadedWorker._start_call
    starts = [0]

    def start_call(self: ThreadedWorker, *args: Any) -> None:
        starts[0] += 1
        if starts[0] > spare_first and starts[0] <= spare_first + kills:
            raise SystemExit("the dispatcher ends (injected)")
        real(self, *args)

    monkeypatch.setattr(ThreadedWorker, "_start_call", start_call)


@_thread_ends
def test_worker_thread_dies_is_noticed_and_restarted(reliability: Reliability, monkeypatch: pytest.MonkeyPatch) -> None:
    stored = keys("stored", 3)
    inner = InMemoryBackend(stored)
    # r1 is answered; then r2 and r3 are flushed together (one batch of two
    # groups) and the dispatcher ends as it starts r2: both are lost with it.
    kill_dispatcher(monkeypatch, kills=1, spare_first=1)
    with nothing_outlives(), AsyncLookupManager(inner) as m:
        worker = m.worker
        assert isinstance(worker, ThreadedWorker)
        assert drive(m, {"r1": stored[:1]}).of("r1", stored[0]) is True
        wants = {"r2": stored[1:2], "r3": stored[2:]}
        result = drive(m, wants)
        assert result.of("r2", stored[1]) is False
        assert result.of("r3", stored[2]) is False
        stats = m.stats
        assert stats.worker_deaths == 1
        assert stats.failures == {"worker_died": 2}
        leaked = finish(m, ["r1", *wants])
        assert leaked == 0
        m.drain_results()  # Revive
        assert worker.is_alive(), "the manager did not restart the worker"
        still_serves(m, inner.store)
        reliability.record(
            "worker's dispatcher thread dies (death marker; noticed by the next lookup)",
            "scripted (in-memory)",
            delivered=len(result.verdicts),
            asked=2,
            seconds=result.seconds,
            leaked=leaked,
            counters=counters(m, "worker_deaths"),
        )


@_thread_ends
def test_worker_dies_repeatedly(monkeypatch: pytest.MonkeyPatch) -> None:
    stored = keys("stored", 1)
    inner = InMemoryBackend(stored)
    kill_dispatcher(monkeypatch, kills=5)
    with nothing_outlives(), AsyncLookupManager(inner) as m:
        for round_ in range(5):
            result = drive(m, {f"r{round_}": stored})
            assert result.values == [False]
            assert finish(m, [f"r{round_}"]) == 0
        assert m.stats.worker_deaths == 5
        still_serves(m, inner.store)


@_thread_ends
def test_a_backend_raising_system_exit_ends_only_its_caller_thread(reliability: Reliability) -> None:
    stored = keys("stored", 1)
    inner = InMemoryBackend(stored)
    with nothing_outlives(), AsyncLookupManager(Killer(inner, kills=3)) as m:
        worker = m.worker
        assert isinstance(worker, ThreadedWorker)
        worst = 0.0
        for round_ in range(3):
            result = drive(m, {f"r{round_}": stored})
            worst = max(worst, result.seconds)
            assert result.values == [False]
            assert finish(m, [f"r{round_}"]) == 0
        assert m.stats.worker_deaths == 0 and m.stats.failures == {"raised": 3}
        assert worker.is_alive()
        still_serves(m, inner.store)
        reliability.record(
            "backend raises SystemExit 3 times (no timeout)",
            "scripted (in-memory)",
            delivered=3,
            asked=3,
            seconds=worst,
            leaked=len(m),
            counters=counters(m, "backend_errors", "worker_deaths"),
        )


@_thread_ends
def test_caller_thread_dies_under_a_timeout(reliability: Reliability) -> None:
    # With a timeout the call runs on a caller thread.  If a BaseException
    # ends that thread, its slot must not count as "stuck" for ever: more
    # deaths than max_stuck_calls would otherwise saturate the worker and the
    # tier would answer MISS for ever without anybody noticing.
    stored = keys("stored", 1)
    inner = InMemoryBackend(stored)
    max_stuck = 2
    backend = Killer(inner, kills=max_stuck + 3)
    with AsyncLookupManager(backend, lookup_timeout_s=2.0, max_stuck_calls=max_stuck) as m:
        worker = m.worker
        assert isinstance(worker, ThreadedWorker)
        worst = 0.0
        for round_ in range(max_stuck + 3):
            result = drive(m, {f"r{round_}": stored})
            worst = max(worst, result.seconds)
            assert result.values == [False]
            assert finish(m, [f"r{round_}"]) == 0
        assert worker.stuck_calls == 0
        assert m.stats.saturated == 0, m.stats.failures
        assert m.stats.backend_errors == max_stuck + 3
        still_serves(m, inner.store)
        assert worker.caller_threads <= max_stuck + 1
        reliability.record(
            f"caller thread dies {max_stuck + 3} times (SystemExit, timeout set)",
            "scripted (in-memory)",
            delivered=max_stuck + 3,
            asked=max_stuck + 3,
            seconds=worst,
            leaked=len(m),
            counters=counters(m, "backend_errors", "saturated"),
        )


class Blocking:
    def __init__(self, inner: InMemoryBackend) -> None:
        self.inner = inner
        self.release = threading.Event()
        self.entered = threading.Event()

    def batch_lookup(self, keys: Sequence[bytes], req_context: object) -> list[bool]:
        self.entered.set()
        self.release.wait()
        return self.inner.batch_lookup(keys, req_context)


@pytest.mark.parametrize("timeout", [None, 0.5], ids=["no-timeout", "timeout"])
def test_shutdown_while_batches_in_flight(timeout: float | None, reliability: Reliability) -> None:
    stored = keys("stored", 4)
    inner = InMemoryBackend(stored)
    backend = Blocking(inner)
    m = AsyncLookupManager(backend, lookup_timeout_s=timeout, shutdown_timeout_s=0.5)
    worker = m.worker
    assert isinstance(worker, ThreadedWorker)
    for step in range(3):
        for i, key in enumerate(stored):
            assert m.lookup(key + bytes([step]), ReqContext(f"r{step}-{i}")) is None
        m.flush()
    assert backend.entered.wait(10)
    assert len(m) == 12
    started = time.monotonic()
    m.shutdown()
    took = time.monotonic() - started
    # Bounded by shutdown_timeout_s (the worker thread is abandoned, not waited for).
    assert took < 5.0, f"shutdown took {took:.2f} s"
    assert len(m) == 0 and m.closed
    for call in (
        lambda: m.lookup(stored[0], ReqContext("late")),
        m.flush,
        m.drain_results,
        lambda: m.cleanup("r0-0"),
        lambda: m.mark_miss(stored[:1]),
        lambda: m.phase(stored[0]),
    ):
        with pytest.raises(ManagerClosedError, match="shut down"):
            call()
    assert issubclass(ManagerClosedError, RuntimeError)
    # The abandoned call returns: nothing is published into the closed manager
    # and the worker's threads end.
    backend.release.set()
    deadline = time.monotonic() + 10
    while (worker.is_alive() or worker.caller_threads) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not worker.is_alive() and worker.caller_threads == 0
    assert len(m) == 0 and len(m.core.inbox) == 0
    if timeout is None:
        reliability.record(
            "shutdown() with 3 batches in flight on a hung backend (shutdown_timeout_s=0.5)",
            "scripted (in-memory)",
            delivered=0,
            asked=12,
            verdicts="none due: closed (12 states reclaimed)",
            seconds=took,
            leaked=len(m),
            counters="later calls raise ManagerClosedError; the time is shutdown()'s",
        )


def test_shutdown_twice_and_context_exit_after_shutdown() -> None:
    with AsyncLookupManager(InMemoryBackend()) as m:
        m.lookup(b"k" * 16, ReqContext("r"))
        m.shutdown()
        m.shutdown()
        assert len(m) == 0
    m.shutdown()
    assert m.closed


def test_cleanup_of_unknown_request_changes_nothing() -> None:
    stored = keys("stored", 2)
    with AsyncLookupManager(InMemoryBackend(stored)) as m:
        before = drive(m, {"r1": stored})
        m.cleanup("nobody")
        m.cleanup("nobody")
        m.cleanup("")
        assert m.stats.unknown_cleanups == 3
        assert len(m) == 2
        assert drive(m, {"r1": stored}).values == before.values == [True, True]
        assert finish(m, ["r1"]) == 0
        m.cleanup("r1")  # a second cleanup of a finished request is unknown too
        assert m.stats.unknown_cleanups == 4


def test_mark_miss_of_unknown_keys_changes_nothing() -> None:
    stored = keys("stored", 2)
    with AsyncLookupManager(InMemoryBackend(stored)) as m:
        m.mark_miss(stored)  # nobody asked yet: no state to force
        m.mark_miss([])
        m.mark_miss(iter([b"\x00" * 16]))
        assert m.stats.unknown_mark_miss == 3
        assert m.stats.forced_misses == 0
        assert len(m) == 0
        # The next lookups probe afresh: the unknown mark_miss did not stick.
        assert drive(m, {"r1": stored}).values == [True, True]
        assert finish(m, ["r1"]) == 0


def test_a_call_answered_after_shutdown_ends_its_caller_thread() -> None:
    # The call outlives shutdown but not its timeout: its caller thread goes
    # back to the worker after stop() told the idle callers to end, and must
    # be told too (it used to wait on its queue for ever).
    stored = keys("after-stop", 1)
    backend = Blocking(InMemoryBackend(stored))
    m = AsyncLookupManager(backend, lookup_timeout_s=30.0, shutdown_timeout_s=0.2)
    worker = m.worker
    assert isinstance(worker, ThreadedWorker)
    assert m.lookup(stored[0], ReqContext("r")) is None
    m.flush()
    assert backend.entered.wait(10)
    m.shutdown()
    assert worker.caller_threads == 1
    backend.release.set()
    deadline = time.monotonic() + 10
    while (worker.is_alive() or worker.caller_threads) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not worker.is_alive() and worker.caller_threads == 0
    assert len(m.core.inbox) == 0


class GatedBackend:
    """Answers True for every key, once ``gate`` is set."""

    def __init__(self) -> None:
        self.gate = threading.Event()

    def batch_lookup(self, keys: Sequence[bytes], req_context: Any) -> list[bool]:
        self.gate.wait(10)
        return [True] * len(keys)


@_thread_ends
def test_a_call_running_when_its_dispatcher_dies_publishes_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    # The model's Die loses the groups the worker held; a call that returns
    # after its dispatcher died must not publish behind the death marker.
    backend = GatedBackend()
    kill_dispatcher(monkeypatch, kills=1, spare_first=1)  # r1's call starts; the dispatcher dies starting r2's
    events: list[dict[str, object]] = []
    with nothing_outlives(), AsyncLookupManager(backend, trace=events.append, max_concurrent_groups=2) as m:
        worker = m.worker
        assert isinstance(worker, ThreadedWorker)
        k1, k2 = b"k1", b"k2"
        m.lookup(k1, ReqContext("r1"))
        m.lookup(k2, ReqContext("r2"))
        m.flush()
        deadline = time.monotonic() + 10
        while m.stats.worker_deaths == 0 and time.monotonic() < deadline:
            assert m.lookup(k1, ReqContext("r1")) in (None, False)
            time.sleep(0.001)
        assert m.lookup(k1, ReqContext("r1")) is False and m.lookup(k2, ReqContext("r2")) is False
        backend.gate.set()  # r1's call returns now, after the death
        while not worker._idle and time.monotonic() < deadline:  # its caller decided and went idle
            time.sleep(0.001)
        assert worker._idle, "r1's caller never finished"
        m.drain_results()
        after_death = [e["action"] for e in events[[e["action"] for e in events].index("Die") :]]
        assert "CompleteGroup" not in after_death, after_death
        assert m.stats.stale_results_dropped == 0 and m.stats.late_results == 0
        m.cleanup("r1")
        m.cleanup("r2")
        assert len(m) == 0


# --- a worker of its own that publishes the wrong number of verdicts -------------------------------


class MiscountingWorker:
    """A custom worker that answers each group at once with ``extra`` verdicts more than keys
    (fewer when negative), all True: it skips ``probe_group``'s length check."""

    def __init__(self, extra: int) -> None:
        self.extra = extra
        self.publish: Any = None

    def start(self, backend: object, publish: Any) -> None:
        self.publish = publish

    def submit(self, batch: Batch) -> None:
        for group in batch.groups:
            self.publish(GroupOutcome(group, (True,) * max(0, len(group.states) + self.extra)))

    def is_alive(self) -> bool:
        return True

    def stop(self, timeout_s: float) -> None:
        self.publish = None


@pytest.mark.parametrize("extra", [-1, -3, 1], ids=["one-short", "none", "one-long"])
def test_an_outcome_with_the_wrong_number_of_verdicts_resolves_every_key_as_miss(extra: int) -> None:
    with AsyncLookupManager(InMemoryBackend(), worker=MiscountingWorker(extra), checked=True) as m:
        wanted = keys("miscounted", 3)
        answers = drive(m, {"r": wanted}, bound_s=5.0).values
        assert answers == [False, False, False], "no key of a miscounted outcome is left unanswered, none is trusted"
        kind = "short_result" if extra < 0 else "long_result"
        assert m.stats.failures == {kind: 1}
        assert (m.stats.backend_calls, m.stats.backend_errors, m.stats.misses) == (1, 1, 3)
        assert m.core.outstanding == {}
        finish(m, ["r"])
        assert len(m) == 0


@pytest.mark.parametrize("extra", [-1, 2])
def test_a_miscounted_outcome_is_traced_as_the_failure_the_core_applied(extra: int) -> None:
    stream = io.StringIO()
    with AsyncLookupManager(InMemoryBackend(), worker=MiscountingWorker(extra), trace=NdjsonTrace(stream)) as m:
        drive(m, {"r": keys("traced", 2)}, bound_s=5.0)
        finish(m, ["r"])
    (drain,) = [e for e in read_ndjson(stream.getvalue().splitlines()) if e["action"] == "Drain"]
    assert (drain["verdicts"], drain["failure"]) == (None, "short_result" if extra < 0 else "long_result")
