"""Every real backend gives the true verdicts through ``AsyncLookupManager``.

Ground truth is written with the backend's own writers at ``locate(key)``;
for the object store those go through boto3, independent of NIXL.
"""

from __future__ import annotations

import random
from typing import Any

from integ_harness import block_keys, cleanup_all, resolve

from kvprobe.backends import BlockStore
from kvprobe.statemachine import AsyncLookupManager


def test_verdicts_match_ground_truth_across_groups(block_store: Any) -> None:
    assert isinstance(block_store, BlockStore)
    rng = random.Random(5)
    keys = block_keys(rng, 100, groups=3)  # 300 keys, group suffixes 0..2
    stored = set(rng.sample(keys, 130))
    for key in stored:
        block_store.store(key, b"block:" + key)
    # Six requests with overlapping key sets: shared keys must be probed once.
    wanted = {f"req-{i}": rng.sample(keys, 80) for i in range(6)}
    everything = sorted({k for ks in wanted.values() for k in ks})
    with AsyncLookupManager(block_store, name="integ", lookup_timeout_s=60.0) as m:
        verdicts = resolve(m, wanted)
        for req, ks in wanted.items():
            assert verdicts[req] == [k in stored for k in ks], req
        stats = m.stats
        assert stats.backend_errors == 0 and stats.timeouts == 0, stats
        assert stats.probes_submitted == len(everything), "a key was probed twice or never"
        assert stats.hits == sum(k in stored for k in everything)
        cleanup_all(m, wanted)
        assert len(m) == 0


def test_whole_key_set_in_one_group(block_store: Any) -> None:
    """A single 300-key request: one backend call answers all of it."""
    rng = random.Random(6)
    keys = block_keys(rng, 300)
    stored = set(keys[::3])
    for key in stored:
        block_store.store(key)
    with AsyncLookupManager(block_store, name="integ-one") as m:
        verdicts = resolve(m, {"long-prompt": keys})
        assert verdicts["long-prompt"] == [k in stored for k in keys]
        assert m.stats.backend_calls == 1
        m.cleanup("long-prompt")
        assert len(m) == 0


def test_removed_block_reads_as_missing(block_store: Any) -> None:
    key = b"\x42" * 32 + (7).to_bytes(4, "little")
    block_store.store(key, b"x" * 4096)
    assert list(block_store.batch_lookup([key], None)) == [True]
    block_store.remove(key)
    assert list(block_store.batch_lookup([key], None)) == [False]
    block_store.remove(key)  # removing a missing block is not an error
    assert list(block_store.batch_lookup([], None)) == []


def test_failed_load_mark_miss_sticks(block_store: Any) -> None:
    rng = random.Random(7)
    keys = block_keys(rng, 20)
    for key in keys:
        block_store.store(key)
    with AsyncLookupManager(block_store, name="integ-miss") as m:
        assert resolve(m, {"r": keys})["r"] == [True] * 20
        m.mark_miss(keys[:5])
        assert [m.lookup(k, _ctx("r")) for k in keys] == [False] * 5 + [True] * 15
        m.cleanup("r")
        assert len(m) == 0


def _ctx(req: str) -> Any:
    from kvprobe.statemachine import ReqContext

    return ReqContext(req)


def test_blocks_written_by_hand_at_locate_are_found(block_store: Any, request: Any) -> None:
    """Ground truth written without the backend's writers: plain files, or a separate S3 client."""
    from pathlib import Path

    rng = random.Random(8)
    keys = block_keys(rng, 50, groups=2)
    present = set(keys[1::3])
    if hasattr(block_store, "root"):

        def put(name: str) -> None:
            path = Path(name)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(b"raw")
    else:
        client = request.getfixturevalue("s3_server").client()

        def put(name: str) -> None:
            client.put_object(Bucket=block_store.bucket, Key=name, Body=b"raw")

    for key in present:
        put(block_store.locate(key))
    with AsyncLookupManager(block_store, name="integ-raw", lookup_timeout_s=60.0) as m:
        assert resolve(m, {"raw": keys})["raw"] == [k in present for k in keys]
