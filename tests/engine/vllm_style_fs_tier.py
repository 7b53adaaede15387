"""A filesystem tier written the way vLLM's filesystem tier is, on the drop-in.

Everything below the import block is vLLM-style tier code: a lookup manager
subclass whose ``__init__(tier, tier_type)`` calls the base constructor with
``tier_type=`` and whose ``batch_lookup`` checks each key's file with a
per-key ``os.access`` (the tier's pure-Python path; vLLM's uses
``os.path.exists``) or ``os.stat``; and a tier that delegates ``lookup``,
``on_schedule_end``, ``on_request_finished``, failed loads and ``shutdown``
to it.  In vLLM the kvprobe import reads::

    from vllm.v1.kv_offload.base import LookupResult, OffloadKey, ReqContext
    from vllm.v1.kv_offload.tiering.async_lookup import AsyncLookupManager

``test_vllm_tier_module_differs_only_by_import`` checks that nothing else
here names kvprobe.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

from kvprobe.integrations.vllm import AsyncLookupManager, LookupResult

OffloadKey = bytes
ReqContext = Any


class FileMapper:
    """Block key -> file name: <root>/<hhh>/<hh>_g<group>/<hash hex>.bin (as vLLM's tier lays blocks out)."""

    def __init__(self, root_dir: str) -> None:
        self.root_dir = root_dir

    def get_file_name(self, key: OffloadKey) -> str:
        block_hash, group = key[:-4], int.from_bytes(key[-4:], "big")
        hexed = block_hash.hex()
        return os.path.join(self.root_dir, hexed[:3], f"{hexed[3:5]}_g{group}", f"{hexed}.bin")


class FsAsyncLookupManager(AsyncLookupManager):
    """Async lookup manager for FileSystemTier."""

    def __init__(self, tier: FileSystemTier, tier_type: str, use_stat: bool = False) -> None:
        super().__init__(tier_type=tier_type)
        self._tier = tier
        self._use_stat = use_stat

    def batch_lookup(self, keys: list[OffloadKey], req_context: ReqContext) -> Iterable[bool]:
        paths = [self._tier.file_mapper.get_file_name(k) for k in keys]
        if self._use_stat:
            return [_stat_exists(p) for p in paths]
        return (os.access(p, os.F_OK) for p in paths)


def _stat_exists(path: str) -> bool:
    try:
        os.stat(path)
    except FileNotFoundError:
        return False
    return True


class FileSystemTier:
    """The tier side: block files under root_dir, lookups delegated to the manager."""

    def __init__(self, root_dir: str, tier_type: str = "fs", use_stat: bool = False) -> None:
        self.tier_type = tier_type
        self.file_mapper = FileMapper(root_dir)
        self._lookup_manager = FsAsyncLookupManager(tier=self, tier_type=tier_type, use_stat=use_stat)

    def store_block(self, key: OffloadKey, data: bytes = b"kv") -> None:
        path = self.file_mapper.get_file_name(key)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(data)

    def lookup(self, key: OffloadKey, req_context: ReqContext) -> LookupResult:
        result = self._lookup_manager.lookup(key, req_context)
        if result is None:
            return LookupResult.RETRY
        return LookupResult.HIT if result else LookupResult.MISS

    def load_failed(self, keys: list[OffloadKey]) -> None:
        self._lookup_manager.mark_miss(keys)

    def on_request_finished(self, req_context: ReqContext) -> None:
        self._lookup_manager.cleanup(req_context.req_id)

    def on_schedule_end(self) -> None:
        self._lookup_manager.flush()

    def shutdown(self) -> None:
        self._lookup_manager.shutdown()
