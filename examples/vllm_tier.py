"""How a vLLM secondary KV-cache tier would delegate its lookups to kvprobe.

vLLM is not imported: ``SecondaryTier`` only shows the shape of the
integration.  The engine-facing hooks (names modelled on vLLM's offloading
manager; adapt them to the version you integrate with) map one-to-one onto
the manager:

=============================  ===============================================
tier hook                      kvprobe call
=============================  ===============================================
``lookup(keys, req)``          ``m.lookup(key, req)`` per block: the number of
                               leading blocks stored, or None = ask next step
``on_schedule_end()``          ``m.flush()``: this step's lookups become one
                               batch for the background worker
``on_request_finished(req)``   ``m.cleanup(req_id)``
``on_load_failed(keys)``       ``m.mark_miss(keys)``: never claim them again
``shutdown()``                 ``m.shutdown()``
=============================  ===============================================

Run it (no extra needed; it uses a temporary ``FsBackend``)::

    python examples/vllm_tier.py
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Sequence
from typing import Any

from kvprobe.backends import FsBackend
from kvprobe.statemachine import AsyncLookupManager, ReqContext


class SecondaryTier:
    """A slow KV-cache tier whose existence checks never block the scheduler.

    Args:
        backend: any kvprobe backend (``FsBackend``, ``NixlPosixBackend``,
            ``NixlObjBackend``, or your own ``batch_lookup``).
        lookup_timeout_s: a tier call slower than this answers MISS.
    """

    def __init__(self, backend: Any, *, lookup_timeout_s: float = 5.0) -> None:
        self._m = AsyncLookupManager(backend, name="secondary-tier", lookup_timeout_s=lookup_timeout_s)

    def lookup(self, keys: Sequence[bytes], req_id: str) -> int | None:
        """How many leading blocks of the request are in the tier, or None if not known yet.

        Every key is looked up (so all of them join this step's batch), and
        the answer is the first miss's index; while some verdict before the
        first known miss is unknown, the scheduler must ask again next step.
        """
        ctx = ReqContext(req_id)
        verdicts = [self._m.lookup(key, ctx) for key in keys]
        for i, verdict in enumerate(verdicts):
            if verdict is None:
                return None
            if not verdict:
                return i
        return len(verdicts)

    def on_schedule_end(self) -> None:
        """End of the scheduling step: submit the collected lookups."""
        self._m.flush()

    def on_request_finished(self, req_id: str) -> None:
        """Release everything the request was waiting on."""
        self._m.cleanup(req_id)

    def on_load_failed(self, keys: Sequence[bytes]) -> None:
        """Loading these blocks from the tier failed: answer MISS for them from now on."""
        self._m.mark_miss(keys)

    def shutdown(self) -> None:
        self._m.shutdown()


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="kvprobe-vllm-") as root:
        backend = FsBackend(root)
        blocks = [bytes([i]) * 32 + (0).to_bytes(4, "little") for i in range(10)]
        for key in blocks[:6]:
            backend.store(key, b"kv")
        tier = SecondaryTier(backend)
        try:
            step = 0
            while (hits := tier.lookup(blocks, "req-A")) is None:
                tier.on_schedule_end()  # the scheduler moves on; the worker probes
                time.sleep(0.005)
                step += 1
            print(f"after {step} step(s): {hits} of {len(blocks)} blocks can be loaded from the tier")
            tier.on_load_failed(blocks[5:6])  # the 6th block turned out unreadable
            print(f"after the failed load: {tier.lookup(blocks, 'req-A')} leading blocks")
            tier.on_request_finished("req-A")
        finally:
            tier.shutdown()


if __name__ == "__main__":
    main()
