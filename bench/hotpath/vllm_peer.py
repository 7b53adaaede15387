"""vLLM's own released lookup manager as a contender in ``bench.hotpath.cost``.

``python -m bench.hotpath.cost --peer vllm`` times kvprobe's manager against the
``AsyncLookupManager`` that vLLM ships (``vllm.v1.kv_offload.tiering.
async_lookup``), imported from an installed vLLM (``make test-vllm`` builds
a venv with the pinned release; its python runs this).  Nothing of vLLM's is
copied here: the class is subclassed with the same instant tier as the
baseline, and its worker thread is stopped so that the benchmark answers
its batches off the clock, as it does for the other managers.
"""

from __future__ import annotations

import queue
from collections.abc import Iterable, Sequence
from typing import Any

from bench.common import Impl, StoredByHash

__all__ = ["VLLM_MODULE", "vllm_impl"]

VLLM_MODULE = "vllm.v1.kv_offload.tiering.async_lookup"


class _Submitted:
    """How many batches vLLM's manager has flushed and the benchmark not yet answered."""

    def __init__(self, lookup_queue: Any) -> None:
        self._queue = lookup_queue

    def __len__(self) -> int:
        return int(self._queue.qsize())


def vllm_impl(fraction: float = 0.5) -> Impl:
    """vLLM's released manager over an instant tier, pumped by the benchmark.

    Raises:
        ImportError: vLLM is not installed in this Python (the message says how to get it).
    """
    import importlib

    try:
        released = importlib.import_module(VLLM_MODULE)
    except ImportError as exc:
        raise ImportError(
            f"--peer vllm needs vLLM's {VLLM_MODULE}: run `make test-vllm` once, then "
            "`.venv-vllm/bin/python -m bench.hotpath.cost --peer vllm`"
        ) from exc
    tier = StoredByHash(fraction)

    class InstantTier(released.AsyncLookupManager):  # type: ignore[misc,name-defined]
        def batch_lookup(self, keys: list[bytes], req_context: Any) -> Iterable[bool]:
            return tier.batch_lookup(keys, req_context)

    manager = InstantTier("bench")
    # Stop vLLM's worker thread (its shutdown sentinel) and answer batches here.
    manager._lookup_queue.put(None)
    manager._thread.join()
    states = manager._lookup_state

    def pump() -> bool:
        try:
            batch: Sequence[tuple[bytes, Any, int]] = manager._lookup_queue.get_nowait()
        except queue.Empty:
            return False
        keys = [key for key, _, _ in batch]
        found = tier.batch_lookup(keys, None)
        manager._pending_results.put([(key, gen, hit) for (key, _, gen), hit in zip(batch, found, strict=True)])
        return True

    def phase_of(key: bytes) -> str | None:
        state = states.get(key)
        return None if state is None else str(state.phase.name)

    def shutdown() -> None:
        manager.drain_results()

    manager.shutdown = shutdown  # its thread is already stopped
    return Impl("vllm", manager, pump, phase_of, _Submitted(manager._lookup_queue))
