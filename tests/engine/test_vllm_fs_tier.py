"""A tier subclassed the way vLLM's filesystem tier subclasses its base runs on the drop-in.

``vllm_style_fs_tier.py`` holds the tier: per-key ``os.access`` (or
``os.stat``) in ``batch_lookup``, ``super().__init__(tier_type=...)`` before
its own attributes, lookups mapped to ``LookupResult``.  Only its imports
name kvprobe.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import vllm_style_fs_tier
from vllm_harness import settle
from vllm_style_fs_tier import FileSystemTier

from kvprobe.integrations.vllm import LookupResult
from kvprobe.statemachine import ReqContext

KEYS = [bytes([i]) * 16 + (i % 2).to_bytes(4, "big") for i in range(1, 9)]


def test_vllm_tier_module_differs_only_by_import() -> None:
    source = Path(vllm_style_fs_tier.__file__).read_text()
    code = source.split('"""', 2)[2]  # past the module docstring
    naming = [line for line in code.splitlines() if re.search("kvprobe", line)]
    assert naming == ["from kvprobe.integrations.vllm import AsyncLookupManager, LookupResult"]


def _step_until_known(tier: FileSystemTier, keys: list[bytes], ctx: ReqContext) -> list[LookupResult]:
    for _ in range(500):
        results = [tier.lookup(k, ctx) for k in keys]
        if LookupResult.RETRY not in results:
            return results
        tier.on_schedule_end()
        time.sleep(0.002)
    raise AssertionError("the tier never answered")


@pytest.mark.parametrize("use_stat", [False, True], ids=["os.access", "os.stat"])
def test_vllm_style_fs_tier_runs_unchanged_on_the_drop_in(tmp_path: Path, use_stat: bool) -> None:
    tier = FileSystemTier(str(tmp_path), tier_type="fs-test", use_stat=use_stat)
    try:
        stored = set(KEYS[:3] + KEYS[5:6])
        for key in stored:
            tier.store_block(key)
        ctx = ReqContext("req-0")
        assert [tier.lookup(k, ctx) for k in KEYS] == [LookupResult.RETRY] * len(KEYS)
        results = _step_until_known(tier, KEYS, ctx)
        assert results == [LookupResult.HIT if k in stored else LookupResult.MISS for k in KEYS]
        manager = tier._lookup_manager
        assert manager.stats.backend_calls == 1 and manager.stats.backend_errors == 0

        # A load of KEYS[1] failed: MISS from now on, though its file is there.
        tier.load_failed([KEYS[1]])
        assert tier.lookup(KEYS[1], ctx) is LookupResult.MISS

        # A second request shares the verdicts and probes only its new key.
        other = ReqContext("req-1")
        extra = bytes([99]) * 16 + (0).to_bytes(4, "big")
        tier.store_block(extra)
        assert tier.lookup(KEYS[0], other) is LookupResult.HIT
        assert _step_until_known(tier, [extra], other) == [LookupResult.HIT]
        assert manager.stats.backend_calls == 2

        tier.on_request_finished(ctx)
        tier.on_request_finished(other)
        tier.on_schedule_end()
        settle(manager)
        assert len(manager) == 0
    finally:
        tier.shutdown()
    assert len(tier._lookup_manager) == 0


def test_vllm_style_fs_tier_survives_a_vanishing_root(tmp_path: Path) -> None:
    # The root is replaced by a file: os.stat raises NotADirectoryError inside
    # batch_lookup (vLLM's base would log and answer MISS; so does kvprobe, and
    # the worker is still serving afterwards).
    root = tmp_path / "tier"
    root.mkdir()
    tier = FileSystemTier(str(root), use_stat=True)
    try:
        os.rmdir(root)
        root.write_bytes(b"not a directory")
        ctx = ReqContext("req-0")
        assert _step_until_known(tier, KEYS[:2], ctx) == [LookupResult.MISS] * 2
        assert tier._lookup_manager.stats.backend_errors == 1
        root.unlink()
        tier.store_block(KEYS[2])
        assert _step_until_known(tier, KEYS[2:3], ctx) == [LookupResult.HIT]
    finally:
        tier.shutdown()


def test_the_vllm_tier_example_runs_and_ends_clean() -> None:
    example = Path(__file__).resolve().parents[2] / "examples" / "vllm_tier.py"
    done = subprocess.run([sys.executable, str(example)], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "MISS, 6 of 10 blocks in the tier" in done.stdout
    assert "block 0 alone: HIT" in done.stdout
    assert "after the failed load: MISS, 5 leading blocks" in done.stdout
    assert "states held: 0; backend calls: 1" in done.stdout
