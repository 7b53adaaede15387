"""Regression tests for the attacks of issue 12 on the manager's shell and its drivers.

Each test names the defect it reproduces (the issue's item number).  Every
test that starts threads or processes checks with
:func:`kvprobe.testing.lifetimes.nothing_outlives` that they have all ended
after shutdown (item 13).
"""

from __future__ import annotations

import gc
import os
import signal
import threading
import time
from collections.abc import Iterator, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from fault_harness import calls_from_another_thread, drive, finish, keys, process_alive, still_serves
from helper_backends import marker, scripted_factory

from kvprobe.backends import FsBackend, InMemoryBackend
from kvprobe.backends.process import ProcessBackend
from kvprobe.statemachine import (
    AsyncLookupManager,
    Batch,
    InvalidInputError,
    InvalidValueError,
    ManagerClosedError,
    ReqContext,
    ThreadedWorker,
    WrongThreadError,
)
from kvprobe.statemachine.workers import ManualWorker
from kvprobe.testing.lifetimes import Lifetimes, nothing_outlives

A = ReqContext("a")
_thread_ends = pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")


def _snapshot(m: AsyncLookupManager) -> tuple[object, ...]:
    core = m.core
    return (
        {k: (s.phase, s.verdict, frozenset(s.waiters)) for k, s in core.states.items()},
        {r: len(w.states) for r, w in core.requests.items()},
        len(core.step_batch),
        len(core.outstanding),
    )


# --- item 13: the lifetime check itself has power ----------------------------------------


def test_the_lifetime_check_catches_a_thread_left_running() -> None:
    release = threading.Event()
    snapshot = Lifetimes()
    leaked = threading.Thread(target=release.wait, name="leaked-on-purpose", daemon=True)
    leaked.start()
    with pytest.raises(AssertionError, match="leaked-on-purpose"):
        snapshot.assert_ended(bound_s=0.2)
    # Limited to the manager's names, a foreign thread is not the manager's to end.
    assert Lifetimes(prefix="kvprobe-", threads=snapshot.threads).survivors() == []
    named = threading.Thread(target=release.wait, name="kvprobe-leaked-on-purpose", daemon=True)
    named.start()
    with pytest.raises(AssertionError, match="kvprobe-leaked-on-purpose"):
        Lifetimes(prefix="kvprobe-", threads=snapshot.threads).assert_ended(bound_s=0.2)
    release.set()
    snapshot.assert_ended()


def test_an_idle_caller_thread_ends_at_shutdown() -> None:
    # The hazard item 13 names: with a timeout, an idle caller thread waits
    # for work; shutdown must end it.
    with nothing_outlives():
        with AsyncLookupManager(InMemoryBackend([b"k"]), lookup_timeout_s=5) as m:
            assert drive(m, {"r": [b"k"]}).values == [True]
            worker = m.worker
            assert isinstance(worker, ThreadedWorker) and worker.caller_threads >= 1


# --- item 1: timeouts threading cannot wait for ----------------------------------------


@pytest.mark.parametrize("argument", ["lookup_timeout_s", "shutdown_timeout_s"])
@pytest.mark.parametrize("value", [1e300, threading.TIMEOUT_MAX * 2])
def test_a_timeout_above_timeout_max_is_refused(argument: str, value: float) -> None:
    with nothing_outlives():
        with pytest.raises(
            InvalidValueError, match=rf"{argument} must be positive and finite, got .* \(at most threading.TIMEOUT_MAX"
        ):
            AsyncLookupManager(InMemoryBackend(), **{argument: value})
    with pytest.raises(InvalidValueError, match="TIMEOUT_MAX"):
        ThreadedWorker(lookup_timeout_s=1e300)


def test_the_worker_survives_an_exception_of_its_own_machinery(monkeypatch: pytest.MonkeyPatch) -> None:
    stored = keys("stored", 2)
    real_new_caller = ThreadedWorker._new_caller
    failures = [RuntimeError("can't start new thread (injected)")]

    def flaky_new_caller(self: ThreadedWorker) -> Any:
        if failures:
            raise failures.pop()
        return real_new_caller(self)

    monkeypatch.setattr(ThreadedWorker, "_new_caller", flaky_new_caller)
    with nothing_outlives():
        with AsyncLookupManager(InMemoryBackend(stored), lookup_timeout_s=5) as m:
            first = drive(m, {"r1": stored[:1]})
            assert first.values == [False]  # the group whose call could not start
            assert m.stats.failures == {"worker_error": 1} and m.stats.worker_deaths == 0
            assert m.worker.is_alive()
            assert drive(m, {"r2": stored[1:]}).values == [True]
            assert finish(m, ["r1", "r2"]) == 0


# --- item 2: shutdown is complete whatever the worker does ------------------------------


class _StopRaises(ManualWorker):
    def stop(self, timeout_s: float) -> None:
        super().stop(timeout_s)
        raise RuntimeError("worker.stop failed (injected)")


def test_shutdown_reclaims_everything_even_if_the_worker_raises() -> None:
    m = AsyncLookupManager(InMemoryBackend([b"k"]), worker=_StopRaises())
    m.lookup(b"k", A)
    m.flush()
    assert len(m) == 1
    with pytest.raises(RuntimeError, match=r"worker\.stop failed"):
        m.shutdown()
    assert m.closed and len(m) == 0
    m.shutdown()  # idempotent: nothing left to do
    assert len(m) == 0
    for call in (lambda: m.lookup(b"k", A), m.flush, m.drain_results, lambda: m.cleanup("a")):
        with pytest.raises(ManagerClosedError):
            call()


# --- item 12: a worker whose submit raises ---------------------------------------------


class _SubmitRaises(ManualWorker):
    def submit(self, batch: Batch) -> None:
        raise RuntimeError("queue full (injected)")


def test_a_failing_submit_resolves_the_batch_as_miss() -> None:
    m = AsyncLookupManager(InMemoryBackend([b"k"]), worker=_SubmitRaises())
    try:
        assert m.lookup(b"k", A) is None
        m.flush()  # does not raise: a worker fault never reaches the scheduler
        assert m.lookup(b"k", A) is False
        assert m.stats.failures == {"worker_error": 1} and m.stats.backend_calls == 0
        assert not m.core.outstanding
        m.cleanup("a")
        assert len(m) == 0
    finally:
        m.shutdown()


# --- item 7: a lookup notices a dead worker ----------------------------------------------


def _poll_with_lookups_only(m: AsyncLookupManager, key: bytes, bound_s: float = 10.0) -> bool:
    """The README's loop after the step that flushed: lookups, no flush, no drain_results."""
    deadline = time.monotonic() + bound_s
    while time.monotonic() < deadline:
        verdict = m.lookup(key, A)
        if verdict is not None:
            return verdict
        time.sleep(0.002)
    raise AssertionError(f"no verdict within {bound_s} s from lookups alone")


@_thread_ends
@pytest.mark.parametrize("exc", [KeyboardInterrupt, SystemExit])
def test_a_backend_raising_base_exception_still_gives_a_verdict_to_lookups(exc: type[BaseException]) -> None:
    class Raises:
        def batch_lookup(self, keys: Sequence[bytes], req_context: object) -> list[bool]:
            raise exc("injected")

    with nothing_outlives():
        with AsyncLookupManager(Raises()) as m:
            m.lookup(b"k", A)
            m.flush()
            assert _poll_with_lookups_only(m, b"k") is False


@_thread_ends
def test_a_dead_dispatcher_is_noticed_by_lookup_through_its_death_marker(monkeypatch: pytest.MonkeyPatch) -> None:
    real_start_call = ThreadedWorker._start_call
    kills = [SystemExit("dispatcher ends (injected)")]

    def dying_start_call(self: ThreadedWorker, *args: Any) -> None:
        if kills:
            raise kills.pop()
        real_start_call(self, *args)

    monkeypatch.setattr(ThreadedWorker, "_start_call", dying_start_call)
    with nothing_outlives():
        with AsyncLookupManager(InMemoryBackend([b"k", b"j"])) as m:
            m.lookup(b"k", A)
            m.flush()
            assert _poll_with_lookups_only(m, b"k") is False
            assert m.stats.worker_deaths == 1 and m.stats.failures == {"worker_died": 1}
            assert drive(m, {"b": [b"j"]}).values == [True]  # flush revived it
            assert m.stats.worker_deaths == 1  # counted once


def test_a_manual_death_marker_fails_open_groups_at_the_next_lookup() -> None:
    m = AsyncLookupManager(InMemoryBackend([b"k"]), worker="manual")
    worker = m.worker
    assert isinstance(worker, ManualWorker)
    m.lookup(b"k", A)
    m.flush()
    worker.die(publish_marker=True)
    assert m.lookup(b"k", A) is False
    assert m.stats.worker_deaths == 1
    m.flush()  # revives without counting the death again
    assert worker.is_alive() and m.stats.worker_deaths == 1
    m.shutdown()


# --- item 10: a second thread is refused outside checked mode ------------------------------


def test_scheduler_calls_from_a_second_thread_raise_wrong_thread_error() -> None:
    stored = keys("stored", 2)
    with nothing_outlives():
        m = AsyncLookupManager(InMemoryBackend(stored))
        try:
            assert drive(m, {"r1": stored}).values == [True, True]
            before = _snapshot(m)
            calls = {
                "flush": m.flush,
                "drain_results": m.drain_results,
                "cleanup": lambda: m.cleanup("r1"),
                "mark_miss": lambda: m.mark_miss(stored),
                "phase": lambda: m.phase(stored[0]),
            }
            errors = calls_from_another_thread(calls)
            for name in calls:
                assert isinstance(errors[name], WrongThreadError), f"{name} from another thread: {errors[name]!r}"
                assert "intruder" in str(errors[name])
            assert _snapshot(m) == before
            assert finish(m, ["r1"]) == 0
        finally:
            m.shutdown()


# --- item 11: one rule for bad input --------------------------------------------------------


@pytest.mark.parametrize("worker", [None, 123, object()], ids=["None", "int", "object"])
def test_a_worker_that_is_not_a_worker_is_refused(worker: object) -> None:
    with nothing_outlives():
        with pytest.raises(InvalidInputError, match="worker must be 'thread', 'manual' or an object with start"):
            AsyncLookupManager(InMemoryBackend(), worker=worker)  # type: ignore[arg-type]


def test_a_name_that_is_not_a_string_is_refused() -> None:
    with nothing_outlives():
        with pytest.raises(InvalidInputError, match="name must be a str, got NoneType"):
            AsyncLookupManager(InMemoryBackend(), name=None)  # type: ignore[arg-type]


def test_a_mark_miss_iterable_that_raises_changes_nothing() -> None:
    def broken() -> Iterator[bytes]:
        yield b"k"
        raise ValueError("generator broke (injected)")

    m = AsyncLookupManager(InMemoryBackend([b"k"]), worker="manual")
    m.lookup(b"k", A)
    before = _snapshot(m)
    with pytest.raises(InvalidInputError, match="could not read its keys: ValueError: generator broke"):
        m.mark_miss(broken())
    assert _snapshot(m) == before and m.stats.forced_misses == 0
    m.shutdown()


@pytest.mark.parametrize("key", [[1], "a", bytearray(b"k")], ids=["list", "str", "bytearray"])
def test_phase_of_a_non_bytes_key_is_refused(key: object) -> None:
    m = AsyncLookupManager(InMemoryBackend(), worker="manual")
    with pytest.raises(InvalidInputError, match="phase\\(\\) keys must be bytes"):
        m.phase(key)  # type: ignore[arg-type]
    m.shutdown()


def test_with_on_a_closed_manager_raises() -> None:
    m = AsyncLookupManager(InMemoryBackend(), worker="manual")
    m.shutdown()
    with pytest.raises(ManagerClosedError), m:
        pass


def test_an_empty_fs_root_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match="root must name a directory, got an empty path"):
        FsBackend("")


def test_a_process_factory_that_builds_no_backend_is_refused() -> None:
    with nothing_outlives():
        with pytest.raises(TypeError, match=r"callable batch_lookup.*it built a dict"):
            ProcessBackend(partial(dict))


# --- item 5: a dropped manager's threads end ---------------------------------------------------


@pytest.mark.parametrize("timeout", [None, 5.0])
def test_managers_dropped_without_shutdown_leave_no_thread(timeout: float | None) -> None:
    with nothing_outlives():
        for _ in range(10):
            m = AsyncLookupManager(InMemoryBackend([b"k"]), lookup_timeout_s=timeout)
            assert drive(m, {"r": [b"k"]}).values == [True]
            del m
        gc.collect()


def test_a_process_backend_dropped_without_close_leaves_no_helper(tmp_path: Path) -> None:
    with nothing_outlives():
        backend = ProcessBackend(partial(FsBackend, str(tmp_path)))
        assert backend.batch_lookup([b"k" * 16], None) == [False]
        del backend
        gc.collect()


# --- item 4: fork ---------------------------------------------------------------------------------


def _in_child(body: Any) -> int:
    """Run ``body()`` in a fork child; return its exit code (its return value, 99 on an exception)."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover - runs in the child
        code = 99
        try:
            code = int(body())
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_a_process_backend_in_a_fork_child_never_crosses_answers(tmp_path: Path) -> None:
    root = tmp_path / "tier"
    writer = FsBackend(root)
    stored = keys("stored", 8)
    absent = keys("absent", 8)
    for k in stored:
        writer.store(k)
    with nothing_outlives():
        backend = ProcessBackend(partial(FsBackend, str(root)), max_procs=1)
        try:
            assert backend.batch_lookup(stored, None) == [True] * 8  # the helper is up
            parent_helpers = set(backend.pids)

            def child() -> int:
                wrong = 0
                for _ in range(200):
                    wrong += sum(backend.batch_lookup(absent, None))
                if set(backend.pids) & parent_helpers:
                    return 3  # still using the parent's helper
                backend.close()
                return 0 if wrong == 0 else 2

            pid = os.fork()
            if pid == 0:  # pragma: no cover - runs in the child
                code = 99
                try:
                    code = child()
                finally:
                    os._exit(code)
            wrong_here = 0
            for _ in range(200):
                wrong_here += 8 - sum(backend.batch_lookup(stored, None))
            _, status = os.waitpid(pid, 0)
            assert os.waitstatus_to_exitcode(status) == 0, "the child got wrong verdicts or used the parent's helper"
            assert wrong_here == 0
        finally:
            backend.close()


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_a_threaded_manager_in_a_fork_child_starts_afresh() -> None:
    stored = keys("stored", 2)
    release = threading.Event()

    class Slow:
        def batch_lookup(self, keys: Sequence[bytes], req_context: object) -> list[bool]:
            if keys[0] == stored[1]:
                release.wait(10)
            return [k in stored for k in keys]

    with nothing_outlives():
        with AsyncLookupManager(Slow(), lookup_timeout_s=5) as m:
            assert drive(m, {"warm": stored[:1]}).values == [True]  # leaves an idle caller thread
            m.lookup(stored[1], A)
            m.flush()  # in flight in the parent when the child is made

            def child() -> int:
                # The in-flight group resolves from lookups alone (death marker), and a
                # new group is served by the child's own threads.
                if _poll_with_lookups_only(m, stored[1], bound_s=10) is not False:
                    return 2
                m.cleanup("a")
                fresh = drive(m, {"child": stored[:1]}, bound_s=10)
                if fresh.values != [True]:
                    return 3
                m.shutdown()
                return 0

            assert _in_child(child) == 0
            release.set()
            assert drive(m, {"parent": stored[1:]}).values == [True]


# --- item 6: ProcessBackend's defaults recover from frozen helpers ---------------------------------


def test_frozen_helpers_are_replaced_with_the_defaults(tmp_path: Path) -> None:
    root = tmp_path / "tier"
    writer = FsBackend(root)
    stored = keys("stored", 4)
    for k in stored:
        writer.store(k)
    with nothing_outlives(bound_s=20):
        backend = ProcessBackend(scripted_factory(root))
        try:
            with AsyncLookupManager(backend, lookup_timeout_s=0.5, max_stuck_calls=2) as m:
                # Two calls stuck in two helpers, which are then frozen (SIGSTOP).
                frozen: list[int] = []
                for i in range(2):
                    m.lookup(marker("sleep", 600), ReqContext(f"stuck{i}"))
                    m.flush()
                    time.sleep(0.3)
                deadline = time.monotonic() + 10
                while len(frozen) < 2 and time.monotonic() < deadline:
                    frozen = [int(line.split()[0]) for line in _helper_pids(backend)]
                    time.sleep(0.05)
                for pid in frozen:
                    os.kill(pid, signal.SIGSTOP)
                result = drive(m, {"r": stored}, bound_s=30)
                assert result.values == [True] * 4
                for pid in frozen:  # the defaults killed them
                    deadline = time.monotonic() + 20
                    while process_alive(pid) and time.monotonic() < deadline:
                        time.sleep(0.05)
                    assert not process_alive(pid), f"frozen helper {pid} still alive"
                finish(m, ["r", "stuck0", "stuck1"])
                still_serves(m, writer.store)
        finally:
            backend.close()


def _helper_pids(backend: ProcessBackend) -> list[str]:
    with backend._lock:
        return [f"{h.process.pid}" for h in backend._busy]
