"""vLLM 0.33's object tier three ways in one run: as shipped, with the one-line switch, and kvprobe's ``ObjTier``.

Issue 38's comparison (loopback only, every process stopped by its pid), in
vLLM's venv (``.venv-vllm``, which ``tests/vllm_release/run.sh setup``
builds)::

    .venv-vllm/bin/python -m bench.vllm.compare [--engines 6] [--head-rate 400] [--seeds 1 2]

* a single-node Ceph RGW (:class:`kvprobe.testing.rgw.RgwServer`) holding a
  pool of 64-block prompts, each with a stored prefix of 0 to 64 blocks
  (:func:`bench.fleet.rgw.stored_prefixes`), PUT under the names vLLM's obj
  tier gives them (its ``FileMapper``, prefix ``fleet``);
* in front of it, :class:`kvprobe.testing.faultproxy.FaultProxy` capping
  HEADs at ``--head-rate`` (``503 SlowDown`` beyond), counting the HEADs;
* per seed and per mode (:data:`bench.vllm.engine.MODES`), ``--engines``
  engine processes (:mod:`bench.vllm.engine`) with the same Poisson arrivals
  (:func:`bench.fleet.rgw.engine_plans`), scanning with vLLM's own
  ``_maximal_prefix_lookup``.

It prints, per mode, side by side: stored prefixes **found** (decided with
the stored prefix's length), **HEADs / ideal** (the proxy's HEADs over hits
plus the first miss per request), **throttled** (503s over HEADs),
**undecided** requests at their deadline, **wrong** (more leading hits than
stored: an absent block answered stored) and the engines' **exit** codes.
``--json`` keeps the raw outcomes (default ``bench/results/vllm_compare.json``).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.common import RESULTS_DIR, machine
from bench.fleet.rgw import UNCAPPED, Setup, engine_plans, stored_prefixes
from bench.fleet.rgw_engine import CHAIN, prompt_keys
from bench.vllm.engine import MODES, PREFIX, offloading_spec

__all__ = ["figures", "fill_store", "main", "pressure", "run_mode", "table"]

BUCKET = "vllm-fleet"
ROOT = Path(__file__).resolve().parents[2]


def fill_store(server: Any, bucket: str, stored: Sequence[int]) -> int:
    """PUT every stored block of the pool under vLLM's obj tier names; how many.

    Raises:
        botocore.exceptions.BotoCoreError / ClientError: a PUT failed.
    """
    from vllm.v1.kv_offload.file_mapper import FileMapper

    from kvprobe.integrations.vllm.tiers.lookup import wire_name

    # As vLLM's obj tier builds its mapper (tiering/obj/manager.py).
    mapper = FileMapper.from_offloading_spec(f"{PREFIX}/", offloading_spec(), blocks_per_file=1, parallel_agnostic=True)
    names = [wire_name(mapper.get_file_name(k)) for p, n in enumerate(stored) for k in prompt_keys(p)[:n]]
    client = server.client()
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda name: client.put_object(Bucket=bucket, Key=name, Body=b"block"), names))
    return len(names)


@dataclass
class _Engine:
    proc: subprocess.Popen[str]
    stderr_path: str


def _spawn(plan: dict[str, Any], workdir: str) -> _Engine:
    path = os.path.join(workdir, f"engine-{plan['engine']}.json")
    with open(path, "w") as f:
        json.dump(plan, f)
    err = os.path.join(workdir, f"engine-{plan['engine']}.stderr")
    with open(err, "w") as stderr:
        proc = subprocess.Popen(
            [sys.executable, "-m", "bench.vllm.engine", path],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr, text=True, cwd=ROOT,
            start_new_session=True, env=os.environ | {"KVPROBE_PACE_DIR": workdir},
        )  # fmt: skip
    return _Engine(proc, err)


def _read(proc: subprocess.Popen[str], said: list[str]) -> None:
    assert proc.stdout is not None
    for line in proc.stdout:
        said.append(line)


def _wait_until(check: Any, timeout_s: float) -> bool:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if check():
            return True
        time.sleep(0.05)
    return bool(check())


def run_mode(setup: Setup, seed: int, mode: str, server: Any, proxy: Any, stored: Sequence[int]) -> dict[str, Any]:
    """Start ``setup.engines`` engines in ``mode``, serve one seed's arrivals behind the cap; the raw outcome.

    Raises:
        RuntimeError: an engine did not get ready within two minutes (every engine is killed).
    """
    creds = server.credentials()
    base = {"mode": mode, "bucket": BUCKET, "endpoint_url": proxy.endpoint_url, "deadline_s": setup.deadline_s}
    base |= {"step_s": setup.step_s, "access_key": creds["access_key"], "secret_key": creds["secret_key"]}
    plans = engine_plans(setup, seed, stored)
    proxy.configure(head_rate=UNCAPPED)  # the tiers' connection checks at start are not measured
    with tempfile.TemporaryDirectory(prefix="kvprobe-bench-vllm-") as workdir:
        engines = [_spawn({**base, "engine": i, "requests": plan}, workdir) for i, plan in enumerate(plans)]
        lines: list[list[str]] = [[] for _ in engines]
        pairs = list(zip(engines, lines, strict=True))
        readers = [threading.Thread(target=_read, args=(e.proc, said), daemon=True) for e, said in pairs]
        for reader in readers:
            reader.start()
        try:
            # vLLM's import is slow: two minutes for every engine to say "ready" (or die).
            _wait_until(lambda: all(said or e.proc.poll() is not None for e, said in pairs), 120.0)
            if any(said[:1] != ["ready\n"] for said in lines):
                tails = [Path(e.stderr_path).read_text().splitlines()[-3:] for e in engines]
                raise RuntimeError(f"seed {seed}, {mode}: not every engine got ready: {tails}")
            proxy.configure(**setup.cap())  # counts from here
            for engine in engines:
                assert engine.proc.stdin is not None
                engine.proc.stdin.write("go\n")
                engine.proc.stdin.flush()
            limit = setup.duration_s + setup.deadline_s + setup.engine_timeout_s
            _wait_until(lambda: all(e.proc.poll() is not None for e in engines), limit)
        finally:
            killed = [e.proc.pid for e in engines if e.proc.poll() is None]
            for engine in engines:
                if engine.proc.poll() is None:
                    engine.proc.kill()  # by its pid
                engine.proc.wait(30)
        for reader in readers:
            reader.join(10)
        proxy_stats = proxy.stats()
        runs = []
        for engine, said in pairs:
            stderr = Path(engine.stderr_path).read_text().splitlines()
            result = json.loads(said[-1]) if len(said) > 1 and said[-1].startswith("{") else None
            runs.append(
                {"exit": engine.proc.returncode, "killed": engine.proc.pid in killed, "result": result}
                | {"stderr_lines": len(stderr), "stderr_tail": stderr[-3:]}
            )
    return {"seed": seed, "mode": mode, "proxy": proxy_stats, "engines": runs, "requests": sum(map(len, plans))}


def figures(raw: dict[str, Any]) -> dict[str, Any]:
    """One run's figures from :func:`run_mode`'s raw outcome."""
    outcomes = [o for e in raw["engines"] if e["result"] for o in e["result"]["outcomes"]]
    ideal = sum(min(o["stored"] + 1, CHAIN) for o in outcomes)
    heads = raw["proxy"]["heads"]
    n = max(1, len(outcomes))
    return {
        "seed": raw["seed"],
        "mode": raw["mode"],
        "requests": raw["requests"],
        "settled": len(outcomes),
        "found": sum(o["decided"] and o["leading_hits"] == o["stored"] for o in outcomes) / n,
        "head_ratio": heads / max(1, ideal),
        "heads": heads,
        "ideal": ideal,
        "throttled": raw["proxy"]["done"].get("rate_limited", 0) / max(1, heads),
        "undecided": sum(not o["decided"] for o in outcomes) + raw["requests"] - len(outcomes),
        "wrong": sum(o["leading_hits"] > o["stored"] for o in outcomes),
        "exits": [e["exit"] for e in raw["engines"]],
    }


def pressure(raw: dict[str, Any], duration_s: float, head_rate: float) -> dict[str, Any]:
    """What bounded one run (:func:`run_mode`'s raw outcome): the store, the pace, the walk or the CPU.

    ``demand``: the ideal HEADs per second of the requests that settled, over
    the arrivals' ``duration_s``, as a share of ``head_rate`` (above 1: no
    client can find every stored prefix in a sustained run); ``sent``: the
    proxy's HEADs per second over the engines' longest run; ``pace``: the
    engines' final pace rate and its ``w_max`` (medians; None unpaced or not
    a kvprobe way); ``overruns``: steps whose own work took longer than the
    step (the CPU); ``scans``: the median scans of a decided request (the
    walk's rounds); ``stuck_at``: how many undecided requests ended with
    each count of leading hits.
    """
    results = [e["result"] for e in raw["engines"] if e["result"]]
    outcomes = [o for r in results for o in r["outcomes"]]
    ideal = sum(min(o["stored"] + 1, CHAIN) for o in outcomes)
    longest = max((r.get("elapsed_s", 0.0) for r in results), default=0.0)
    paces = [r["pacing"] for r in results if r.get("pacing") and r["pacing"].get("rate") is not None]
    decided = [o["scans"] for o in outcomes if o["decided"] and "scans" in o]
    stuck: dict[int, int] = {}
    for o in outcomes:
        if not o["decided"]:
            stuck[o["leading_hits"]] = stuck.get(o["leading_hits"], 0) + 1
    return {
        "demand": ideal / duration_s / head_rate,
        "sent": raw["proxy"]["heads"] / longest if longest else None,
        "pace": statistics.median(p["rate"] for p in paces) if paces else None,
        "pace_w_max": statistics.median(p["w_max"] for p in paces if p.get("w_max")) if paces else None,
        "overruns": sum(r.get("step_overruns", 0) for r in results),
        "scans": statistics.median(decided) if decided else None,
        "stuck_at": dict(sorted(stuck.items())),
    }


_LABELS = {"vllm": "vLLM's obj tier", "switch": "with the one-line switch", "kvprobe": "kvprobe's ObjTier"}


def table(rows: Sequence[dict[str, Any]]) -> str:
    """The side-by-side table: one line per mode (the median over seeds; exits and counts summed).

    With more than one run per mode the header's first cell says the figures are medians.
    """
    runs = max((sum(r["mode"] == mode for r in rows) for mode in MODES), default=0)
    first = f"median of {runs} runs" if runs > 1 else ""
    out = [
        f"| {first} | found | HEADs / ideal | throttled | undecided | wrong | exit codes |",
        "|---|---|---|---|---|---|---|",
    ]
    for mode in MODES:
        mine = [r for r in rows if r["mode"] == mode]
        if not mine:
            continue
        found = statistics.median(r["found"] for r in mine)
        ratio = statistics.median(r["head_ratio"] for r in mine)
        throttled = statistics.median(r["throttled"] for r in mine)
        undecided = f"{sum(r['undecided'] for r in mine)} of {sum(r['requests'] for r in mine)}"
        exits = sorted({code for r in mine for code in r["exits"]}, key=str)
        out.append(
            f"| {_LABELS[mode]} | {found:.0%} | {ratio:.2f}x | {throttled:.0%} | {undecided} | "
            f"{sum(r['wrong'] for r in mine)} | {', '.join(map(str, exits))} |"
        )
    return "\n".join(out)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engines", type=int, default=6, help="engine processes per mode (1-16)")
    parser.add_argument("--rate", type=float, default=1.0, help="requests per second per engine")
    parser.add_argument("--duration", type=float, default=10.0, help="seconds of arrivals")
    parser.add_argument("--deadline", type=float, default=5.0, help="seconds per request")
    parser.add_argument("--head-rate", type=float, default=400.0, help="the store's HEAD cap (HEAD/s)")
    parser.add_argument("--pool", type=int, default=160, help="prompts stored")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1])
    parser.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES))
    parser.add_argument("--json", type=Path, default=RESULTS_DIR / "vllm_compare.json")
    args = parser.parse_args(argv)
    try:
        setup = Setup(
            args.engines, args.rate, args.duration, args.deadline, head_rate=args.head_rate, pool=args.pool,
        )  # fmt: skip
    except ValueError as exc:
        parser.error(str(exc))
    from kvprobe.backends.obj_parts import nixl_unavailable
    from kvprobe.testing.faultproxy import FaultProxy
    from kvprobe.testing.rgw import RgwServer, rgw_missing

    why = rgw_missing() or nixl_unavailable()
    if why is not None:
        print(f"bench.vllm.compare cannot run here: {why}", file=sys.stderr)
        return 2
    started = datetime.datetime.now(datetime.timezone.utc)
    clock = time.monotonic()
    stored = stored_prefixes(setup.pool)
    raws, rows = [], []
    with RgwServer() as server:
        server.create_bucket(BUCKET)
        print(f"{fill_store(server, BUCKET, stored):,} blocks stored", file=sys.stderr, flush=True)
        with FaultProxy(server.endpoint_url, **setup.cap()) as proxy:
            for seed in args.seeds:
                for mode in dict.fromkeys(args.modes):
                    began = time.monotonic()
                    raws.append(run_mode(setup, seed, mode, server, proxy, stored))
                    rows.append(figures(raws[-1]) | {"pressure": pressure(raws[-1], setup.duration_s, setup.head_rate)})
                    print(f"seed {seed}, {mode}: {time.monotonic() - began:.0f} s", file=sys.stderr, flush=True)
    cmd = " ".join(["python -m bench.vllm.compare", *(argv if argv is not None else sys.argv[1:])])
    data = {"date": f"{started:%Y-%m-%d %H:%M} UTC", "machine": machine(), "command": cmd, "setup": setup.__dict__}
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({**data, "figures": rows, "raw": raws}) + "\n")
    print(
        f"{setup.engines} engines x {setup.rate:g} requests/s for {setup.duration_s:g} s, {CHAIN}-block prompts, "
        f"deadline {setup.deadline_s:g} s, RGW capped at {setup.head_rate:g} HEAD/s, seeds {args.seeds}; "
        f"{time.monotonic() - clock:.0f} s; raw outcomes in {args.json}\n"
    )
    print(table(rows))
    for row in rows:
        print(f"seed {row['seed']}, {row['mode']}: {row['pressure']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
