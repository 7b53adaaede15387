"""kvprobe's ``ObjTier`` and ``FsTier`` inside vLLM 0.33: loading, mixing with vLLM's tiers, bad configs.

Needs vLLM 0.33 (``tests/vllm_release/run.sh`` runs this file in its venv;
skipped elsewhere, failed under ``KVPROBE_REQUIRE_VLLM=1``).  The object tier
tests run vLLM's obj tier and kvprobe's on real NIXL against a local moto S3
server started here (skipped without NIXL, boto3 or moto).

* The factory builds each class from ``module_path`` and from the short
  names the ``vllm.general_plugins`` entry point registers.
* A fleet mix: a block stored by vLLM's own tier is found by kvprobe's, and
  the other way round, and the bytes load back (same names, same layout).
* A bad kvprobe key in the tier config raises ``TierConfigError`` naming it.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest

try:
    import numpy as np
    from vllm.v1.kv_offload.base import LookupResult, ReqContext, ScheduleEndContext, make_offload_key
    from vllm.v1.kv_offload.config import (
        OffloadingCacheConfig,
        OffloadingConfig,
        OffloadingModelConfig,
        OffloadingParallelConfig,
    )
    from vllm.v1.kv_offload.tiering.base import TransferJob
    from vllm.v1.kv_offload.tiering.factory import SecondaryTierFactory
    from vllm.v1.kv_offload.tiering.fs.manager import FileSystemTierManager
    from vllm.v1.kv_offload.tiering.obj.manager import ObjectStoreSecondaryTierManager
except ImportError:
    if os.environ.get("KVPROBE_REQUIRE_VLLM") == "1":
        raise
    pytest.skip("needs vLLM 0.33: tests/vllm_release/run.sh", allow_module_level=True)

from kvprobe.integrations.vllm.tiers import FsTier, ObjTier, TierConfigError, register_tiers
from kvprobe.integrations.vllm.tiers.lookup import wire_name

MODULE = "kvprobe.integrations.vllm.tiers"
BLOCKS, BLOCK_BYTES = 8, 4096
_END_STEP = ScheduleEndContext(new_req_ids=(), preempted_req_ids=())


def _spec() -> SimpleNamespace:
    """The part of vLLM's OffloadingSpec the fs and obj tiers read."""
    config = OffloadingConfig(
        groups=(),
        worker_kv_bytes_per_block=0,
        enable_kv_cache_events=False,
        extra_config={},
        engine_id="kvprobe-test",
        model=OffloadingModelConfig(name="kvprobe/tiny", dtype="float16"),
        cache=OffloadingCacheConfig(tokens_per_hash=16, blocks_per_chunk=1),
        parallel=OffloadingParallelConfig(
            rank=0,
            world_size=1,
            tp_size=1,
            pp_size=1,
            pcp_size=1,
            dcp_size=1,
            data_parallel_index=0,
            data_parallel_size=1,
            data_parallel_rank_local=None,
            is_parallelism_agnostic=False,
        ),
        replicated_layout=False,
    )
    return SimpleNamespace(config=config, blocks_per_chunk=1)


def _primary(fill: int = 0) -> Any:
    """A page-aligned (O_DIRECT-able) array of BLOCKS blocks of BLOCK_BYTES, every byte ``fill``."""
    raw = np.zeros(BLOCKS * BLOCK_BYTES + 4096, dtype=np.uint8)
    start = -raw.ctypes.data % 4096
    blocks = raw[start : start + BLOCKS * BLOCK_BYTES].reshape(BLOCKS, BLOCK_BYTES)
    blocks[:] = fill
    return blocks


def _key(n: int) -> bytes:
    return make_offload_key(n.to_bytes(8, "big"), 0)


def _job(job_id: int, keys: list[bytes]) -> TransferJob:
    return TransferJob(
        job_id=job_id,
        keys=keys,
        chunk_ids=np.arange(len(keys), dtype=np.int32),
        is_promotion=False,
        req_context=ReqContext(req_id=f"job-{job_id}"),
    )


def _finish(tier: Any, job_id: int, timeout_s: float = 30.0) -> bool:
    """Wait for one job of ``tier``; its success."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for result in tier.get_finished_jobs():
            if result.job_id == job_id:
                return bool(result.success)
        time.sleep(0.01)
    raise AssertionError(f"job {job_id} did not finish in {timeout_s} s")


def _verdicts(tier: Any, keys: list[bytes], req_id: str, timeout_s: float = 30.0) -> list[Any]:
    """Ask ``tier`` for ``keys`` step after step (as vLLM's scheduler does) until none is RETRY."""
    context = ReqContext(req_id=req_id)
    for position, key in enumerate(keys):
        context.set_offload_key_position(key, (position + 1) * 16)
    deadline = time.monotonic() + timeout_s
    while True:
        answers = [tier.lookup(k, context) for k in keys]
        if LookupResult.RETRY not in answers or time.monotonic() > deadline:
            tier.on_request_finished(context)
            return answers
        tier.on_schedule_end(_END_STEP)
        time.sleep(0.01)


def _store(tier: Any, keys: list[bytes], job_id: int) -> None:
    tier.submit_store(_job(job_id, keys))
    assert _finish(tier, job_id)


def _load(tier: Any, keys: list[bytes], job_id: int) -> None:
    tier.submit_load(_job(job_id, keys))
    assert _finish(tier, job_id)


# --- the filesystem tier ---------------------------------------------------------------


def _fs_config(root: str, **extra: Any) -> dict[str, Any]:
    return {"root_dir": root, "n_read_threads": 2, "n_write_threads": 2, **extra}


@pytest.fixture
def built() -> Iterator[list[Any]]:
    """Tiers a test built; each is shut down at the end."""
    tiers: list[Any] = []
    yield tiers
    for tier in tiers:
        tier.shutdown()


def _create(built: list[Any], config: dict[str, Any], primary: Any) -> Any:
    tier = SecondaryTierFactory.create_secondary_tier(config, memoryview(primary), _spec())
    built.append(tier)
    return tier


def test_the_plugin_registers_both_names_once() -> None:
    register_tiers()  # vLLM may have called it already: either way both names are there now
    assert register_tiers() == []  # a second call leaves them and does not raise
    for short, cls in (("kvprobe-obj", ObjTier), ("kvprobe-fs", FsTier)):
        assert SecondaryTierFactory.get_tier_class({"type": short}) is cls


@pytest.mark.parametrize(
    "identity", [{"type": "FsTier", "module_path": MODULE}, {"type": "kvprobe-fs"}], ids=["module_path", "short"]
)
def test_the_factory_builds_fs_tier(identity: dict[str, str], tmp_path: Any, built: list[Any]) -> None:
    register_tiers()
    tier = _create(built, {**identity, **_fs_config(str(tmp_path), lookup_timeout_s=3.0)}, _primary())
    assert type(tier) is FsTier
    assert tier.tier_type == identity["type"]
    assert tier._lookup_manager.manager.lookup_timeout_s == 3.0  # the kvprobe key reached the manager
    keys = [_key(i) for i in range(3)]
    _store(tier, keys[:2], 1)
    assert _verdicts(tier, keys, "r1") == [LookupResult.HIT, LookupResult.HIT, LookupResult.MISS]
    stats = tier._lookup_manager.stats
    assert (stats.hits, stats.misses) == (2, 1)  # answered by kvprobe's manager


@pytest.mark.parametrize(("writer_is_kvprobe"), [False, True], ids=["vllm-writes", "kvprobe-writes"])
def test_a_fleet_mixes_fs_tiers(writer_is_kvprobe: bool, tmp_path: Any, built: list[Any]) -> None:
    kvprobe_config = {"type": "FsTier", "module_path": MODULE, **_fs_config(str(tmp_path))}
    vllm_config = {"type": "fs", **_fs_config(str(tmp_path))}
    writer = _create(built, kvprobe_config if writer_is_kvprobe else vllm_config, _primary(fill=7))
    reader = _create(built, vllm_config if writer_is_kvprobe else kvprobe_config, _primary(fill=0))
    assert {type(writer), type(reader)} == {FsTier, FileSystemTierManager}
    keys = [_key(100 + i) for i in range(4)]
    _store(writer, keys[:3], 1)
    assert _verdicts(reader, keys, "mix") == [LookupResult.HIT] * 3 + [LookupResult.MISS]
    _load(reader, keys[:3], 2)
    assert bytes(reader._primary_kv_view[:3].tobytes()) == bytes([7]) * 3 * BLOCK_BYTES


@pytest.mark.parametrize(
    ("key", "value"),
    [("chain_mode", "sideways"), ("lookup_timeout_s", -1), ("cache_hit_ttl_s", "60"), ("cache_max_entries", 10)],
)
def test_a_bad_fs_key_names_itself(key: str, value: object, tmp_path: Any) -> None:
    config = {"type": "kvprobe-fs", **_fs_config(str(tmp_path / "tier")), key: value}
    register_tiers()
    with pytest.raises(TierConfigError, match=f"'{key}'"):
        SecondaryTierFactory.create_secondary_tier(config, memoryview(_primary()), _spec())
    assert not (tmp_path / "tier").exists()  # refused before vLLM's tier wrote anything


def test_an_unknown_fs_key_is_named(tmp_path: Any) -> None:
    config = {"type": "FsTier", "module_path": MODULE, **_fs_config(str(tmp_path)), "cache_ttl": 5}
    with pytest.raises(TypeError, match="cache_ttl"):
        SecondaryTierFactory.create_secondary_tier(config, memoryview(_primary()), _spec())


# --- the object tier (real NIXL, local moto S3) -----------------------------------------


@pytest.fixture(scope="module")
def s3() -> Iterator[Any]:
    pytest.importorskip("boto3")
    pytest.importorskip("moto")
    from kvprobe.backends._nixl_import import nixl_unavailable

    if (why := nixl_unavailable()) is not None:
        pytest.skip(why)
    from kvprobe.testing.s3server import S3Server

    server = S3Server()
    server.start()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture
def bucket(s3: Any, request: pytest.FixtureRequest) -> str:
    name = f"tiers-{os.getpid()}-{abs(hash(request.node.nodeid)) % 10**8}"
    s3.create_bucket(name)
    return name


def _obj_config(s3: Any, bucket: str, **extra: Any) -> dict[str, Any]:
    store = {
        "bucket": bucket,
        "endpoint_override": s3.endpoint_url.removeprefix("http://"),
        "scheme": "http",
        "access_key": s3.access_key,
        "secret_key": s3.secret_key,
        "region": s3.region,
    }
    return {"store_config": store, "prefix": "fleet", "io_threads": 2, "pace_scope": "process", **extra}


@pytest.mark.parametrize(
    "identity", [{"type": "ObjTier", "module_path": MODULE}, {"type": "kvprobe-obj"}], ids=["module_path", "short"]
)
def test_the_factory_builds_obj_tier(identity: dict[str, str], s3: Any, bucket: str, built: list[Any]) -> None:
    register_tiers()
    config = {**identity, **_obj_config(s3, bucket, lookup_deadline_s=2.0, cache_hit_ttl_s=30)}
    tier = _create(built, config, _primary())
    assert type(tier) is ObjTier
    manager = tier._lookup_manager.manager
    assert (manager.lookup_timeout_s, tier.lookup_backend.deadline_s) == (2.5, 2.0)
    assert manager.core.memory is not None  # the verdict cache is on
    keys = [_key(i) for i in range(3)]
    _store(tier, keys[:2], 1)
    assert _verdicts(tier, keys, "r1") == [LookupResult.HIT, LookupResult.HIT, LookupResult.MISS]
    assert tier._lookup_manager.stats.backend_calls >= 1
    assert sum(tier.lookup_backend.stats.values()) > 0  # kvprobe's backend sent the HEADs


@pytest.mark.parametrize(("writer_is_kvprobe"), [False, True], ids=["vllm-writes", "kvprobe-writes"])
def test_a_fleet_mixes_obj_tiers(writer_is_kvprobe: bool, s3: Any, bucket: str, built: list[Any]) -> None:
    kvprobe_config = {"type": "ObjTier", "module_path": MODULE, **_obj_config(s3, bucket)}
    vllm_config = {"type": "obj", **_obj_config(s3, bucket)}
    del vllm_config["pace_scope"]
    writer = _create(built, kvprobe_config if writer_is_kvprobe else vllm_config, _primary(fill=9))
    reader = _create(built, vllm_config if writer_is_kvprobe else kvprobe_config, _primary(fill=0))
    keys = [_key(200 + i) for i in range(4)]
    _store(writer, keys[:3], 1)
    assert {type(writer), type(reader)} == {ObjTier, ObjectStoreSecondaryTierManager}
    kvprobe_tier = writer if writer_is_kvprobe else reader
    stored = {o["Key"] for o in s3.client().list_objects_v2(Bucket=bucket)["Contents"]}
    assert {kvprobe_tier.lookup_backend.locate(k) for k in keys[:3]} <= stored  # the names on the wire
    assert _verdicts(reader, keys, "mix") == [LookupResult.HIT] * 3 + [LookupResult.MISS]
    _load(reader, keys[:3], 2)
    assert bytes(reader._primary_kv_view[:3].tobytes()) == bytes([9]) * 3 * BLOCK_BYTES


def test_wire_names_drop_the_doubled_slashes() -> None:
    assert wire_name("fleet//m_1_r0/abc/de_g0/x.bin") == "fleet/m_1_r0/abc/de_g0/x.bin"
    assert wire_name("/m_1_r0/abc/de_g0/x.bin") == "m_1_r0/abc/de_g0/x.bin"


def test_a_failing_store_reads_miss_after_the_deadline(s3: Any, bucket: str, built: list[Any]) -> None:
    """vLLM's test_lookup_exception_returns_false, given kvprobe's deadline (tiers_expected_failures.toml)."""
    config = {"type": "ObjTier", "module_path": MODULE, **_obj_config(s3, bucket, lookup_deadline_s=0.5)}
    tier = _create(built, config, _primary())
    s3.stop()
    try:
        assert _verdicts(tier, [_key(1)], "fails", timeout_s=20.0) == [LookupResult.MISS]
    finally:
        s3.start()
    assert tier._lookup_manager.stats.backend_errors == 1


@pytest.mark.parametrize(
    ("key", "value"),
    [("pace_scope", "fleet"), ("lookup_deadline_s", 0), ("lookup_threads", 0), ("store_config", "bucket")],
)
def test_a_bad_obj_key_names_itself(key: str, value: object, s3: Any, bucket: str) -> None:
    config = {"type": "ObjTier", "module_path": MODULE, **_obj_config(s3, bucket), key: value}
    with pytest.raises(TierConfigError, match=f"'{key}'"):
        SecondaryTierFactory.create_secondary_tier(config, memoryview(_primary()), _spec())


def test_the_operator_configs_in_the_docs_name_only_accepted_keys() -> None:
    """docs/vllm.md's whole --kv-transfer-config examples: JSON, and every tier key a constructor argument."""
    import inspect
    import json
    import re
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "docs" / "vllm.md").read_text()
    configs = [json.loads(block) for block in re.findall(r"```json\n(.*?)```", text, re.S)]
    tiers = [t for c in configs for t in c["kv_connector_extra_config"]["secondary_tiers"]]
    assert {t["type"] for t in tiers} == {"kvprobe-obj", "FsTier"}
    register_tiers()
    for config in configs:
        assert config["kv_connector"] == "OffloadingConnector"
        assert config["kv_connector_extra_config"]["spec_name"] == "TieringOffloadingSpec"
    for tier in tiers:
        cls = SecondaryTierFactory.get_tier_class(tier)
        arguments = {k: v for k, v in tier.items() if k not in ("type", "module_path")}
        inspect.signature(cls).bind(offloading_spec=None, primary_kv_view=None, tier_type=tier["type"], **arguments)
