"""One engine process of :mod:`bench.vllm.compare`: vLLM 0.33's object tier, one of three ways, scanned as vLLM scans.

Run as ``python -m bench.vllm.engine PLAN.json`` in vLLM's venv (loopback
only; the parent stops it by its pid if it overruns).  The plan's ``mode``:

* ``vllm``: vLLM's own ``ObjectStoreSecondaryTierManager`` as shipped;
* ``switch``: the same class after the one-line switch of
  ``async_lookup.AsyncLookupManager`` to kvprobe's drop-in (before the tier
  module is imported);
* ``kvprobe``: kvprobe's ``ObjTier`` with its defaults (loaded by
  ``module_path``).

Each is built by vLLM's ``SecondaryTierFactory`` on the plan's endpoint (the
capped proxy).  The lookups are vLLM's own scan,
``OffloadingConnectorScheduler._maximal_prefix_lookup``, called on a
stand-in whose ``manager.lookup`` is the tier's ``lookup`` (the CPU tier
always missing) and whose events tracker records nothing; each key's
position is recorded in the request's ``ReqContext`` on admission, as vLLM's
``update_offload_keys`` does.  Every ``step_s``: admit the requests whose
time has come, scan each live one, settle it once the scan returns a count
(decided) or its deadline has passed (``on_request_finished``), and end the
step (``on_schedule_end``).  Then one JSON line, ``shutdown``, and a plain
return from ``main``: the exit code is the interpreter's.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import time
from types import SimpleNamespace
from typing import Any

from bench.fleet.rgw_engine import prompt_keys

__all__ = ["MODES", "PREFIX", "TOKENS_PER_BLOCK", "main", "offloading_spec", "run", "tier_config"]

MODES = ("vllm", "switch", "kvprobe")
PREFIX = "fleet"  # the tiers' object prefix
TOKENS_PER_BLOCK = 16
_PRIMARY_BLOCKS, _BLOCK_BYTES = 4, 4096  # registered with NIXL by vLLM's tier; no block is loaded here


def offloading_spec() -> Any:
    """The part of vLLM's ``OffloadingSpec`` the obj tier reads (one GPU, one group)."""
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
        engine_id="bench-vllm", model=OffloadingModelConfig(name="bench/fleet", dtype="float16"),
        cache=OffloadingCacheConfig(tokens_per_hash=TOKENS_PER_BLOCK, blocks_per_chunk=1), parallel=parallel,
    )  # fmt: skip
    return SimpleNamespace(config=config, blocks_per_chunk=1)


def tier_config(plan: dict[str, Any]) -> dict[str, Any]:
    """The tier config an operator would write for the plan's mode (kvprobe's ``ObjTier``: its defaults)."""
    store = {
        "bucket": plan["bucket"],
        "endpoint_override": plan["endpoint_url"].removeprefix("http://"),
        "scheme": "http",
        "access_key": plan["access_key"],
        "secret_key": plan["secret_key"],
        "region": "us-east-1",
    }
    base = {"store_config": store, "prefix": PREFIX, "io_threads": 4}
    if plan["mode"] == "kvprobe":
        return {"type": "ObjTier", "module_path": "kvprobe.integrations.vllm.tiers", **base}
    return {"type": "obj", **base}


def _build(plan: dict[str, Any]) -> Any:
    if plan["mode"] not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {plan['mode']!r}")
    if plan["mode"] == "switch":
        import vllm.v1.kv_offload.tiering.async_lookup as vllm_async_lookup

        import kvprobe.integrations.vllm

        vllm_async_lookup.AsyncLookupManager = kvprobe.integrations.vllm.AsyncLookupManager  # type: ignore[misc]
    import numpy as np
    from vllm.v1.kv_offload.tiering.factory import SecondaryTierFactory

    primary = np.zeros((_PRIMARY_BLOCKS, _BLOCK_BYTES), dtype=np.uint8)
    return SecondaryTierFactory.create_secondary_tier(tier_config(plan), memoryview(primary), offloading_spec())


def run(plan: dict[str, Any]) -> dict[str, Any]:
    """Serve ``plan["requests"]`` (``[arrival_s, prompt, stored]`` each) and return what happened.

    Raises:
        ValueError: the plan's mode is not one of :data:`MODES`.
    """
    from vllm.distributed.kv_transfer.kv_connector.v1.offloading.scheduler import OffloadingConnectorScheduler
    from vllm.v1.kv_offload.base import LookupResult, ReqContext
    from vllm.v1.kv_offload.tiering.base import ScheduleEndContext

    tier = _build(plan)
    answers: list[Any] = []

    def lookup(key: bytes, context: Any) -> Any:
        answer = tier.lookup(key, context)
        answers.append(answer)
        return answer

    scheduler = SimpleNamespace(
        manager=SimpleNamespace(lookup=lookup), _events_tracker=SimpleNamespace(record_lookup=lambda *_: None)
    )
    scan = OffloadingConnectorScheduler._maximal_prefix_lookup
    end_of_step = ScheduleEndContext(new_req_ids=(), preempted_req_ids=())
    print("ready", flush=True)
    sys.stdin.readline()
    deadline_s, step_s = float(plan["deadline_s"]), float(plan["step_s"])
    waiting = sorted(plan["requests"])
    live: dict[str, tuple[float, int, int, list[bytes], Any]] = {}
    scans: dict[str, int] = {}  # per live request: how many steps scanned it
    outcomes: list[dict[str, Any]] = []
    started, n, steps = time.monotonic(), 0, 0
    overruns, busiest_s = 0, 0.0  # steps whose own work took longer than step_s: the CPU, not the store
    while waiting or live:
        step_start = time.monotonic()
        now = step_start - started
        while waiting and waiting[0][0] <= now:
            arrival, prompt, stored = waiting.pop(0)
            keys = prompt_keys(prompt)
            context = ReqContext(req_id=f"r{n}")
            for i, key in enumerate(keys):
                context.set_offload_key_position(key, (i + 1) * TOKENS_PER_BLOCK)
            live[context.req_id] = (arrival, prompt, stored, keys, context)
            scans[context.req_id] = 0
            n += 1
        for req_id, (arrival, prompt, stored, keys, context) in list(live.items()):
            answers.clear()
            hits = scan(scheduler, keys, context, None, None, 0)
            scans[req_id] += 1
            leading = next((i for i, a in enumerate(answers) if a is not LookupResult.HIT), len(answers))
            if hits is not None or now - arrival >= deadline_s:
                outcomes.append(
                    {
                        "prompt": prompt,
                        "stored": stored,
                        "leading_hits": leading,
                        "decided": hits is not None,
                        "settled_after_s": round(now - arrival, 4),
                        "scans": scans.pop(req_id),
                    }
                )
                tier.on_request_finished(context)
                del live[req_id]
        tier.on_schedule_end(end_of_step)
        steps += 1
        took = time.monotonic() - step_start
        overruns += took > step_s
        busiest_s = max(busiest_s, took)
        time.sleep(max(0.0, step_s - took))
    backend = getattr(tier, "lookup_backend", None)
    result = {
        "engine": plan["engine"],
        "mode": plan["mode"],
        "outcomes": outcomes,
        "steps": steps,
        "step_overruns": overruns,
        "busiest_step_s": round(busiest_s, 4),
        "backend_stats": None if backend is None else backend.stats,
        "pacing": None if backend is None else backend.pacing,
        "pace_trace": None if backend is None else backend.pace_trace,
        "manager_stats": None if backend is None else _stats_dict(tier),
        "elapsed_s": round(time.monotonic() - started, 2),
    }
    tier.shutdown()
    return result


def _stats_dict(tier: Any) -> dict[str, Any]:
    """The kvprobe manager's counters (batches, backend calls, timeouts) of a kvprobe tier."""
    return dataclasses.asdict(tier._lookup_manager.stats)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m bench.vllm.engine PLAN.json", file=sys.stderr)
        return 2
    with open(args[0]) as f:
        plan = json.load(f)
    print(json.dumps(run(plan)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
