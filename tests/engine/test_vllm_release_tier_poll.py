"""vLLM's real tier-poll thread reaching the real fs tier on kvprobe's drop-in.

Needs the released vLLM (``tests/vllm_release/run.sh`` sets up a venv with
it and runs this file; without vLLM it skips, and with
``KVPROBE_REQUIRE_VLLM=1`` it fails instead).  The drop-in is switched in
the way docs/vllm.md tells a vLLM user, before the tiers are imported.

The scenario: vLLM's ``TieringOffloadingManager`` over a CPU primary tier
and two secondary tiers, vLLM's filesystem tier and a peer tier that opts in
to ``tolerates_off_thread_polling``.  The peer's requests (a remote
counterpart asking which blocks this engine has) are served between engine
steps from the manager's tier-poll thread, and from ``on_schedule_end`` on
the scheduler's; each lookup fans out through ``ParentManager`` to the fs
tier, so its lookup manager is called from both threads, one at a time
under the manager lock.  Blocks: two stored in the fs tier, one stored
truncated (its promotion fails and the fs tier calls ``mark_miss``), one
absent.  The scheduler's own request looks up the same blocks.

It must run with no error logged by the tier-poll thread and no request
left behind in the tiering manager or the lookup table.  The same scenario
on kvprobe's stricter one-thread contract (``single_thread=True``) must
fail: that is the test's power.
"""

from __future__ import annotations

import logging
import mmap
import os
import threading
import time
from collections import deque
from pathlib import Path
from types import SimpleNamespace
from typing import Any, ClassVar

import pytest

if os.environ.get("KVPROBE_REQUIRE_VLLM") != "1":
    pytest.importorskip("vllm.v1.kv_offload.tiering.async_lookup", reason="needs vLLM: tests/vllm_release/run.sh")

import vllm.v1.kv_offload.tiering.async_lookup as vllm_async_lookup

from kvprobe.integrations.vllm import AsyncLookupManager

vllm_async_lookup.AsyncLookupManager = AsyncLookupManager  # the one-line switch, before the tiers are imported

from vllm.v1.kv_offload.base import (  # noqa: E402  (after the switch, on purpose)
    LookupResult,
    Medium,
    OffloadingKVEventsConfig,
    ReqContext,
    RequestOffloadingContext,
    ScheduleEndContext,
    make_offload_key,
)
from vllm.v1.kv_offload.config import (  # noqa: E402
    OffloadingCacheConfig,
    OffloadingConfig,
    OffloadingModelConfig,
    OffloadingParallelConfig,
)
from vllm.v1.kv_offload.tiering import manager as tiering_manager  # noqa: E402
from vllm.v1.kv_offload.tiering.base import SecondaryTierManager  # noqa: E402
from vllm.v1.kv_offload.tiering.fs import manager as fs_manager  # noqa: E402

NUM_CHUNKS = 8
BLOCK_BYTES = mmap.PAGESIZE  # one page per block: O_DIRECT-aligned
STORED = [make_offload_key(bytes([i]) * 8, 0) for i in (1, 2)]
TRUNCATED = make_offload_key(b"t" * 8, 0)
ABSENT = make_offload_key(b"a" * 8, 0)
ALL_KEYS = [*STORED, TRUNCATED, ABSENT]
EXPECTED = [LookupResult.HIT, LookupResult.HIT, LookupResult.MISS, LookupResult.MISS]
STEP_BUDGET = 400  # steps of at most a few ms each; the scenario needs a handful
DECIDED = (LookupResult.HIT, LookupResult.MISS)


def offloading_spec() -> SimpleNamespace:
    """What the fs tier reads from vLLM's ``OffloadingSpec``, with real config objects."""
    parallel = OffloadingParallelConfig(
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
    )
    config = OffloadingConfig(
        groups=(),
        worker_kv_bytes_per_block=0,
        enable_kv_cache_events=False,
        extra_config={},
        engine_id="kvprobe-test",
        model=OffloadingModelConfig(name="kvprobe/test", dtype="float16"),
        cache=OffloadingCacheConfig(tokens_per_hash=16, blocks_per_chunk=1),
        parallel=parallel,
    )
    events = OffloadingKVEventsConfig(enable_kv_cache_events=False, self_describing_kv_events=False)
    return SimpleNamespace(config=config, blocks_per_chunk=1, kv_events_config=events)


class AnonymousRegion:
    """Stands in for vLLM's shared-memory region: page-aligned anonymous memory."""

    def __init__(self) -> None:
        self._memory = mmap.mmap(-1, NUM_CHUNKS * BLOCK_BYTES)

    def create_kv_memoryview(self) -> memoryview:
        return memoryview(self._memory).cast("B", (NUM_CHUNKS, BLOCK_BYTES))

    def cleanup(self) -> None:
        pass  # released with the object (the primary tier still holds views of it)


POLL_THREAD = "vllm_offload_tier_poll"  # the name vLLM gives its tier-poll thread


class PeerTier(SecondaryTierManager):
    """A tier whose remote peer asks which blocks this engine has, between engine steps.

    Its transport is driven from the tier-poll thread only (``on_schedule_end``
    calls it on the scheduler's thread too, where it does nothing), so every
    peer lookup and finish reaches the fs tier from that thread.
    """

    medium: ClassVar[Medium] = Medium.CPU
    tolerates_off_thread_polling: ClassVar[bool] = True

    def __init__(self, primary_kv_view: memoryview, asks: list[str]) -> None:
        super().__init__(offloading_spec=offloading_spec(), primary_kv_view=primary_kv_view, tier_type="peer")
        self.waiting: deque[ReqContext] = deque(ReqContext(req_id=r) for r in asks)
        self.open: list[ReqContext] = []
        self.answers: dict[str, list[LookupResult]] = {}
        self.serving_threads: set[str] = set()

    def serve_external_requests(self, parent: Any) -> None:
        self.serving_threads.add(threading.current_thread().name)
        if threading.current_thread().name != POLL_THREAD:
            return
        if self.waiting:
            ctx = self.waiting.popleft()
            parent.on_new_request(ctx)
            self.open.append(ctx)
        for ctx in list(self.open):
            results = [parent.lookup(key, ctx) for key in ALL_KEYS]
            if all(r in DECIDED for r in results):
                self.answers[ctx.req_id] = results
                self.open.remove(ctx)
                parent.on_request_finished(ctx)

    def lookup(self, key: Any, req_context: Any) -> LookupResult:
        return LookupResult.MISS  # the peer serves, it stores nothing here

    def submit_store(self, job_metadata: Any) -> None:
        pass

    def submit_load(self, job_metadata: Any) -> None:
        raise AssertionError("nothing is ever loaded from the peer tier")

    def get_finished_jobs(self) -> list[Any]:
        return []

    def on_new_request(self, req_context: ReqContext) -> RequestOffloadingContext:
        return RequestOffloadingContext()

    def drain_jobs(self) -> None:
        pass

    def shutdown(self) -> None:
        pass


class _OneThreadOnly(AsyncLookupManager):
    """The drop-in on kvprobe's stricter contract: every call from one thread."""

    def __init__(self, tier_type: str, **extras: Any) -> None:
        super().__init__(tier_type, single_thread=True, **extras)


class OneThreadFsLookups(fs_manager.FsAsyncLookupManager, _OneThreadOnly):
    """vLLM's fs lookup manager with ``single_thread=True`` under it."""


class Scenario:
    """The managers of one run and the log records vLLM's tiering module wrote."""

    def __init__(self, root: Path) -> None:
        region = AnonymousRegion()
        self.primary = tiering_manager.CPUPrimaryTierOffloadingManager(num_chunks=NUM_CHUNKS, mmap_region=region)
        view = self.primary.get_kv_memoryview()
        self.fs = fs_manager.FileSystemTierManager(
            offloading_spec=offloading_spec(),
            primary_kv_view=view,
            tier_type="fs",
            root_dir=str(root),
            n_read_threads=2,
            n_write_threads=1,
        )
        for key in [*STORED, TRUNCATED]:
            path = Path(self.fs.file_mapper.get_file_name(key))
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(b"k" * (BLOCK_BYTES if key in STORED else 10))
        self.peer = PeerTier(view, ["peer-1", "peer-2", "peer-3"])
        self.manager = tiering_manager.TieringOffloadingManager(
            primary_tier=self.primary, secondary_tiers=[self.fs, self.peer]
        )

    def run(self) -> list[LookupResult]:
        """Engine steps until the peer and the scheduler's request have their answers; the scheduler's answers."""
        ctx, step_end = ReqContext(req_id="scheduler-1"), ScheduleEndContext(new_req_ids=(), preempted_req_ids=())
        with self.manager.lock:
            self.manager.on_new_request(ctx)
        mine: list[LookupResult] = []
        for _ in range(STEP_BUDGET):
            with self.manager.lock:
                if not all(r in DECIDED for r in mine) or not mine:
                    mine = [self.manager.lookup(key, ctx) for key in ALL_KEYS]
                self.manager.on_schedule_end(step_end)
            if all(r in DECIDED for r in mine) and len(self.peer.answers) == 3:
                break
            time.sleep(0.003)  # the model step: the lock is free, the tier-poll thread serves the peer
        with self.manager.lock:
            self.manager.on_request_finished(ctx)
        for _ in range(50):  # let probes still in flight come back and be reclaimed
            with self.manager.lock:
                self.manager.on_schedule_end(step_end)
            if len(self.fs._lookup_manager) == 0:
                break
            time.sleep(0.003)
        return mine


@pytest.fixture
def tiering_log() -> Any:
    """Records what vLLM's tiering manager logs at WARNING and above."""
    records: list[logging.LogRecord] = []
    handler = logging.Handler(logging.WARNING)
    handler.emit = records.append  # type: ignore[method-assign]
    logger = logging.getLogger(tiering_manager.__name__)
    logger.addHandler(handler)
    yield records
    logger.removeHandler(handler)


def test_the_switch_took_effect() -> None:
    assert issubclass(fs_manager.FsAsyncLookupManager, AsyncLookupManager), (
        "vLLM's fs tier was imported before the switch (run this file on its own)"
    )


def test_tier_poll_thread_and_peer_tier_run_clean_on_the_drop_in(tmp_path: Path, tiering_log: list[Any]) -> None:
    scenario = Scenario(tmp_path)
    try:
        mine = scenario.run()
        assert not tiering_log, [r.getMessage() for r in tiering_log]
        assert mine == EXPECTED
        assert scenario.peer.answers == dict.fromkeys(["peer-1", "peer-2", "peer-3"], EXPECTED)
        assert POLL_THREAD in scenario.peer.serving_threads, "the tier-poll thread never served the peer"
        assert scenario.manager._req_state == {}, "requests left in the tiering manager"
        lookups = scenario.fs._lookup_manager
        assert len(lookups) == 0, lookups._lookup_state
        assert lookups.manager.core.requests == {}
        assert lookups.stats.forced_misses >= 1, "the truncated block's failed load never reached mark_miss"
    finally:
        scenario.manager.shutdown()


def test_the_same_scenario_fails_on_kvprobes_one_thread_contract(
    tmp_path: Path, tiering_log: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(fs_manager, "FsAsyncLookupManager", OneThreadFsLookups)
    scenario = Scenario(tmp_path)
    try:
        scenario.run()
        failures = [r for r in tiering_log if "tier-poll round failed" in r.getMessage()]
        assert failures, "the one-thread rule was never broken: the scenario does not reach the tier from two threads"
        assert "WrongThreadError" in str(failures[0].exc_info)
        assert scenario.manager._req_state, "every request finished although the poll thread's calls were refused"
    finally:
        scenario.manager.shutdown()
