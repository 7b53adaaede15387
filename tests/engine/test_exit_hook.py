"""The exit hook: ``stop_live_workers`` lets running backend calls return first (in-process), and a
call that outlives the wait ends the process before the interpreter finalizes (in a child process)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from types import SimpleNamespace

from kvprobe.statemachine import AsyncLookupManager
from kvprobe.statemachine.threaded_worker import end_before_finalization, stop_live_workers


class HeldBackend:
    """Each call waits for ``release`` (at most 30 s); ``entered`` is set once a call runs; ``returned`` counts."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()
        self.returned = 0

    def batch_lookup(self, keys: list[bytes], req_context: object) -> list[bool]:
        self.entered.set()
        self.release.wait(30)
        self.returned += 1
        return [False] * len(keys)


def _in_flight(backend: HeldBackend) -> AsyncLookupManager:
    manager = AsyncLookupManager(backend, name="held")
    manager.lookup(b"k", SimpleNamespace(req_id="r"))
    manager.flush()
    assert backend.entered.wait(10), "the worker never called the backend"
    return manager


def test_waits_for_a_running_call_to_return() -> None:
    backend = HeldBackend()
    manager = _in_flight(backend)
    threading.Timer(0.2, backend.release.set).start()
    left = stop_live_workers(20.0)
    assert left == []
    assert backend.returned == 1, "the hook came back before the call returned"
    assert manager.worker.threads == []  # type: ignore[attr-defined]
    manager.shutdown()


def test_names_the_threads_still_inside_a_call_after_the_wait() -> None:
    backend = HeldBackend()
    manager = _in_flight(backend)
    try:
        left = stop_live_workers(0.05)
        assert left and all(t.name.startswith("kvprobe-held") for t in left)
        assert backend.returned == 0
    finally:
        backend.release.set()
        manager.shutdown()


#: A process whose one backend call outlives the exit hook's wait; argv[1] says how its script ends.
_HELD_AT_EXIT = """
import atexit, os, sys, threading
from types import SimpleNamespace
from kvprobe.statemachine import AsyncLookupManager, threaded_worker

# Registered after kvprobe's hook, so run before it: its line is still buffered when the hook ends the process.
atexit.register(print, "written at exit", end="")

def tell_finalized(event, args, write=os.write):  # CPython raises these only while it finalizes
    if event in ("cpython.PyInterpreterState_Clear", "cpython._PySys_ClearAuditHooks"):
        write(2, b"interpreter finalized")

sys.addaudithook(tell_finalized)

class Held:
    def batch_lookup(self, keys, req_context):
        entered.set()
        threading.Event().wait(600)  # the store never answers
        return [False] * len(keys)

entered = threading.Event()
threaded_worker.EXIT_WAIT_S = 0.2
manager = AsyncLookupManager(Held(), name="held")
manager.lookup(b"k", SimpleNamespace(req_id="r"))
manager.flush()
assert entered.wait(30)
if sys.argv[1] == "raise":
    raise RuntimeError("the engine failed")
"""


def _run_held(ending: str) -> subprocess.CompletedProcess[str]:
    buffered = {name: value for name, value in os.environ.items() if name != "PYTHONUNBUFFERED"}
    return subprocess.run(
        [sys.executable, "-c", _HELD_AT_EXIT, ending],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=buffered,  # the streams buffer, as in a service: the hook must flush them
    )


def test_a_call_outliving_the_wait_ends_the_process_with_status_0_before_finalization() -> None:
    done = _run_held("return")
    assert done.returncode == 0, done.stderr
    assert "1 thread(s) still inside a backend call at exit (kvprobe-held-call)" in done.stderr
    assert done.stdout == "written at exit", "the standard streams were not flushed before the process ended"
    assert "interpreter finalized" not in done.stderr, "the call could come back while the interpreter finalized"


def test_after_an_uncaught_exception_the_status_stays_1() -> None:
    done = _run_held("raise")
    assert done.returncode == 1, done.stderr
    assert "RuntimeError: the engine failed" in done.stderr
    assert "ending the process with status 1" in done.stderr


def test_ending_before_finalization_does_nothing_when_no_call_is_left() -> None:
    end_before_finalization([])  # returns: this test process goes on
