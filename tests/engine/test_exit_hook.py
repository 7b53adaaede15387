"""The exit hook's waiting, in-process: ``stop_live_workers`` lets running backend calls return first."""

from __future__ import annotations

import threading
from types import SimpleNamespace

from kvprobe.statemachine import AsyncLookupManager
from kvprobe.statemachine.threaded_worker import stop_live_workers


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
