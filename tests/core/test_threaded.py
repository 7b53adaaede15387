"""The default threaded worker: every failure mode resolves as MISS and service goes on."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pytest

from kvprobe.backends import InMemoryBackend
from kvprobe.statemachine import (
    AsyncLookupManager,
    InvalidInputError,
    InvalidValueError,
    ReqContext,
    ThreadedWorker,
    WrongThreadError,
)
from kvprobe.testing.lifetimes import nothing_outlives

A = ReqContext("a")


def wait_verdict(m: AsyncLookupManager, key: bytes, ctx: ReqContext = A, bound_s: float = 10.0) -> bool:
    """Poll like a scheduler (lookup, flush) until the verdict arrives; fail past the bound."""
    deadline = time.monotonic() + bound_s
    while time.monotonic() < deadline:
        verdict = m.lookup(key, ctx)
        if verdict is not None:
            return verdict
        m.flush()
        time.sleep(0.001)
    raise AssertionError(f"no verdict for {key!r} within {bound_s} s")


class Scripted:
    """A backend whose answer for each call is produced by a function of the keys."""

    def __init__(self, answer: Callable[[Sequence[bytes]], object]) -> None:
        self.answer = answer
        self.calls = 0

    def batch_lookup(self, keys: Sequence[bytes], req_context: object) -> object:
        self.calls += 1
        return self.answer(keys)


def test_threaded_verdicts_and_visibility() -> None:
    with AsyncLookupManager(InMemoryBackend([b"yes"])) as m:
        assert m.lookup(b"yes", A) is None and m.lookup(b"no", A) is None
        m.flush()
        assert wait_verdict(m, b"yes") is True
        assert m.lookup(b"no", A) is False
        m.cleanup("a")
        assert len(m) == 0


def _raise(keys: Sequence[bytes]) -> object:
    raise OSError("tier unreachable")


def _lazy_raise(keys: Sequence[bytes]) -> Iterator[bool]:
    yield True
    raise OSError("broke while iterating")


@pytest.mark.parametrize(
    ("answer", "kind"),
    [
        (_raise, "raised"),
        (_lazy_raise, "raised_while_iterating"),
        (lambda keys: [True] * (len(keys) - 1), "short_result"),
        (lambda keys: [True] * (len(keys) + 1), "long_result"),
        (lambda keys: [1] * len(keys), "bad_verdict"),
        (lambda keys: None, "raised_while_iterating"),  # not iterable: TypeError when iterated
    ],
)
def test_backend_failures_resolve_miss_and_are_counted(answer: Callable[[Sequence[bytes]], object], kind: str) -> None:
    with AsyncLookupManager(Scripted(answer)) as m:
        m.lookup(b"k1", A)
        m.lookup(b"k2", A)
        m.flush()
        assert wait_verdict(m, b"k1") is False and m.lookup(b"k2", A) is False
        stats = m.stats
        assert stats.failures == {kind: 1} and stats.backend_errors == 1
        # The worker keeps serving.
        m.lookup(b"k3", A)
        m.flush()
        assert wait_verdict(m, b"k3") is False
        assert m.stats.backend_calls == 2


def test_timeout_resolves_miss_then_late_answer_is_dropped() -> None:
    release = threading.Event()

    def slow(keys: Sequence[bytes]) -> list[bool]:
        release.wait(10)
        return [True] * len(keys)

    with AsyncLookupManager(Scripted(slow), lookup_timeout_s=0.05) as m:
        m.lookup(b"k", A)
        m.flush()
        assert wait_verdict(m, b"k") is False
        assert m.stats.timeouts == 1
        release.set()
        deadline = time.monotonic() + 10
        while m.stats.late_results == 0 and time.monotonic() < deadline:
            m.drain_results()
            time.sleep(0.001)
        assert m.stats.late_results == 1 and m.stats.stale_results_dropped == 1
        assert m.lookup(b"k", A) is False  # the late True did not override the MISS


def test_hung_calls_keep_threads_bounded_and_fail_fast_as_saturated() -> None:
    release = threading.Event()

    def hang(keys: Sequence[bytes]) -> list[bool]:
        release.wait(10)
        return [True] * len(keys)

    with AsyncLookupManager(Scripted(hang), lookup_timeout_s=0.02, max_stuck_calls=2) as m:
        worker = m.worker
        assert isinstance(worker, ThreadedWorker)
        for i in range(6):
            ctx = ReqContext(f"r{i}")
            m.lookup(b"key%d" % i, ctx)
            m.flush()
            assert wait_verdict(m, b"key%d" % i, ctx) is False
        assert worker.caller_threads <= 3 and worker.stuck_calls == 2
        assert m.stats.timeouts == 2 and m.stats.saturated == 4
        release.set()
        deadline = time.monotonic() + 10
        while worker.stuck_calls and time.monotonic() < deadline:
            time.sleep(0.005)
        ctx = ReqContext("after")
        m.lookup(b"fresh", ctx)
        m.flush()
        assert wait_verdict(m, b"fresh", ctx) is True  # service resumed


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_dead_worker_is_noticed_and_replaced(monkeypatch: pytest.MonkeyPatch) -> None:
    real = ThreadedWorker._start_call
    kills = [SystemExit("the dispatcher ends (injected)")]

    def start_call(self: ThreadedWorker, *args: Any) -> None:
        if kills:
            raise kills.pop()
        real(self, *args)

    monkeypatch.setattr(ThreadedWorker, "_start_call", start_call)
    backend = Scripted(lambda keys: [True] * len(keys))
    with nothing_outlives(), AsyncLookupManager(backend) as m:
        m.lookup(b"k", A)
        m.flush()
        assert wait_verdict(m, b"k") is False
        assert m.stats.worker_deaths == 1 and m.stats.failures == {"worker_died": 1}
        m.lookup(b"k2", A)
        m.flush()
        assert wait_verdict(m, b"k2") is True


def test_shutdown_with_calls_in_flight_returns_promptly() -> None:
    release = threading.Event()

    def hang(keys: Sequence[bytes]) -> list[bool]:
        release.wait(10)
        return [True] * len(keys)

    m = AsyncLookupManager(Scripted(hang), shutdown_timeout_s=0.2)
    m.lookup(b"k", A)
    m.flush()
    time.sleep(0.02)
    started = time.monotonic()
    m.shutdown()
    assert time.monotonic() - started < 5
    assert len(m) == 0 and m.closed
    release.set()


def test_checked_mode_rejects_a_second_thread() -> None:
    with AsyncLookupManager(InMemoryBackend(), checked=True) as m:
        m.lookup(b"k", A)
        errors: list[BaseException] = []

        def other() -> None:
            try:
                m.lookup(b"k", ReqContext("b"))
            except BaseException as exc:
                errors.append(exc)

        thread = threading.Thread(target=other)
        thread.start()
        thread.join()
        assert len(errors) == 1 and isinstance(errors[0], WrongThreadError)
        assert "thread" in str(errors[0])


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (lambda m: m.lookup("text", A), InvalidInputError, "keys must be bytes, got str"),
        (lambda m: m.lookup([1], A), InvalidInputError, "keys must be bytes, got list"),
        (lambda m: m.lookup(b"k", object()), InvalidInputError, "has no"),
        (lambda m: m.lookup(b"k", ReqContext(7)), InvalidInputError, "req_id must be a str"),  # type: ignore[arg-type]
        (lambda m: m.mark_miss(b"k"), InvalidInputError, "single bytes"),
        (lambda m: m.mark_miss(["k"]), InvalidInputError, "must be bytes, got str"),
        (lambda m: m.cleanup(3), InvalidInputError, "request id string"),
    ],
)
def test_bad_input_is_a_typed_error_and_changes_nothing(
    call: Callable[[AsyncLookupManager], object], error: type[Exception], message: str
) -> None:
    with AsyncLookupManager(InMemoryBackend()) as m:
        with pytest.raises(error, match=message):
            call(m)
        assert len(m) == 0 and m.core.requests == {} and m.core.step_batch == []


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"lookup_timeout_s": -1}, InvalidValueError, "positive"),
        ({"lookup_timeout_s": 0}, InvalidValueError, "positive"),
        ({"lookup_timeout_s": float("nan")}, InvalidValueError, "positive"),
        ({"lookup_timeout_s": float("inf")}, InvalidValueError, "finite"),
        ({"lookup_timeout_s": "1"}, InvalidInputError, "number of seconds, got str"),
        ({"lookup_timeout_s": True}, InvalidInputError, "got bool"),
        ({"worker": "threads"}, InvalidValueError, "worker must be"),
        ({"max_stuck_calls": 0}, InvalidValueError, "max_stuck_calls"),
    ],
)
def test_bad_construction_arguments(kwargs: dict[str, object], error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message):
        AsyncLookupManager(InMemoryBackend(), **kwargs)  # type: ignore[arg-type]


def test_backend_without_batch_lookup_is_rejected() -> None:
    with pytest.raises(InvalidInputError, match="batch_lookup"):
        AsyncLookupManager(object())  # type: ignore[arg-type]


def test_random_churn_leaves_nothing_behind() -> None:
    import random

    rng = random.Random(7)
    stored = {b"k%03d" % i for i in range(0, 200, 3)}
    with AsyncLookupManager(InMemoryBackend(stored)) as m:
        live: list[ReqContext] = []
        for step in range(300):
            for _ in range(rng.randrange(3)):
                live.append(ReqContext(f"r{step}-{rng.randrange(10**6)}"))
            for ctx in live:
                for _ in range(5):
                    key = b"k%03d" % rng.randrange(200)
                    verdict = m.lookup(key, ctx)
                    assert verdict is None or verdict == (key in stored) or m.core.states[key].verdict is False
            if live and rng.random() < 0.1:
                m.mark_miss([b"k%03d" % rng.randrange(200)])
            m.flush()
            while live and rng.random() < 0.5:
                m.cleanup(live.pop(rng.randrange(len(live))).req_id)
            m.core.check_invariants()
        for ctx in live:
            m.cleanup(ctx.req_id)
        deadline = time.monotonic() + 10
        while len(m) and time.monotonic() < deadline:
            m.drain_results()
            time.sleep(0.001)
        assert len(m) == 0
        assert m.stats.probes_created > 100
