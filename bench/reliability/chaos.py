"""Chaos: a randomized fault campaign against the manager and its drivers.

Run from the repository root::

    python -m bench.reliability.chaos                 # 5 minutes (the default)
    python -m bench.reliability.chaos --seconds 60    # shorter
    python -m bench.reliability.chaos --seed 7

A scheduler-shaped loop drives two long-lived managers at once over one
file tier whose contents never change (so every verdict can be checked):

* ``threaded``: the default threaded worker, ``lookup_timeout_s=0.3``, over
  an ``FsBackend`` behind a fault injector that makes calls raise, answer
  short, or hang past the timeout;
* ``process``: the threaded worker over a :class:`ProcessBackend` with its
  default ``call_timeout_s`` and ``max_procs``, whose helper processes the
  campaign freezes (SIGSTOP) and kills (SIGKILL).

Each step, with small probabilities, it also: kills a manager's dispatcher
thread (a ``SystemExit`` in its machinery: the death marker path); forks a
child that must get right verdicts from both managers and exit cleanly
(the child's worker and ProcessBackend must start afresh); builds a
throw-away manager, uses it, and drops it without ``shutdown`` (the
finalizer must end its threads); and forces misses (``mark_miss``).

With Ceph RGW and NIXL on the machine (``--s3 auto``, the default) a third
manager, ``objstore``, serves the same requests from a
:class:`NixlObjBackend` on a single-node RGW cluster on loopback
(``lookup_timeout_s=1``, the backend's ``deadline_s=0.8`` below it); the
campaign freezes the gateway (SIGSTOP) at random for 0.5-3 s with a
2,000-key request in flight, thaws it, and times how long until a stored
key answers True again (:mod:`bench.reliability.chaos_s3`).  Without them the S3 part
is skipped with a one-line reason; ``--s3 on`` or ``KVPROBE_REQUIRE_RGW=1``
makes that a failure.

Checked and reported; the run exits non-zero unless all hold:

* wrong verdicts: 0 (True for a block that is not stored, or True after
  ``mark_miss`` while the request still holds the key);
* waiting requests without a verdict: 0 (no request waits longer than
  ``--verdict-bound-s``; at the end every admitted request has finished);
* ``len(m) == 0`` for both managers at the end (after every request was
  cleaned up and outstanding calls answered);
* fork children: every one exited 0;
* S3 (when run): at least one freeze, and after every thaw a stored key
  answered True within ``2 * lookup_timeout_s + 2 s``;
* threads, fds and RSS flat after warm-up: the highest value sampled after
  the first quarter (at least 5 s) exceeds the highest value of that
  warm-up by at most a slack (threads 8, fds 16, RSS 8 MiB).  The object
  store's connections (and their eventfds) are not in the fds: its SDK
  opens one whenever HEADs overlap more than before, at any time, so they
  are held to the backend's ``max_connections`` instead.  Samples go into arrays
  allocated before the run; counters are plain ints; the set of active
  requests is bounded by the concurrency.  The bookkeeping cannot grow.
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import os
import random
import signal
import sys
import tempfile
import threading
import time
from array import array
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from bench.common import Row
from bench.reliability.chaos_report import (
    SLACK_FDS,
    SLACK_RSS_MIB,
    SLACK_THREADS,
    Tally,
    evaluate,
    flat,
    print_report,
)
from bench.reliability.chaos_s3 import (
    LOOKUP_TIMEOUT_S,
    ObjOutage,
    ObjTier,
    objstore_unavailable,
    recovery_keys,
)
from kvprobe.backends import FsBackend
from kvprobe.backends.process import ProcessBackend
from kvprobe.statemachine import AsyncLookupManager, ReqContext, ThreadedWorker
from kvprobe.testing.fds import fd_census
from kvprobe.testing.rgw import REQUIRE_ENV, rgw_required

__all__ = ["Faulty", "main", "rows", "run"]

MIB = 1024 * 1024


def _key(n: int) -> bytes:
    return hashlib.sha256(b"chaos-%d" % n).digest()[:16]


#: The keys requests ask for; every other one is stored (on every tier).
POOL = [_key(n) for n in range(400)]


def stored_keys() -> list[bytes]:
    """The pool's stored half (what an object tier for :func:`run` must hold)."""
    return POOL[::2]


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


class Faulty:
    """Wraps a backend: a share of calls raise, answer short, or hang past the timeout."""

    def __init__(self, inner: Any, rng_seed: int, *, hang_s: float) -> None:
        self.inner = inner
        self.hang_s = hang_s
        self._rng = random.Random(rng_seed)
        self._lock = threading.Lock()
        self.raised = self.short = self.hung = 0

    def batch_lookup(self, keys: Sequence[bytes], req_context: object) -> Iterable[bool]:
        with self._lock:
            draw = self._rng.random()
        if draw < 0.03:
            with self._lock:
                self.raised += 1
            raise OSError(5, "injected I/O error")
        if draw < 0.05:
            with self._lock:
                self.hung += 1
            time.sleep(self.hang_s)
        verdicts = list(self.inner.batch_lookup(keys, req_context))
        if 0.05 <= draw < 0.07 and verdicts:
            with self._lock:
                self.short += 1
            return verdicts[:-1]
        return verdicts


@dataclass
class Request:
    ctx: ReqContext
    keys: list[bytes]
    started: float
    verdicts: dict[bytes, bool] = field(default_factory=dict)
    forced: set[bytes] = field(default_factory=set)


class Driven:
    """One long-lived manager and the requests it serves."""

    def __init__(self, name: str, m: AsyncLookupManager, stored: frozenset[bytes], pool: Sequence[bytes]) -> None:
        self.name = name
        self.m = m
        self.stored = stored
        self.pool = pool
        self.active: dict[str, Request] = {}
        self.next_id = 0

    def admit(self, rng: random.Random, concurrency: int, now: float) -> None:
        while len(self.active) < concurrency:
            self.next_id += 1
            req_id = f"{self.name}-{self.next_id}"
            start = rng.randrange(len(self.pool) - 16)
            keys = list(self.pool[start : start + rng.randint(2, 12)])
            self.active[req_id] = Request(ReqContext(req_id), keys, now)

    def admit_keys(self, req_id: str, keys: list[bytes]) -> None:
        """Admit one request for ``keys`` now (the S3 outage's 2,000-key group)."""
        self.active[req_id] = Request(ReqContext(req_id), keys, time.monotonic())

    def step(self, rng: random.Random, tally: Tally, bound_s: float, now: float) -> None:
        finished = []
        for req_id, req in self.active.items():
            for key in req.keys:
                if key in req.verdicts:
                    continue
                verdict = self.m.lookup(key, req.ctx)
                tally.lookups += 1
                if verdict is None:
                    continue
                if verdict and (key not in self.stored or key in req.forced):
                    tally.wrong_verdicts += 1
                    if len(tally.problems) < 20:
                        tally.problems.append(f"{self.name}: True for {key.hex()} (stored={key in self.stored})")
                req.verdicts[key] = verdict
            waited = now - req.started
            if len(req.verdicts) == len(req.keys):
                tally.longest_wait_s = max(tally.longest_wait_s, waited)
                if rng.random() < 0.05:
                    # Loading one block "failed": force a miss while the request still holds it.
                    key = rng.choice(req.keys)
                    self.m.mark_miss([key])
                    tally.mark_misses += 1
                    req.forced.add(key)
                    if self.m.lookup(key, req.ctx) is not False:
                        tally.wrong_verdicts += 1
                finished.append(req_id)
            elif waited > bound_s:
                tally.late_requests += 1
                if len(tally.problems) < 20:
                    tally.problems.append(f"{self.name}: {req_id} waited {waited:.1f} s")
                finished.append(req_id)
            elif rng.random() < 0.01:
                finished.append(req_id)  # aborted mid-flight
        for req_id in finished:
            del self.active[req_id]
            self.m.cleanup(req_id)
            tally.requests_finished += 1
        self.m.flush()


def _kill_dispatcher(m: AsyncLookupManager) -> bool:
    worker = m.worker
    if not isinstance(worker, ThreadedWorker):
        return False
    real = worker._start_call

    def dying(*args: Any) -> None:
        del worker._start_call  # back to the class's method
        raise SystemExit("chaos: the dispatcher ends")

    del real
    worker._start_call = dying  # type: ignore[method-assign, assignment]
    return True


def _fork_child(drivens: Sequence[Driven], stored: frozenset[bytes], pool: Sequence[bytes], seed: int) -> int:
    """In the child: a request on each manager must get right verdicts; exit code 0 if so."""
    rng = random.Random(seed)
    for d in drivens:
        # The child inherits the parent's requests; they are its own now.
        for req_id in list(d.active):
            d.m.cleanup(req_id)
        d.active.clear()
        ctx = ReqContext(f"child-{d.name}")
        keys = rng.sample(list(pool), 6)
        got: dict[bytes, bool] = {}
        deadline = time.monotonic() + 30
        while len(got) < len(keys):
            if time.monotonic() > deadline:
                return 3
            for key in keys:
                if key not in got and (v := d.m.lookup(key, ctx)) is not None:
                    if v and key not in stored:
                        return 2
                    got[key] = v
            d.m.flush()
            time.sleep(0.005)
        d.m.cleanup(ctx.req_id)
        d.m.shutdown()
        backend = d.m.backend
        if isinstance(backend, ProcessBackend):
            backend.close()
    return 0


def run(
    seconds: float,
    seed: int,
    bound_s: float,
    concurrency: int,
    drain_bound_s: float = 30.0,
    obj: ObjTier | None = None,
) -> tuple[Tally, dict[str, Any]]:
    """The campaign; ``obj`` (a started RGW tier holding :func:`stored_keys`) adds the S3 fault."""
    rng = random.Random(seed)
    tally = Tally()
    samples = max(16, int(seconds * 2) + 64)
    threads_s, fds_s, rss_s = array("d", [0.0] * samples), array("d", [0.0] * samples), array("d", [0.0] * samples)
    store_port = None if obj is None else obj.server.port
    most_store_connections = 0
    n_samples = 0
    warm_samples = 0  # samples taken until the first S3 recovery (if any) ended
    with tempfile.TemporaryDirectory(prefix="kvprobe-chaos-") as root:
        tier = FsBackend(root)
        pool = POOL
        stored = frozenset(stored_keys())
        for key in stored:
            tier.store(key, b"block")
        faulty = Faulty(FsBackend(root), seed, hang_s=0.6)
        threaded = Driven(
            "threaded", AsyncLookupManager(faulty, name="chaos-thread", lookup_timeout_s=0.3), stored, pool
        )
        process_backend = ProcessBackend(partial(FsBackend, root))
        process = Driven(
            "process", AsyncLookupManager(process_backend, name="chaos-proc", lookup_timeout_s=0.5), stored, pool
        )
        drivens: tuple[Driven, ...] = (threaded, process)
        outage: ObjOutage | None = None
        if obj is not None:
            objstore = Driven(
                "objstore",
                AsyncLookupManager(obj.backend, name="chaos-s3", lookup_timeout_s=LOOKUP_TIMEOUT_S),
                stored,
                pool,
            )
            drivens += (objstore,)
            outage = ObjOutage(
                obj.server,
                objstore.m,
                recovery_keys(8),
                bound_s=2 * LOOKUP_TIMEOUT_S + 2,
                first_freeze_s=min(3.0, seconds / 4),
                admit_big=objstore.admit_keys,
            )
        start = time.monotonic()
        if outage is not None:
            outage.start(start)
        next_sample = start
        end = start + seconds
        while True:
            now = time.monotonic()
            ending = now >= end
            for d in drivens:
                if not ending:
                    d.admit(rng, concurrency, now)
                d.step(rng, tally, bound_s, now)
            tally.steps += 1
            if outage is not None:
                outage.tick(rng, now, ending)
            if not ending:
                draw = rng.random()
                if draw < 0.002:
                    d = rng.choice(drivens)
                    tally.dispatcher_kills += _kill_dispatcher(d.m)
                elif draw < 0.003:
                    tally.forks += 1
                    pid = os.fork()
                    if pid == 0:  # the child
                        code = 99
                        try:
                            code = _fork_child(drivens, stored, pool, rng.randrange(1 << 30))
                        finally:
                            os._exit(code)
                    deadline = time.monotonic() + 60
                    while True:
                        done, status = os.waitpid(pid, os.WNOHANG)
                        if done:
                            break
                        if time.monotonic() > deadline:
                            os.kill(pid, signal.SIGKILL)
                            os.waitpid(pid, 0)
                            status = 1 << 8
                            break
                        time.sleep(0.01)
                    code = os.waitstatus_to_exitcode(status)
                    if code != 0:
                        tally.fork_failures += 1
                        if len(tally.problems) < 20:
                            tally.problems.append(f"fork child exited {code}")
                elif draw < 0.006:
                    dropped = AsyncLookupManager(faulty, name="chaos-dropped", lookup_timeout_s=rng.choice([None, 0.3]))
                    dropped.lookup(rng.choice(pool), ReqContext("dropped"))
                    dropped.flush()
                    del dropped
                    tally.dropped_managers += 1
                elif draw < 0.008:
                    pids = process_backend.helper_pids
                    if pids:
                        pid = rng.choice(pids)
                        try:
                            if rng.random() < 0.5:
                                os.kill(pid, signal.SIGSTOP)
                                tally.helpers_frozen += 1
                            else:
                                os.kill(pid, signal.SIGKILL)
                                tally.helpers_killed += 1
                        except ProcessLookupError:
                            pass
            if now >= next_sample and n_samples < samples:
                gc.collect()
                threads_s[n_samples] = threading.active_count()
                census = fd_census(store_port)
                fds_s[n_samples] = census.besides_store
                most_store_connections = max(most_store_connections, census.store)
                rss_s[n_samples] = rss_bytes() / MIB
                n_samples += 1
                if warm_samples == 0 and (outage is None or outage.tally.recoveries):
                    warm_samples = n_samples
                next_sample = now + 1.0
            if ending and not any(d.active for d in drivens) and not (outage is not None and outage.busy):
                break
            if ending and now > end + bound_s * 2:
                tally.problems.append("requests still active long after the end")
                break
            time.sleep(0.002)
        # Let orphans in flight come back, then everything must be gone.
        leftovers = {}
        calls: dict[str, dict[str, int]] = {}
        for d in drivens:
            deadline = time.monotonic() + drain_bound_s
            while len(d.m) and time.monotonic() < deadline:
                d.m.drain_results()
                time.sleep(0.01)
            leftovers[d.name] = len(d.m)
            calls[d.name] = {k: getattr(d.m.stats, k) for k in CALL_STATS}
            d.m.shutdown()
        process_backend.close()
    if outage is not None:
        tally.problems.extend(outage.problems)
    figures = {
        "leftovers": leftovers,
        "threads": flat(threads_s, n_samples, SLACK_THREADS, warm_samples),
        "fds": flat(fds_s, n_samples, SLACK_FDS, warm_samples),
        # (most sampled, the backend's bound), or None without the S3 part
        "store_connections": None if obj is None else (most_store_connections, obj.backend.max_connections),
        "rss_mib": flat(rss_s, n_samples, SLACK_RSS_MIB, warm_samples),
        "samples": n_samples,
        "injected": {"raised": faulty.raised, "short": faulty.short, "hung": faulty.hung},
        "s3": None if outage is None else outage.tally,
        "calls": calls,
        # What the object backend and its pace did: the first place to look
        # when a recovery is late (keys shed, rate decreases).
        "s3_backend": None
        if obj is None
        else {**obj.backend.stats, **{f"pace_{k}": v for k, v in obj.backend.pacing.items()}},
    }
    return tally, figures


#: The manager's counters of its backend calls, printed for the object tier.
CALL_STATS = ("backend_calls", "backend_errors", "timeouts", "saturated", "late_results", "worker_deaths")


def rows(quick: bool) -> list[Row]:
    """The suite's rows (``bench.run_all``): a 20 s campaign when quick, else 300 s; S3 part when RGW is here.

    Raises:
        RuntimeError: ``KVPROBE_REQUIRE_RGW=1`` and the S3 part cannot run.
    """
    seconds = 20.0 if quick else 300.0
    why = objstore_unavailable()
    if why is not None and rgw_required():
        raise RuntimeError(f"{REQUIRE_ENV}=1 but the S3 freeze/thaw fault cannot run: {why}")
    obj = ObjTier(stored_keys() + recovery_keys(8)) if why is None else None
    try:
        tally, fig = run(seconds, 1, 30.0, 24, 30.0, obj)
    finally:
        if obj is not None:
            obj.close()
    checks = evaluate(tally, fig)
    failed = [name for name, ok in checks.items() if not ok]
    s3 = fig["s3"]
    detail = f"{seconds:.0f} s, seed 1"
    out = [
        Row("chaos", "checks", "PASS" if not failed else "FAIL: " + "; ".join(failed), detail),
        Row("chaos", "wrong verdicts / requests over the bound", f"{tally.wrong_verdicts} / {tally.late_requests}"),
        Row("chaos", "len(m) at the end", str(fig["leftovers"])),
        Row("chaos", "longest wait for a request's verdicts", f"{tally.longest_wait_s:.2f} s"),
    ]
    if s3 is not None:
        out.append(
            Row(
                "chaos",
                "S3 freezes / longest recovery after a thaw",
                f"{s3.freezes} / {s3.longest_recovery_s:.2f} s",
                f"bound {2 * LOOKUP_TIMEOUT_S + 2:.0f} s, Ceph RGW",
            )
        )
    else:
        out.append(Row("chaos", "S3 freeze/thaw", "not run", str(why)))
    return out


def main(argv: Sequence[str] | None = None, obj_tier: ObjTier | None = None) -> int:
    """Run the campaign with the command line ``argv``; 0 if every check passed, else 1.

    ``obj_tier``: an object tier to use (and leave open) for the S3 fault
    instead of starting one (tests share one RGW cluster between runs).
    """
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=300.0, help="campaign length (default 300)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--verdict-bound-s", type=float, default=30.0)
    parser.add_argument("--concurrency", type=int, default=24, help="active requests per manager")
    parser.add_argument(
        "--drain-bound-s", type=float, default=30.0, help="how long the end waits for in-flight calls to come back"
    )
    parser.add_argument(
        "--s3",
        choices=("auto", "on", "off"),
        default="auto",
        help="the RGW freeze/thaw fault: auto runs it when Ceph RGW and NIXL are here (on: or fail; "
        f"{REQUIRE_ENV}=1 turns auto into on)",
    )
    args = parser.parse_args(argv)
    s3_skipped = None
    obj: ObjTier | None = None
    if args.s3 != "off" and obj_tier is not None:
        obj = obj_tier
    elif args.s3 != "off":
        why = objstore_unavailable()
        if why is None:
            obj = ObjTier(stored_keys() + recovery_keys(8))
        elif args.s3 == "on" or rgw_required():
            print(f"FAIL: the S3 freeze/thaw fault cannot run: {why}")
            return 1
        else:
            s3_skipped = why
    started = time.monotonic()
    try:
        tally, fig = run(args.seconds, args.seed, args.verdict_bound_s, args.concurrency, args.drain_bound_s, obj)
    finally:
        if obj is not None and obj is not obj_tier:
            obj.close()
    wall = time.monotonic() - started
    checks = evaluate(tally, fig)
    header = f"chaos campaign: {args.seconds:.0f} s requested, {wall:.0f} s wall, seed {args.seed}"
    print_report(header, tally, fig, checks, s3_skipped or "--s3 off")
    return 0 if all(checks.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
