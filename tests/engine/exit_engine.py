"""An engine process that exits while its lookups are in flight (run as a script by the exit tests).

    python tests/engine/exit_engine.py ENDPOINT BUCKET KIND[+shutdown|+slowexit] REQUESTS [KEYS]

with KIND one of vllm-switch, vllm-own, objtier, native.

``vllm-switch`` builds vLLM 0.33's object tier (real NIXL OBJ) after the
one-line switch to kvprobe's drop-in, ``vllm-own`` the same tier on vLLM's
own lookup class, ``objtier`` kvprobe's ``ObjTier`` (through vLLM's tier
factory, as an operator's config loads it), ``native`` kvprobe's own
manager on ``NixlObjBackend``.  Once built it prints ``built`` and waits
for a line on stdin (the test turns the store's throttling on in between:
a tier's connection check at start is not what is tested).  Then it
starts ``REQUESTS`` requests of ``KEYS`` (default 64) absent keys, flushes
them to the worker, waits a moment (the calls reach the store), prints
``submitted`` and returns from the script without any shutdown (with
``+shutdown``: after the tier's or the manager's own ``shutdown``, which
gives up on a call after its timeout): the interpreter exits while the
store still holds the HEADs.  With ``+slowexit`` the exit hook waits only
:data:`SHORT_EXIT_WAIT_S` for the calls and the interpreter's teardown
lasts :data:`SLOW_TEARDOWN_S` (an engine's teardown, torch's and vLLM's,
takes seconds): a call the store holds longer than the wait returns while
the interpreter finalizes, every time.
The process's exit code is what the tests judge.
"""

from __future__ import annotations

import mmap
import sys
import time
from types import SimpleNamespace
from typing import Any

KEYS_PER_REQUEST = 64
#: How long the script waits after its flushes, so that the worker's calls have reached the store.
IN_FLIGHT_S = 0.3
#: ``+slowexit``: how long the exit hook waits for running calls, and how long the teardown lasts.
SHORT_EXIT_WAIT_S = 1.0
SLOW_TEARDOWN_S = 10.0


class SlowTeardown:
    """Held by this script's module: its ``__del__`` runs while the interpreter finalizes, and sleeps."""

    def __del__(self) -> None:
        time.sleep(SLOW_TEARDOWN_S)


def vllm_obj_tier(endpoint: str, bucket: str, switch: bool) -> Any:
    """vLLM's obj tier (its lookup manager is ``_lookup_manager``), on the drop-in when ``switch``."""
    import vllm.v1.kv_offload.tiering.async_lookup as vllm_async_lookup

    if switch:
        from kvprobe.integrations.vllm import AsyncLookupManager

        vllm_async_lookup.AsyncLookupManager = AsyncLookupManager  # type: ignore[misc]
    from vllm.v1.kv_offload.tiering.obj.manager import ObjectStoreSecondaryTierManager
    from vllm_offloading_spec import offloading_spec

    spec = offloading_spec("kvprobe-exit")
    region = mmap.mmap(-1, 8 * mmap.PAGESIZE)
    view = memoryview(region).cast("B", (8, mmap.PAGESIZE))
    host = endpoint.split("//", 1)[1]
    store = {"bucket": bucket, "endpoint_override": host, "access_key": "kvprobe-test",
             "secret_key": "kvprobe-test-secret", "region": "us-east-1", "scheme": "http"}  # fmt: skip
    return ObjectStoreSecondaryTierManager(spec, view, "obj", store_config=store)


def kvprobe_obj_tier(endpoint: str, bucket: str) -> Any:
    """kvprobe's ``ObjTier``, built by vLLM's factory from an operator's tier config (its defaults)."""
    from vllm.v1.kv_offload.tiering.factory import SecondaryTierFactory
    from vllm_offloading_spec import offloading_spec

    region = mmap.mmap(-1, 8 * mmap.PAGESIZE)
    view = memoryview(region).cast("B", (8, mmap.PAGESIZE))
    store = {"bucket": bucket, "endpoint_override": endpoint.split("//", 1)[1], "access_key": "kvprobe-test",
             "secret_key": "kvprobe-test-secret", "region": "us-east-1", "scheme": "http"}  # fmt: skip
    config = {"type": "ObjTier", "module_path": "kvprobe.integrations.vllm.tiers", "store_config": store}
    return SecondaryTierFactory.create_secondary_tier(config, view, offloading_spec("kvprobe-exit"))


def native_manager(endpoint: str, bucket: str) -> Any:
    """kvprobe's own manager on its NIXL object backend."""
    from kvprobe.backends import NixlObjBackend
    from kvprobe.statemachine import AsyncLookupManager

    backend = NixlObjBackend(
        bucket=bucket, endpoint_url=endpoint, access_key="kvprobe-test", secret_key="kvprobe-test-secret",
        region="us-east-1", check=False,  # the proxy's own 503s carry no S3 headers
    )  # fmt: skip
    return AsyncLookupManager(backend, name="obj")


def main(endpoint: str, bucket: str, kind: str, requests: int, keys: int = KEYS_PER_REQUEST) -> None:
    kind, _, then = kind.partition("+")
    if then == "slowexit":
        from kvprobe.statemachine import threaded_worker

        threaded_worker.EXIT_WAIT_S = SHORT_EXIT_WAIT_S
        globals()["_teardown"] = SlowTeardown()
    if kind == "native":
        owner = manager = native_manager(endpoint, bucket)
    else:
        owner = (
            kvprobe_obj_tier(endpoint, bucket)
            if kind == "objtier"
            else vllm_obj_tier(endpoint, bucket, kind == "vllm-switch")
        )
        manager = owner._lookup_manager
    print("built", flush=True)
    sys.stdin.readline()
    for r in range(requests):
        ctx = SimpleNamespace(req_id=f"exit-{r}")
        for i in range(keys):
            manager.lookup(bytes([r % 256, i]) * 8 + bytes(4), ctx)
        manager.flush()
    time.sleep(IN_FLIGHT_S)
    print("submitted", flush=True)
    if then == "shutdown":
        owner.shutdown()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), *(int(a) for a in sys.argv[5:6]))
