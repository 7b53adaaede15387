"""The windows kvprobe's vLLM tiers walk under vLLM's scan: the backend's whole ``chain_schedule``.

A tier's manager (:class:`kvprobe.integrations.vllm.tiers.lookup.TierLookupManager`)
takes its first window and its growth from the backend it looks up on, so
that a prompt with nothing stored costs the object backend's first window
(4 HEADs), not the drop-in's general default (16).  Counted, not timed.
"""

from __future__ import annotations

from collections.abc import Sequence

from position_scan import PositionedContext, chain_keys, maximal_prefix_scan

from kvprobe.backends.nixl_obj import NixlObjBackend
from kvprobe.integrations.vllm import AsyncLookupManager
from kvprobe.integrations.vllm.manager import VLLM_SCHEDULES
from kvprobe.integrations.vllm.tiers.lookup import TierLookupManager
from kvprobe.integrations.vllm.tiers.options import tier_lookup_options
from kvprobe.statemachine.windows import window_end

_OPTIONS = tier_lookup_options(
    chain_mode="exact",
    lookup_timeout_s=None,
    default_timeout_s=30.0,
    cache_hit_ttl_s=0,
    cache_miss_ttl_s=0,
    cache_max_entries=None,
)


class NarrowBackend:
    """A backend with the object backend's schedule, answering from a set; records every key asked."""

    chain_schedule = (4, 1.25)

    def __init__(self, stored: Sequence[bytes]) -> None:
        self.stored = set(stored)
        self.asked: list[bytes] = []

    def batch_lookup(self, keys: Sequence[bytes], req_context: object) -> list[bool]:
        self.asked.extend(keys)
        return [k in self.stored for k in keys]


def scan_until_decided(tier: TierLookupManager, keys: list[bytes], ctx: PositionedContext) -> int:
    """vLLM's scan each step; between steps, wait (by polling the core, bounded by count) for the worker."""
    for _ in range(200):
        found = maximal_prefix_scan(tier, keys, ctx)
        if found is not None:
            return found
        tier.flush()
        for _ in range(100_000):
            tier.drain_results()
            if not tier.manager.core.outstanding:
                break
    raise AssertionError("undecided after 200 steps")


def test_the_tier_takes_the_backends_first_window_too() -> None:
    tier = TierLookupManager(NarrowBackend([]), "obj-narrow", _OPTIONS)
    assert (tier.manager.chain_window, tier.manager.chain_window_growth) == (4, 1.25)
    tier.shutdown()


def test_nothing_stored_costs_the_first_window_under_vllms_scan() -> None:
    keys = chain_keys(7, 64)
    for stored in (0, 3, 20, 64):
        backend = NarrowBackend(keys[:stored])
        tier = TierLookupManager(backend, "obj-narrow", _OPTIONS)
        ctx = PositionedContext(f"r{stored}")
        ctx.record(keys)
        assert scan_until_decided(tier, keys, ctx) == stored
        assert len(backend.asked) == min(64, window_end(4, stored, 1.25)), stored
        tier.shutdown()


# --- the one-line switch: vLLM's own obj lookup class on the drop-in -----------------


def _switched(module: str, name: str) -> type[AsyncLookupManager]:
    """A class shaped as vLLM 0.33's tier lookup class of that module and name, on the drop-in (no vLLM import)."""

    def batch_lookup(self: AsyncLookupManager, keys: list[bytes], req_context: object) -> list[bool]:
        return [False] * len(keys)

    return type(name, (AsyncLookupManager,), {"__module__": module, "batch_lookup": batch_lookup})


def test_vllms_obj_lookup_class_gets_the_object_backends_schedule() -> None:
    assert set(VLLM_SCHEDULES.values()) == {NixlObjBackend.chain_schedule}
    obj = _switched("vllm.v1.kv_offload.tiering.obj.manager", "ObjAsyncLookupManager")("obj", worker="manual")
    assert (obj.manager.chain_window, obj.manager.chain_window_growth) == NixlObjBackend.chain_schedule
    obj.shutdown()
    # vLLM's fs class, and a class of that name elsewhere, keep the drop-in's defaults.
    for module, name in [
        ("vllm.v1.kv_offload.tiering.fs.manager", "FsAsyncLookupManager"),
        ("my_tiers", "ObjAsyncLookupManager"),
    ]:
        other = _switched(module, name)("other", worker="manual")
        assert (other.manager.chain_window, other.manager.chain_window_growth) == (16, 2.0)
        other.shutdown()
    # An explicit window still wins.
    wide = _switched("vllm.v1.kv_offload.tiering.obj.manager", "ObjAsyncLookupManager")(
        "obj", worker="manual", chain_window=32
    )
    assert (wide.manager.chain_window, wide.manager.chain_window_growth) == (32, 1.25)
    wide.shutdown()
