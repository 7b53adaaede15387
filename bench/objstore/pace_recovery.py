"""``python -m bench.objstore.pace_recovery``: how long the object tier's pace takes back from its floor on RGW.

One ``NixlObjBackend`` (its defaults, host pace, ``lookup_timeout_s=5``)
on Ceph RGW (:class:`kvprobe.testing.rgw.RgwServer`) gets calls of
``KEYS_PER_CALL`` new keys every ``CALL_EVERY_S``, each waited for.  First
unpaced, to measure the HEADs per second it is answered (the target); then
a second backend starts from a host pace file at the floor (0.5 HEAD/s).
A run reports the seconds until the HEADs answered over the last second
reach 90 % of the target, against ``recovery_bound_s`` for queries of 16
HEADs (docs/pace.md).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.common import load_average, machine

__all__ = ["Recovery", "from_the_floor", "main"]

BUCKET = "kvprobe-pace-recovery"
KEYS_PER_CALL = 100
CALL_EVERY_S = 0.1
QUERY_HEADS = 16  # NixlObjBackend's agent_threads: the most HEADs one query holds

#: One run: ``target`` (HEAD/s answered unpaced), ``took`` (s from the floor), ``sent`` (HEAD/s then), ``bound`` (s).
Recovery = dict[str, Any]


def _calls(backend: Any, seconds: float, enough: float = float("inf")) -> tuple[float, float]:
    """Calls on ``backend`` for ``seconds``, or until the HEADs answered over the last second reach ``enough``.

    Returns (seconds run, HEADs answered per second over the last second).
    """
    from kvprobe.statemachine import AsyncLookupManager, ReqContext

    samples: list[tuple[float, int]] = []
    began = time.monotonic()
    with AsyncLookupManager(backend, lookup_timeout_s=5.0) as manager:
        call = 0
        while True:
            now = time.monotonic() - began
            samples.append((now, int(backend.pacing["answered_heads"] or 0)))
            recent = [s for s in samples if s[0] >= now - 1.0]
            rate = float(recent[-1][1] - recent[0][1]) if now >= 1.0 else 0.0
            if now >= seconds or rate >= enough:
                return now, rate
            ctx = ReqContext(f"call-{call}")
            keys = [f"recovery-{os.getpid()}-{call}-{i}".encode() for i in range(KEYS_PER_CALL)]
            call += 1
            answers = [manager.lookup(k, ctx) for k in keys]
            manager.flush()
            while None in answers:
                time.sleep(0.005)
                answers = [manager.lookup(k, ctx) for k in keys]
            manager.cleanup(ctx.req_id)
            time.sleep(max(0.0, CALL_EVERY_S * call - (time.monotonic() - began)))


def _at_the_floor(path: Path) -> None:
    """A host pace file holding a pace at its floor: the file's format, private to kvprobe.backends, written here."""
    from kvprobe.backends._host_pace import _boot_id
    from kvprobe.backends.obj_parts import PaceCore

    pace = PaceCore(time.monotonic(), start_rate=0.5).state()
    path.write_text(json.dumps({"boot": _boot_id(), "used": time.monotonic(), "pace": pace}))


def _backend(creds: dict[str, Any], pace_dir: str) -> Any:
    """A backend whose host pace lives in ``pace_dir`` (``$KVPROBE_PACE_DIR`` is read when the pace is made)."""
    from kvprobe.backends.nixl_obj import NixlObjBackend

    before = os.environ.get("KVPROBE_PACE_DIR")
    os.environ["KVPROBE_PACE_DIR"] = pace_dir
    try:
        return NixlObjBackend(BUCKET, agent_threads=QUERY_HEADS, **creds)
    finally:
        if before is None:
            del os.environ["KVPROBE_PACE_DIR"]
        else:
            os.environ["KVPROBE_PACE_DIR"] = before


def from_the_floor(creds: dict[str, Any]) -> Recovery:
    """One run on the store ``creds`` name (its bucket ``BUCKET`` made): the target, then the way back.

    Raises:
        AssertionError: the store pushed back while unpaced (no target to come back to).
    """
    from kvprobe.backends.obj_parts import HostPacer, PaceCore
    from kvprobe.spec.pace_model import recovery_bound_s

    with tempfile.TemporaryDirectory(prefix="kvprobe-pace-recovery-") as parent:
        unpaced = _backend(creds, tempfile.mkdtemp(dir=parent))
        try:
            _calls(unpaced, 1.0)  # NIXL's agents warm
            _, target = _calls(unpaced, 3.0)
            assert unpaced.pacing["rate"] is None, f"the store pushed back: no unpaced rate ({unpaced.pacing})"
        finally:
            unpaced.close()
        floor = PaceCore(0.0, start_rate=0.5)
        bound = recovery_bound_s(
            target, heads=QUERY_HEADS, floor=floor.floor, c=floor.c, beta=floor.beta, window_max_s=floor.window_max_s
        )
        backend = _backend(creds, tempfile.mkdtemp(dir=parent))
        try:
            assert isinstance(backend.pacer, HostPacer)
            _at_the_floor(backend.pacer.path)
            start_rate = backend.pacing["rate"]
            took, sent = _calls(backend, bound, enough=0.9 * target)
            pacing, trace = backend.pacing, backend.pace_trace
        finally:
            backend.close()
    return {
        "target": target,
        "start_rate": start_rate,
        "took": took,
        "sent": sent,
        "bound": bound,
        "back": sent >= 0.9 * target,
        "pacing": pacing,
        "trace": trace,
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.objstore.pace_recovery", description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="runs, on one RGW (default 3)")
    args = parser.parse_args(argv)
    if args.runs < 1:
        parser.error("--runs must be >= 1")
    from kvprobe.testing.rgw import RgwServer

    where, started = machine(), time.monotonic()
    print(f"{where['cpu']}, {where['cores']} cores, Python {where['python']}, load before {load_average()}")
    print("| run | answered unpaced (HEAD/s) | back at 90 % after | bound | HEAD/s then |")
    print("|---|---|---|---|---|")
    with RgwServer() as server:
        server.create_bucket(BUCKET)
        for i in range(args.runs):
            run = from_the_floor(dict(server.credentials()))
            took = f"{run['took']:.1f} s" if run["back"] else f"not within {run['took']:.1f} s"
            print(f"| {i + 1} | {run['target']:.0f} | {took} | {run['bound']:.1f} s | {run['sent']:.0f} |", flush=True)
    print(f"load after {load_average()}, {time.monotonic() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
