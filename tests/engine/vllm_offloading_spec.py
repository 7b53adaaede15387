"""What vLLM 0.33's fs and obj tiers read of an ``OffloadingSpec``, built from vLLM's real config classes.

Imports vLLM: only for tests and scripts that run in the vLLM venv.
"""

from __future__ import annotations

from types import SimpleNamespace


def offloading_spec(engine_id: str, tokens_per_hash: int = 16) -> SimpleNamespace:
    """One rank, one block per chunk, no KV events: the fields the tiers and their ``FileMapper`` read."""
    from vllm.v1.kv_offload.base import OffloadingKVEventsConfig
    from vllm.v1.kv_offload.config import (
        OffloadingCacheConfig,
        OffloadingConfig,
        OffloadingModelConfig,
        OffloadingParallelConfig,
    )

    parallel = OffloadingParallelConfig(
        rank=0, world_size=1, tp_size=1, pp_size=1, pcp_size=1, dcp_size=1, data_parallel_index=0,
        data_parallel_size=1, data_parallel_rank_local=None, is_parallelism_agnostic=False,
    )  # fmt: skip
    config = OffloadingConfig(
        groups=(), worker_kv_bytes_per_block=0, enable_kv_cache_events=False, extra_config={},
        engine_id=engine_id, model=OffloadingModelConfig(name=f"kvprobe/{engine_id}", dtype="float16"),
        cache=OffloadingCacheConfig(tokens_per_hash=tokens_per_hash, blocks_per_chunk=1), parallel=parallel,
    )  # fmt: skip
    events = OffloadingKVEventsConfig(enable_kv_cache_events=False, self_describing_kv_events=False)
    return SimpleNamespace(config=config, blocks_per_chunk=1, kv_events_config=events)
