"""A vLLM-style secondary tier on kvprobe's drop-in lookup manager.

The tier is written as vLLM's filesystem tier is: a lookup manager subclass
implements ``batch_lookup`` (here: a stat per block file, through kvprobe's
``FsBackend`` layout), and the tier delegates its hooks to the manager:

=============================  ===============================================
tier hook (vLLM)               drop-in call
=============================  ===============================================
``lookup(key, req_context)``   ``lookup`` mapped to HIT / MISS / RETRY
``on_schedule_end()``          ``flush()``: this step's new keys, one batch
``on_request_finished(req)``   ``cleanup(req_id)``
a failed load                  ``mark_miss(keys)``: never claim them again
``shutdown()``                 ``shutdown()``
=============================  ===============================================

Inside vLLM the import would be ``from vllm.v1.kv_offload.tiering.async_lookup
import AsyncLookupManager``; nothing else changes.  (This ``AsyncLookupManager``
is the vLLM-shaped drop-in; kvprobe's native manager of that name takes a
backend object instead of being subclassed.)  The scheduler side asks for a
request's leading stored blocks with ``lookup_chain``, and maps its answer to
vLLM's result kinds with ``as_lookup_result``.

Run it (no extra needed; it uses a temporary directory)::

    python examples/vllm_tier.py
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Iterable
from typing import Any

from _scheduler import block_key

from kvprobe import FsBackend, ReqContext
from kvprobe.integrations.vllm import AsyncLookupManager, LookupResult, as_lookup_result


class FsLookupManager(AsyncLookupManager):
    """The tier's lookup manager: only ``batch_lookup`` is the tier's own code."""

    def __init__(self, tier: FsTier, tier_type: str) -> None:
        super().__init__(tier_type=tier_type, lookup_timeout_s=5.0)
        self._tier = tier

    def batch_lookup(self, keys: list[bytes], req_context: Any) -> Iterable[bool]:
        return self._tier.files.batch_lookup(keys, req_context)


class FsTier:
    """A secondary tier whose existence checks never block the scheduler."""

    def __init__(self, root: str, tier_type: str = "fs") -> None:
        self.files = FsBackend(root)
        self.lookups = FsLookupManager(self, tier_type)

    def lookup(self, key: bytes, req_context: Any) -> LookupResult:
        return as_lookup_result(self.lookups.lookup(key, req_context))

    def on_schedule_end(self) -> None:
        self.lookups.flush()

    def on_request_finished(self, req_context: Any) -> None:
        self.lookups.cleanup(req_context.req_id)

    def on_load_failed(self, keys: list[bytes]) -> None:
        self.lookups.mark_miss(keys)

    def shutdown(self) -> None:
        self.lookups.shutdown()


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="kvprobe-vllm-") as root:
        tier = FsTier(root)
        blocks = [block_key(bytes([i]) * 32) for i in range(10)]
        for key in blocks[:6]:
            tier.files.store(key, b"kv")
        req = ReqContext("req-A")
        try:
            step = 0
            while (found := tier.lookups.lookup_chain(blocks, req)).pending:
                tier.on_schedule_end()  # the scheduler moves on; the worker probes
                time.sleep(0.005)
                step += 1
            kind = as_lookup_result(found).name
            print(f"after {step} step(s): {kind}, {found.leading_hits} of {len(blocks)} blocks in the tier")
            print(f"block 0 alone: {tier.lookup(blocks[0], req).name}")
            tier.on_load_failed(blocks[5:6])  # the 6th block turned out unreadable
            again = tier.lookups.lookup_chain(blocks, req)
            print(f"after the failed load: {as_lookup_result(again).name}, {again.leading_hits} leading blocks")
            tier.on_request_finished(req)
            tier.on_schedule_end()
            print(f"states held: {len(tier.lookups)}; backend calls: {tier.lookups.stats.backend_calls}")
        finally:
            tier.shutdown()


if __name__ == "__main__":
    main()
