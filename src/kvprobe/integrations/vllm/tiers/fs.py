"""``FsTier``: vLLM 0.33's filesystem tier, looking blocks up through kvprobe.

Stores and loads are vLLM's own (this class subclasses
``FileSystemTierManager``: the same files, threads, events and job results).
Lookups go to kvprobe's :class:`~kvprobe.backends.fs.FsBackend` (a ``stat``
per key, a regular file counts) under kvprobe's manager, with a timeout so a
hung mount answers MISS.  Imports vLLM.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from vllm.v1.kv_offload.tiering.fs.manager import FileSystemTierManager

from kvprobe.integrations.vllm.tiers.lookup import TierLookupManager, VllmNamedFsBackend
from kvprobe.integrations.vllm.tiers.options import FS_DEFAULT_LOOKUP_TIMEOUT_S, tier_lookup_options

if TYPE_CHECKING:
    from vllm.v1.kv_offload.tiering.backpressure import BackpressureDetector

__all__ = ["FsTier"]


class FsTier(FileSystemTierManager):  # type: ignore[misc]
    """vLLM's filesystem tier whose lookups run on kvprobe.

    The tier config takes every key of vLLM's ``fs`` tier, plus kvprobe's
    (all optional, plain JSON; docs/vllm.md shows a whole config).

    Args:
        offloading_spec, primary_kv_view, tier_type, root_dir,
        n_read_threads, n_write_threads, enable_kv_events, locality,
        backpressure_detector: as vLLM's ``FileSystemTierManager``.
        chain_mode: ``"exact"`` (default) or ``"inferred"``.
        lookup_timeout_s: a lookup call slower than this answers MISS for its
            keys (default 10).
        cache_hit_ttl_s, cache_miss_ttl_s, cache_max_entries: the verdict
            cache, as :class:`~kvprobe.integrations.vllm.tiers.ObjTier`'s
            (default: none).

    Raises:
        TierConfigError: a kvprobe key has a wrong value (names the key);
            raised before vLLM's tier is built.
        TypeError: an unknown key (Python names it).
        As vLLM's tier for its own arguments.
    """

    #: vLLM's lookup manager until ``__init__`` replaces it with a :class:`TierLookupManager`.
    _lookup_manager: Any

    def __init__(
        self,
        offloading_spec: Any,
        primary_kv_view: memoryview,
        tier_type: str,
        root_dir: str,
        n_read_threads: int = 16,
        n_write_threads: int = 16,
        enable_kv_events: bool = False,
        locality: str | None = None,
        backpressure_detector: BackpressureDetector | None = None,
        *,
        chain_mode: str = "exact",
        lookup_timeout_s: float | None = None,
        cache_hit_ttl_s: float = 0,
        cache_miss_ttl_s: float = 0,
        cache_max_entries: int | None = None,
    ) -> None:
        options = tier_lookup_options(
            chain_mode=chain_mode,
            lookup_timeout_s=lookup_timeout_s,
            default_timeout_s=FS_DEFAULT_LOOKUP_TIMEOUT_S,
            cache_hit_ttl_s=cache_hit_ttl_s,
            cache_miss_ttl_s=cache_miss_ttl_s,
            cache_max_entries=cache_max_entries,
        )
        super().__init__(
            offloading_spec,
            primary_kv_view,
            tier_type,
            root_dir,
            n_read_threads,
            n_write_threads,
            enable_kv_events,
            locality,
            backpressure_detector,
        )
        # vLLM's constructor started its own lookup manager: stop it, unused.
        self._lookup_manager.shutdown()
        self.lookup_backend = VllmNamedFsBackend(root_dir, self.file_mapper.get_file_name)
        self._lookup_manager = TierLookupManager(self.lookup_backend, self.tier_type, options)

    def __repr__(self) -> str:
        return f"<FsTier {self.tier_type!r}: vLLM's fs tier, lookups on {self.lookup_backend!r}>"
