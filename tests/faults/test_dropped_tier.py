"""A manager dropped without ``shutdown`` stops its threads, even when its backend refers back to it.

The vLLM drop-in is its own backend: the manager's worker calls the tier's
``batch_lookup``, and the tier owns the manager.  The worker's threads and
the manager's finalizer must not keep that loop reachable, or the finalizer
that stops the threads never runs.  The same holds for any backend that
keeps a reference to its manager.
"""

from __future__ import annotations

import gc
import threading
import weakref
from collections.abc import Iterable, Sequence

from fault_harness import drive

from kvprobe.backends import InMemoryBackend
from kvprobe.integrations.vllm import AsyncLookupManager as DropIn
from kvprobe.statemachine import AsyncLookupManager, ReqContext
from kvprobe.testing.lifetimes import nothing_outlives


class StoredTier(DropIn):
    """A drop-in tier holding ``b"k"``."""

    def batch_lookup(self, keys: list[bytes], req_context: object) -> Iterable[bool]:
        return [key == b"k" for key in keys]


class BackendOwningItsManager:
    """A backend that keeps a reference to the manager serving it (as a drop-in tier does)."""

    def __init__(self) -> None:
        self.inner = InMemoryBackend([b"k"])
        self.manager: AsyncLookupManager | None = None

    def batch_lookup(self, keys: Sequence[bytes], req_context: object) -> list[bool]:
        return self.inner.batch_lookup(keys, req_context)


class GatedTier(DropIn):
    """A drop-in tier whose calls wait until ``release`` is set."""

    def __init__(self, tier_type: str) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()
        super().__init__(tier_type)

    def batch_lookup(self, keys: list[bytes], req_context: object) -> Iterable[bool]:
        self.entered.set()
        assert self.release.wait(30.0), "the test never released the call"
        return [False] * len(keys)


def _answered(tier: DropIn) -> bool | None:
    """Look ``b"k"`` up through ``tier`` until it has a verdict."""
    return drive(tier.manager, {"r": [b"k"]}).values[0]


def test_a_drop_in_tier_dropped_without_shutdown_leaves_no_thread() -> None:
    with nothing_outlives():
        for _ in range(3):
            tier = StoredTier("dropped")
            assert _answered(tier) is True
            del tier
        gc.collect()


def test_a_drop_in_tier_dropped_without_shutdown_is_collected() -> None:
    for worker in ("thread", "manual"):
        tier = StoredTier("dropped", worker=worker)
        tier.lookup(b"k", ReqContext("r"))
        tier.flush()
        gone = weakref.ref(tier)
        del tier
        gc.collect()
        assert gone() is None, f"a dropped drop-in tier on the {worker} worker is still reachable"


def test_a_manager_whose_backend_refers_to_it_stops_its_threads_when_dropped() -> None:
    with nothing_outlives():
        backend = BackendOwningItsManager()
        m = AsyncLookupManager(backend, name="loop")
        backend.manager = m
        assert drive(m, {"r": [b"k"]}).values == [True]
        del m, backend
        gc.collect()


def test_a_dropped_drop_in_tier_with_a_call_running_ends_its_threads_when_the_call_returns() -> None:
    with nothing_outlives():
        tier = GatedTier("busy")
        tier.lookup(b"k", ReqContext("r"))
        tier.flush()
        assert tier.entered.wait(10.0)
        release = tier.release
        del tier
        gc.collect()  # the running call holds the tier: nothing is collected yet
        release.set()  # the call returns; its thread lets go of the tier
        for _ in range(50):
            gc.collect()
            if not any(t.name.startswith("kvprobe-busy") for t in threading.enumerate()):
                break
            threading.Event().wait(0.05)
