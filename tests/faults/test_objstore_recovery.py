"""Recovery after an object-store outage is bounded (issue 12, item 8), measured on Ceph RGW.

The gateway is frozen (SIGSTOP) while a scheduler-like loop admits a new
2,000-key request every second and looks up every waiting key each step;
then it is thawed.  Required: every waiting request gets its verdicts (MISS),
a stored key answers True within ``2 * lookup_timeout_s + 2 s`` of the thaw,
threads and fds stay within the backend's pool and the manager's bounded
caller threads, and ``len(m)`` returns to 0.  The row goes to the fault
matrix of ``docs/reliability.md``.

Without Ceph RGW (or NIXL) the test skips with one line, or fails under
``KVPROBE_REQUIRE_RGW=1``.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from fault_harness import Reliability, counters, finish, nixl_missing

from kvprobe.statemachine import AsyncLookupManager, ReqContext, ThreadedWorker
from kvprobe.testing.fds import open_fds

pytestmark = pytest.mark.skipif(nixl_missing() is not None, reason=str(nixl_missing()))

LOOKUP_TIMEOUT_S = 1.0
DEADLINE_S = 0.8  # the backend's own deadline, below the manager's timeout (docs/backends.md)
GROUP_KEYS = 2000


def test_recovery_after_a_frozen_gateway_is_bounded(rgw: Any, reliability: Reliability) -> None:
    from kvprobe.backends.nixl_obj import NixlObjBackend

    rgw.create_bucket("recovery")
    backend = NixlObjBackend(bucket="recovery", deadline_s=DEADLINE_S, **rgw.credentials())
    stored = b"recovery-stored-block"
    try:
        backend.store(stored)
        threads0, fds0 = threading.active_count(), open_fds()
        peak_threads, peak_fds, peak_callers = threads0, fds0, 0
        with AsyncLookupManager(backend, name="recovery", lookup_timeout_s=LOOKUP_TIMEOUT_S) as m:
            worker = m.worker
            assert isinstance(worker, ThreadedWorker)
            waiting: dict[str, list[bytes]] = {}
            verdicts: dict[str, int] = {}
            rgw.freeze()
            try:
                frozen_at = time.monotonic()
                next_request = frozen_at
                while time.monotonic() - frozen_at < 3.0:
                    if time.monotonic() >= next_request:
                        n = len(waiting)
                        waiting[f"frozen-{n}"] = [b"frozen-%d-%d" % (n, i) for i in range(GROUP_KEYS)]
                        verdicts[f"frozen-{n}"] = 0
                        next_request += 1.0
                    for req_id, group in waiting.items():
                        ctx = ReqContext(req_id)
                        verdicts[req_id] = sum(m.lookup(key, ctx) is not None for key in group)
                    m.flush()
                    peak_threads = max(peak_threads, threading.active_count())
                    peak_fds = max(peak_fds, open_fds())
                    peak_callers = max(peak_callers, worker.caller_threads)
                    time.sleep(0.01)
            finally:
                thawed_at = time.monotonic()  # measured from SIGCONT
                rgw.thaw()
            # Each step: the frozen requests ask again (until all have their
            # verdicts) and a fresh request asks for the stored key (a new
            # request after each MISS: the MISS of a call that met the outage).
            recovered: float | None = None
            asks = 0
            ctx = ReqContext("after-0")
            while time.monotonic() - thawed_at < 2 * LOOKUP_TIMEOUT_S + 30:
                for req_id, group in waiting.items():
                    if verdicts[req_id] < len(group):
                        rctx = ReqContext(req_id)
                        verdicts[req_id] = sum(m.lookup(key, rctx) is not None for key in group)
                verdict = m.lookup(stored, ctx)
                if verdict is True and recovered is None:
                    recovered = time.monotonic() - thawed_at
                if verdict is False:
                    m.cleanup(ctx.req_id)
                    asks += 1
                    ctx = ReqContext(f"after-{asks}")
                if recovered is not None and all(verdicts[r] == len(g) for r, g in waiting.items()):
                    break
                m.flush()
                peak_threads = max(peak_threads, threading.active_count())
                peak_fds = max(peak_fds, open_fds())
                peak_callers = max(peak_callers, worker.caller_threads)
                time.sleep(0.01)
            assert recovered is not None, "no True verdict for a stored key within 32 s of the thaw"
            unanswered = {r: len(g) - verdicts[r] for r, g in waiting.items() if verdicts[r] < len(g)}
            assert not unanswered, f"requests of the outage still without verdicts: {unanswered}"
            leaked = finish(m, [*waiting, ctx.req_id])
            assert leaked == 0
            stats_text = counters(m, "timeouts", "backend_errors")
        bound = 2 * LOOKUP_TIMEOUT_S + 2
        assert recovered <= bound, f"a stored key answered True {recovered:.2f} s after the thaw (bound {bound} s)"
        # Bounded: the backend's pool (its agents and their connections) and
        # the manager's caller threads, whatever the number of groups.
        max_callers = worker.max_concurrent_groups + worker.max_stuck_calls
        assert peak_callers <= max_callers, (peak_callers, max_callers)
        assert peak_threads - threads0 <= backend.agents * (backend.agent_threads + 4) + max_callers + 2
        assert peak_fds - fds0 <= (backend.agents + 1) * 26 + 32
        reliability.record(
            f"S3 gateway frozen 3 s with a {GROUP_KEYS:,}-key request admitted each second "
            f"(lookup_timeout_s={LOOKUP_TIMEOUT_S:g}, deadline_s={DEADLINE_S:g}), then thawed: "
            "a stored key answers True again",
            "NixlObjBackend + Ceph RGW",
            delivered=sum(verdicts.values()),
            asked=sum(len(g) for g in waiting.values()),
            seconds=recovered,
            leaked=leaked,
            counters=f"{stats_text}; True {recovered:.2f} s after the thaw (bound {bound:g} s); "
            f"peak +{peak_threads - threads0} threads (caller threads {peak_callers}), +{peak_fds - fds0} fds",
        )
    finally:
        if rgw.frozen:
            rgw.thaw()
        backend.close()
