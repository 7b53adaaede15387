"""``python -m bench.objstore.random_loss``: does a store's random 503s cost an engine verdicts? (issue 39's target).

One manager on ``NixlObjBackend`` (its defaults, ``lookup_timeout_s=5``)
over Ceph RGW (:class:`kvprobe.testing.rgw.RgwServer`) behind
:class:`kvprobe.testing.faultproxy.FaultProxy`, which answers a random share
of requests ``503 SlowDown`` whatever the rate (loss that is not load).
Each run looks up 1,000 stored and 1,000 absent keys in 8 requests of 250
(stored and absent mixed), all flushed at once.  Runs come in two kinds:
each with a fresh host pace (its own ``KVPROBE_PACE_DIR``), or all sharing
one pace file, as the engines of one host do; ``--pace paired`` follows
each fresh run with one unpaced (the pace's decreases disabled) on the same
proxy seed, so that a busy machine's load meets both alike.  Per setting
the table gives the % of stored keys answered True (min and median over
the runs), the absent keys answered True (must be 0) and the keys left
unanswered at the manager's timeout (must be 0).  The target: >= 99 % True
in every run.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from bench.common import load_average, machine

__all__ = ["Run", "main", "one_run", "store_under_loss"]

BUCKET = "kvprobe-random-loss"
REQUESTS, PER_REQUEST = 8, 250

#: One run's counts: stored keys answered True, absent keys answered True, keys unanswered, and the pace after it.
Run = dict[str, Any]


def _keys(n: int, tag: str) -> list[bytes]:
    return [f"{tag}-{i:06d}".encode() for i in range(n)]


STORED, ABSENT = _keys(REQUESTS * PER_REQUEST // 2, "stored"), _keys(REQUESTS * PER_REQUEST // 2, "absent")


@contextmanager
def store_under_loss() -> Iterator[tuple[Any, dict[str, Any]]]:
    """RGW holding ``STORED``, behind a fault proxy: yields (proxy, the credentials of the proxied endpoint)."""
    from kvprobe.backends.nixl_obj import NixlObjBackend
    from kvprobe.testing.faultproxy import FaultProxy
    from kvprobe.testing.rgw import RgwServer

    with RgwServer() as server, FaultProxy(server.endpoint_url) as proxy:
        server.create_bucket(BUCKET)
        creds: dict[str, Any] = dict(server.credentials())
        writer = NixlObjBackend(BUCKET, **creds)
        try:
            for key in STORED:
                writer.store(key)
        finally:
            writer.close()
        creds["endpoint_url"] = proxy.endpoint_url
        yield proxy, creds


def one_run(creds: dict[str, Any], seed: int) -> Run:
    """One manager's lookup of every key in ``REQUESTS`` requests; returns its counts.

    The pace is the host's (the backend's default), kept in ``$KVPROBE_PACE_DIR``.
    """
    from kvprobe.backends.nixl_obj import NixlObjBackend, ObjStoreUnavailableError
    from kvprobe.statemachine import AsyncLookupManager, ReqContext

    keys = [k for pair in zip(STORED, ABSENT, strict=True) for k in pair]
    stored = set(STORED)
    began = time.monotonic()
    try:
        backend = NixlObjBackend(BUCKET, seed=seed, **creds)
    except ObjStoreUnavailableError:
        # A start-up check that met a random 503 refuses the store: every key of the run goes unanswered.
        return {"stored_true": 0, "absent_true": 0, "unanswered": len(keys), "refused_start": 1, "shed": 0}
    try:
        with AsyncLookupManager(backend, lookup_timeout_s=5.0) as m:
            requests = [
                (ReqContext(f"r{seed}-{i}"), keys[i * PER_REQUEST : (i + 1) * PER_REQUEST]) for i in range(REQUESTS)
            ]
            answers = {ctx.req_id: [m.lookup(k, ctx) for k in ks] for ctx, ks in requests}
            m.flush()
            until = time.monotonic() + 30.0  # past the manager's timeout: every key must have a verdict by then
            while time.monotonic() < until and any(None in a for a in answers.values()):
                time.sleep(0.02)
                answers = {ctx.req_id: [m.lookup(k, ctx) for k in ks] for ctx, ks in requests}
            for ctx, _ in requests:
                m.cleanup(ctx.req_id)
            timeouts = m.stats.timeouts
        pacing, stats, trace = backend.pacing, backend.stats, backend.pace_trace
    finally:
        backend.close()
    flat = [(k, v) for (_, ks), vs in zip(requests, answers.values(), strict=True) for k, v in zip(ks, vs, strict=True)]
    return {
        "stored_true": sum(1 for k, v in flat if k in stored and v is True),
        "absent_true": sum(1 for k, v in flat if k not in stored and v is True),
        "unanswered": sum(1 for _, v in flat if v is None),
        "refused_start": 0,
        "manager_timeouts": timeouts,
        "rate": pacing.get("rate"),
        "decreases": pacing.get("decreases"),
        "shed": stats.get("shed"),
        "miss_failing": stats.get("miss_failing"),
        # Why keys were lost, when some are: how hard the retries worked, and what the pace made of the 503s.
        "queries": stats.get("queries"),
        "failed_queries": stats.get("failed_queries"),
        "retried_keys": stats.get("retried_keys"),
        "miss_in_flight": stats.get("miss_in_flight"),
        "miss_not_started": stats.get("miss_not_started"),
        "undone": pacing.get("undone"),
        "served": pacing.get("served"),
        "host_fallbacks": pacing.get("host_fallbacks"),
        "lowest_rate": min((float(e["rate_after"] or 0.0) for e in trace if _since(e, began)), default=None),
    }


def _since(event: dict[str, Any], began: float) -> bool:
    """A pace decision of this run that left a rate (the host pace's trace outlives a run)."""
    at = event.get("at")
    return isinstance(at, float) and at >= began and isinstance(event.get("rate_after"), float)


@contextmanager
def never_paced() -> Iterator[None]:
    """The pace never decreases while inside, so it never paces: the runs to compare a paced run with."""
    from kvprobe.backends.obj_parts import PaceCore

    decrease = PaceCore._decrease
    PaceCore._decrease = lambda self, *args, **kwargs: None  # type: ignore[method-assign]
    try:
        yield
    finally:
        PaceCore._decrease = decrease  # type: ignore[method-assign]


def campaign(
    loss: float, runs: int, shared: bool, proxy: Any, creds: dict[str, Any], *, paired: bool = False
) -> dict[str, list[Run]]:
    """``runs`` runs at ``loss`` random 503s, each with a fresh host pace or (``shared``) all with one.

    ``paired``: each fresh run is followed by one unpaced (:func:`never_paced`)
    on the same proxy seed, so that both meet the machine's load alike.
    Returns the runs under the host pace's setting as the table names it.
    """
    import os

    out: list[Run] = []
    unpaced: list[Run] = []
    # Removed at the end, whatever is in them: a closing backend's pace may still write its file.
    parent = tempfile.mkdtemp(prefix="kvprobe-random-loss-")
    try:
        for i in range(runs):
            seed = 1000 * int(loss * 100) + i
            proxy.configure(throttle=loss, seed=seed)
            os.environ["KVPROBE_PACE_DIR"] = parent if shared else tempfile.mkdtemp(dir=parent)
            out.append(one_run(creds, seed=i))
            if paired:
                proxy.configure(throttle=loss, seed=seed)
                os.environ["KVPROBE_PACE_DIR"] = tempfile.mkdtemp(dir=parent)
                with never_paced():
                    unpaced.append(one_run(creds, seed=i))
    finally:
        shutil.rmtree(parent, ignore_errors=True)
    return {"one shared" if shared else "fresh each run": out} | ({"none (unpaced)": unpaced} if paired else {})


def row(loss: float, pace: str, runs: list[Run]) -> str:
    """One table row: the share of stored keys answered True (min, median), absent True, unanswered."""
    true = [100.0 * r["stored_true"] / len(STORED) for r in runs]
    return (
        f"| {loss:.0%} | {pace} | {len(runs)} | {min(true):.1f} | "
        f"{statistics.median(true):.1f} | {sum(r['absent_true'] for r in runs)} | "
        f"{sum(r['unanswered'] for r in runs)} | {sum(r['shed'] or 0 for r in runs)} | "
        f"{sum(r.get('manager_timeouts', 0) for r in runs)} | {sum(r['refused_start'] for r in runs)} |"
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.objstore.random_loss", description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20, help="runs per setting (default 20)")
    parser.add_argument("--loss", type=float, nargs="+", default=[0.05, 0.20], help="shares of requests answered 503")
    parser.add_argument(
        "--pace",
        choices=("fresh", "shared", "both", "paired"),
        default="both",
        help="host pace per run, one shared, both, or paired: each fresh run then one unpaced on the same seed",
    )
    parser.add_argument("--verbose", action="store_true", help="print each run's counts")
    args = parser.parse_args(argv)
    if args.runs < 1 or not all(0.0 <= x < 1.0 for x in args.loss):
        parser.error("--runs must be >= 1 and each --loss in [0, 1)")
    where, started = machine(), time.monotonic()
    print(f"{where['cpu']}, {where['cores']} cores, Python {where['python']}, load before {load_average()}")
    print(
        "| 503s | host pace | runs | min % stored True | median % | absent True | unanswered | shed "
        "| groups timed out by the manager | start-ups refused |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    with store_under_loss() as (proxy, creds):
        for loss in args.loss:
            settings: dict[str, list[Run]] = {}
            for shared in {"shared": (True,), "both": (False, True)}.get(args.pace, (False,)):
                settings |= campaign(loss, args.runs, shared, proxy, creds, paired=args.pace == "paired")
            for pace, runs in settings.items():
                if args.verbose:
                    for r in runs:
                        print(r, file=sys.stderr)
                print(row(loss, pace, runs), flush=True)
    print(f"load after {load_average()}, {time.monotonic() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
