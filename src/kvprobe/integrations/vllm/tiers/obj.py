"""``ObjTier``: vLLM 0.33's object-store tier, looking blocks up through kvprobe.

Stores and loads are vLLM's own (this class subclasses
``ObjectStoreSecondaryTierManager``: one NIXL agent, the same object names,
the same events and job results).  Lookups go to kvprobe's
:class:`~kvprobe.backends.nixl_obj.NixlObjBackend` (its own NIXL agents:
parallel HEADs within a deadline, the store's pace shared by the host's
engines, throttled queries retried) under kvprobe's manager.  Imports vLLM.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from vllm.v1.kv_offload.tiering.obj.config import ObjStoreConfig
from vllm.v1.kv_offload.tiering.obj.manager import ObjectStoreSecondaryTierManager

from kvprobe.integrations.vllm.tiers.lookup import TierLookupManager, VllmNamedObjBackend
from kvprobe.integrations.vllm.tiers.options import (
    OBJ_DEFAULT_DEADLINE_S,
    ObjLookupOptions,
    TierConfigError,
    obj_default_timeout,
    obj_lookup_options,
    tier_lookup_options,
)

if TYPE_CHECKING:
    from vllm.v1.kv_offload.tiering.backpressure import BackpressureDetector

__all__ = ["START_BACKLOG", "ObjTier"]

#: New walks wait while this many lookup calls are outstanding (:class:`TierLookupManager`'s
#: ``start_backlog``): one running and one queued keep the tier's one call at a time busy.
START_BACKLOG = 2


def endpoint_url(store: ObjStoreConfig) -> str:
    """The URL kvprobe's backend takes for vLLM's ``endpoint_override`` and ``scheme``."""
    endpoint = str(store.endpoint_override)
    return endpoint if "://" in endpoint else f"{store.scheme}://{endpoint}"


class ObjTier(ObjectStoreSecondaryTierManager):  # type: ignore[misc]
    """vLLM's object-store tier whose lookups run on kvprobe.

    The tier config takes every key of vLLM's ``obj`` tier, plus kvprobe's
    (all optional, plain JSON; docs/vllm.md shows a whole config).

    Args:
        offloading_spec, primary_kv_view, tier_type, store_config, prefix,
        io_threads, enable_kv_events, locality, backpressure_detector: as
            vLLM's ``ObjectStoreSecondaryTierManager`` (the factory passes
            the first three and the last).
        chain_mode: ``"exact"`` (default) or ``"inferred"``, the manager's
            walk of a request's chain of keys.
        lookup_timeout_s: a lookup call slower than this answers MISS for its
            keys; default ``lookup_deadline_s`` + 0.5.
        cache_hit_ttl_s, cache_miss_ttl_s: how long a verdict is reused across
            requests without a HEAD (0, the default: never; both 0 keeps no
            verdict cache, as vLLM's tier).
        cache_max_entries: the verdict cache's bound (default 100,000 with a TTL).
        lookup_deadline_s: each lookup call returns within this many seconds;
            keys unanswered by then read MISS (default 5).
        pace_scope: ``"host"`` (default: the engines of a host share the
            store's pace through a file) or ``"process"``.
        lookup_threads: HEADs in flight per tier (default 64).

    Raises:
        TierConfigError: a kvprobe key has a wrong value (names the key);
            raised before vLLM's tier is built.
        TypeError: an unknown key (Python names it), or a bad ``store_config``.
        ObjStoreUnavailableError, BucketNotFoundError: kvprobe's connection
            check failed (vLLM's agent is released first).
        As vLLM's tier for its own arguments.
    """

    #: vLLM's lookup manager until ``__init__`` replaces it with a :class:`TierLookupManager`.
    _lookup_manager: Any

    def __init__(
        self,
        offloading_spec: Any,
        primary_kv_view: memoryview,
        tier_type: str,
        store_config: dict[str, Any],
        prefix: str = "",
        io_threads: int = 4,
        enable_kv_events: bool = False,
        locality: str | None = None,
        backpressure_detector: BackpressureDetector | None = None,
        *,
        chain_mode: str = "exact",
        lookup_timeout_s: float | None = None,
        cache_hit_ttl_s: float = 0,
        cache_miss_ttl_s: float = 0,
        cache_max_entries: int | None = None,
        lookup_deadline_s: float = OBJ_DEFAULT_DEADLINE_S,
        pace_scope: str = "host",
        lookup_threads: int = 64,
    ) -> None:
        backend_options = obj_lookup_options(
            lookup_deadline_s=lookup_deadline_s, pace_scope=pace_scope, lookup_threads=lookup_threads
        )
        lookup_options = tier_lookup_options(
            chain_mode=chain_mode,
            lookup_timeout_s=lookup_timeout_s,
            default_timeout_s=obj_default_timeout(backend_options),
            cache_hit_ttl_s=cache_hit_ttl_s,
            cache_miss_ttl_s=cache_miss_ttl_s,
            cache_max_entries=cache_max_entries,
        )
        if not isinstance(store_config, dict):
            raise TierConfigError("store_config", f"must be an object, got {type(store_config).__name__}")
        store = ObjStoreConfig(**store_config)
        super().__init__(
            offloading_spec,
            primary_kv_view,
            tier_type,
            store_config,
            prefix,
            io_threads,
            enable_kv_events,
            locality,
            backpressure_detector,
        )
        # vLLM's constructor started its own lookup manager: stop it, unused.
        self._lookup_manager.shutdown()
        try:
            self.lookup_backend = self._make_lookup_backend(store, prefix, backend_options)
        except BaseException:
            super().shutdown()
            raise
        self._lookup_manager = TierLookupManager(
            self.lookup_backend, self.tier_type, lookup_options, start_backlog=START_BACKLOG
        )

    def _make_lookup_backend(
        self, store: ObjStoreConfig, prefix: str, options: ObjLookupOptions
    ) -> VllmNamedObjBackend:
        """kvprobe's backend on the tier's bucket (raises as :class:`NixlObjBackend`)."""
        return VllmNamedObjBackend(
            self._file_mapper.get_file_name,
            bucket=store.bucket,
            endpoint_url=endpoint_url(store),
            access_key=store.access_key or None,
            secret_key=store.secret_key or None,
            session_token=store.session_token or None,
            region=store.region or None,
            prefix=prefix,
            num_threads=options.threads,
            deadline_s=options.deadline_s,
            pace_scope=options.pace_scope,
            extra_params={"ca_bundle": store.ca_bundle} if store.ca_bundle else None,
        )

    def shutdown(self) -> None:
        """vLLM's shutdown (the lookup manager, then the transfers), then kvprobe's backend's agents.

        Calling it again does nothing more.
        """
        super().shutdown()
        self.lookup_backend.close()

    def __repr__(self) -> str:
        return f"<ObjTier {self.tier_type!r}: vLLM's obj tier, lookups on {self.lookup_backend!r}>"
