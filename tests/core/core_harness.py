"""A manager on a manual worker, shared by the core tests."""

from __future__ import annotations

from kvprobe.backends import InMemoryBackend
from kvprobe.statemachine import AsyncLookupManager, ManualWorker


class Manual:
    """A manager on a manual worker, with checked mode and a trace on."""

    def __init__(self, stored: tuple[bytes, ...] = ()) -> None:
        self.backend = InMemoryBackend(stored)
        self.events: list[dict[str, object]] = []
        self.m = AsyncLookupManager(self.backend, worker="manual", checked=True, trace=self.events.append)
        assert isinstance(self.m.worker, ManualWorker)
        self.worker: ManualWorker = self.m.worker
