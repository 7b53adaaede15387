"""vLLM 0.33's own scan over vLLM's fs tier: HEADs per request with the one-line switch (issue 38, part 1).

Needs the released vLLM (``tests/vllm_release/run.sh`` runs this file; it
skips without vLLM, and fails instead with ``KVPROBE_REQUIRE_VLLM=1``).

The lookups come from vLLM's own ``OffloadingConnectorScheduler._maximal_prefix_lookup``,
called on a stand-in whose ``manager.lookup`` is the tier's own ``lookup``
(the CPU tier always missing) and whose ``_events_tracker.record_lookup``
does nothing; each key's position is recorded in vLLM's real ``ReqContext``
as vLLM's ``update_offload_keys`` records it.  vLLM's fs tier is loaded
twice in this process: once as shipped, once after the one-line switch (a
second copy of its module, executed while vLLM's ``AsyncLookupManager``
name points at kvprobe's drop-in).  Each request's HEADs are the keys its
``batch_lookup`` calls were given.
"""

from __future__ import annotations

import importlib.util
import math
import mmap
import os
import time
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest

if os.environ.get("KVPROBE_REQUIRE_VLLM") != "1":
    pytest.importorskip("vllm.v1.kv_offload.tiering.async_lookup", reason="needs vLLM: tests/vllm_release/run.sh")

import vllm.v1.kv_offload.tiering.async_lookup as vllm_async_lookup
from vllm.distributed.kv_transfer.kv_connector.v1.offloading.scheduler import OffloadingConnectorScheduler
from vllm.v1.kv_offload.base import ReqContext, make_offload_key
from vllm.v1.kv_offload.tiering.base import ScheduleEndContext
from vllm.v1.kv_offload.tiering.fs import manager as vllm_fs
from vllm_offloading_spec import offloading_spec

from kvprobe.integrations.vllm import AsyncLookupManager
from kvprobe.integrations.vllm.tiers import FsTier
from kvprobe.statemachine.windows import DEFAULT_CHAIN_WINDOW, DEFAULT_CHAIN_WINDOW_GROWTH, window_end

CHAIN = 64
STORED_PREFIXES = (0, 10, 16, 40, 64)
TOKENS_PER_CHUNK = 16
STEP_BUDGET = 500  # scheduler steps per request (each a few ms); a handful are needed
BOUND = 1.2  # HEADs per request over the ideal, at most


def switched_fs_module() -> ModuleType:
    """A second copy of vLLM's fs tier module, its lookup manager built on kvprobe's drop-in."""
    spec = importlib.util.find_spec(vllm_fs.__name__)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    shipped = vllm_async_lookup.AsyncLookupManager
    vllm_async_lookup.AsyncLookupManager = AsyncLookupManager  # type: ignore[misc]  # the one-line switch
    try:
        spec.loader.exec_module(module)
    finally:
        vllm_async_lookup.AsyncLookupManager = shipped  # type: ignore[misc]
    return module


class FsRun:
    """One fs tier (vLLM's class, or a subclass such as kvprobe's ``FsTier``) on ``root``.

    Counts the keys each request's batch_lookup calls got; ``extras`` are
    the tier config's further keys.
    """

    def __init__(self, tier_class: type[Any], root: Path, **extras: object) -> None:
        self._region = mmap.mmap(-1, 8 * mmap.PAGESIZE)
        view = memoryview(self._region).cast("B", (8, mmap.PAGESIZE))
        self.tier = tier_class(
            offloading_spec=offloading_spec("kvprobe-positions", TOKENS_PER_CHUNK),
            primary_kv_view=view,
            tier_type="fs",
            root_dir=str(root),
            n_read_threads=1,
            n_write_threads=1,
            **extras,
        )
        self.heads: dict[str, int] = {}
        lookups = self.tier._lookup_manager
        original = lookups.batch_lookup

        def counted(keys: list[bytes], req_context: Any) -> Any:
            self.heads[req_context.req_id] = self.heads.get(req_context.req_id, 0) + len(keys)
            return original(keys, req_context)

        lookups.batch_lookup = counted
        # vLLM's scan, on a stand-in scheduler: the CPU tier always misses, events go nowhere.
        self.scheduler = SimpleNamespace(
            manager=SimpleNamespace(lookup=self.tier.lookup),
            _events_tracker=SimpleNamespace(record_lookup=lambda *args: None),
        )

    def store(self, keys: list[bytes]) -> None:
        for key in keys:
            path = Path(self.tier.file_mapper.get_file_name(key))
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(b"k")

    def found(self, keys: list[bytes], req_id: str) -> int:
        """vLLM's scan of ``keys``, step after step until it is decided: the stored prefix it found."""
        ctx = ReqContext(req_id=req_id)
        for i, key in enumerate(keys):
            ctx.set_offload_key_position(key, (i + 1) * TOKENS_PER_CHUNK)
        end = ScheduleEndContext(new_req_ids=(), preempted_req_ids=())
        for _ in range(STEP_BUDGET):
            hits = OffloadingConnectorScheduler._maximal_prefix_lookup(self.scheduler, keys, ctx, None, None, 0)  # type: ignore[arg-type]
            if hits is not None:
                self.tier.on_request_finished(ctx)
                return int(hits)
            self.tier.on_schedule_end(end)
            time.sleep(0.002)
        raise AssertionError(f"{req_id} undecided after {STEP_BUDGET} steps")


def ideal_heads(stored: int) -> int:
    """The keys the window walk probes: the stored prefix in windows, up to the window holding the one miss."""
    return (
        CHAIN if stored == CHAIN else min(CHAIN, window_end(DEFAULT_CHAIN_WINDOW, stored, DEFAULT_CHAIN_WINDOW_GROWTH))
    )


def test_the_switch_bounds_heads_per_request_and_finds_the_exact_prefix(tmp_path: Path) -> None:
    switched = switched_fs_module()
    assert issubclass(switched.FsAsyncLookupManager, AsyncLookupManager)
    assert not issubclass(vllm_fs.FsAsyncLookupManager, AsyncLookupManager)
    runs = {
        "vllm": FsRun(vllm_fs.FileSystemTierManager, tmp_path / "vllm"),
        "switch": FsRun(switched.FileSystemTierManager, tmp_path / "switch"),
    }
    found: dict[str, list[int]] = {name: [] for name in runs}
    try:
        for name, run in runs.items():
            for prompt, stored in enumerate(STORED_PREFIXES):
                keys = [make_offload_key(prompt.to_bytes(4, "big") + i.to_bytes(4, "big"), 0) for i in range(CHAIN)]
                run.store(keys[:stored])
                found[name].append(run.found(keys, f"{name}-{prompt}"))
    finally:
        for run in runs.values():
            run.tier.shutdown()
    print("\nstored prefix | ideal (windows) | stored+1 | vLLM's class HEADs | switch HEADs")
    for prompt, stored in enumerate(STORED_PREFIXES):
        heads = [runs[name].heads.get(f"{name}-{prompt}", 0) for name in ("vllm", "switch")]
        print(
            f"{stored:13d} | {ideal_heads(stored):15d} | {min(stored + 1, CHAIN):8d} | {heads[0]:18d} | {heads[1]:12d}"
        )
    assert found["switch"] == list(STORED_PREFIXES)
    assert found["vllm"] == list(STORED_PREFIXES)
    for prompt, stored in enumerate(STORED_PREFIXES):
        heads = runs["switch"].heads.get(f"switch-{prompt}", 0)
        assert heads <= BOUND * ideal_heads(stored), (stored, heads, ideal_heads(stored))


#: HEADs per request of the inferred search over 64 keys, at most: a gallop
#: (``ceil(log2 64)`` + 1 probes) and then a bisection of the last gap (as many
#: again), whatever the stored prefix (:mod:`kvprobe.statemachine.inferred`).
INFERRED_BOUND = 2 * math.ceil(math.log2(CHAIN)) + 2


def test_the_inferred_search_under_vllms_scan_finds_the_exact_prefix_in_few_heads(tmp_path: Path) -> None:
    """kvprobe's FsTier with ``chain_mode="inferred"``, scanned by vLLM: the exact prefix, HEADs counted."""
    run = FsRun(FsTier, tmp_path / "inferred", chain_mode="inferred")
    found, heads = [], []
    try:
        for prompt, stored in enumerate((*STORED_PREFIXES, 1, 33, 63)):
            keys = [make_offload_key(prompt.to_bytes(4, "big") + i.to_bytes(4, "big"), 0) for i in range(CHAIN)]
            run.store(keys[:stored])
            found.append(run.found(keys, f"inferred-{prompt}"))
            heads.append(run.heads.get(f"inferred-{prompt}", 0))
    finally:
        run.tier.shutdown()
    print(f"\ninferred search, HEADs per request: {heads}")
    assert found == [*STORED_PREFIXES, 1, 33, 63]
    assert all(1 <= h <= INFERRED_BOUND for h in heads), heads
    # Fewer than the exact walk's probes wherever the stored prefix is long.
    assert all(h < ideal_heads(s) for h, s in zip(heads, found, strict=True) if s >= 16), (heads, found)
