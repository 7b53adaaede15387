"""Object-store faults: NixlObjBackend against a real S3 server (Ceph RGW on loopback).

The server (:class:`kvprobe.testing.rgw.RgwServer`) is a single-node Ceph
cluster whose gateway can stop and come back on the same port (the objects
stay in the cluster), crash (SIGKILL), and freeze (SIGSTOP) and thaw.  Wrong
credentials: the gateway user is suspended (``radosgw-admin user suspend``),
so every request is refused with 403 until it is enabled again.

Every test leaves the server answering, unfrozen and with the user enabled.
Without Ceph the tests skip with one line saying how to install it, or fail
under ``KVPROBE_REQUIRE_RGW=1``.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from fault_harness import Reliability, counters, drive, finish, keys, still_serves

from kvprobe.statemachine import AsyncLookupManager, ThreadedWorker


def _nixl_missing() -> str | None:
    from kvprobe.backends._nixl_import import nixl_unavailable

    why = nixl_unavailable()
    return None if why is None else f"NIXL not importable: {why}"


pytestmark = pytest.mark.skipif(_nixl_missing() is not None, reason=str(_nixl_missing()))


@pytest.fixture
def s3(rgw: Any) -> Iterator[Any]:
    """The module's RGW cluster (tests/faults/conftest.py), answering again after the test."""
    yield rgw
    # Leave it usable for the next test, whatever this one did.
    if not rgw.running:
        rgw.start()
    elif rgw.frozen:
        rgw.thaw()
    rgw.suspend_user(False)


_bucket_ids = iter(range(1, 1_000_000))


@pytest.fixture
def bucket(s3: Any) -> str:
    name = f"faults-{next(_bucket_ids)}"
    s3.create_bucket(name)
    return name


# A backend reports a failing store itself within DEADLINE_S; the manager's
# timeout sits above it, as docs/backends.md asks, so the backend's own
# verdict wins instead of racing the timeout (tests that want the timeout,
# the frozen server, set a shorter one).
DEADLINE_S = 3.0
TIMEOUT_S = 5.0


def _backend(s3: Any, bucket: str, **overrides: Any) -> Any:
    from kvprobe.backends.nixl_obj import NixlObjBackend

    return NixlObjBackend(bucket=bucket, **{**s3.credentials(), **overrides})


def test_server_stopped_mid_run_then_started_again(s3: Any, bucket: str, reliability: Reliability) -> None:
    backend = _backend(s3, bucket, deadline_s=DEADLINE_S)
    stored = keys("stored", 8)
    for key in stored:
        backend.store(key)
    try:
        with AsyncLookupManager(backend, lookup_timeout_s=TIMEOUT_S) as m:
            assert drive(m, {"before": stored}).values == [True] * 8
            assert finish(m, ["before"]) == 0

            # The server stops right after the first flush of this run: that
            # batch races the outage; whatever it saw, every request gets a verdict.
            def outage(step: int) -> None:
                if step == 1:
                    s3.stop(keep_data=True)

            mid = drive(m, {"mid-1": stored[:4], "mid-2": stored[4:]}, between_steps=outage)
            assert len(mid.verdicts) == 8
            assert not s3.running
            assert finish(m, ["mid-1", "mid-2"]) == 0
            during = drive(m, {"during-1": stored[:4], "during-2": stored[4:]})
            assert during.values == [False] * 8, "a verdict during the outage was not a MISS"
            stats = m.stats
            assert stats.backend_errors >= 2 and stats.failures.get("raised", 0) >= 2, stats.failures
            assert finish(m, ["during-1", "during-2"]) == 0

            s3.start()  # same port, objects restored; the manager is not recreated
            hits_before = m.stats.hits
            after = drive(m, {"after": stored})
            assert after.values == [True] * 8, "no true verdicts after the server came back"
            leaked = finish(m, ["after"])
            assert leaked == 0
            hits_after_restart = m.stats.hits - hits_before
            still_serves(m, backend.store)
            reliability.record(
                "S3 server stopped mid-run (a run racing the stop, then requests during the outage)",
                "NixlObjBackend + Ceph RGW",
                delivered=len(mid.verdicts) + len(during.verdicts),
                asked=16,
                # The outage requests' time: the racing run's includes stop() itself.
                seconds=during.seconds,
                leaked=leaked,
                counters=counters(m, "backend_errors"),
            )
            reliability.record(
                "S3 server started again (same manager): true verdicts",
                "NixlObjBackend + Ceph RGW",
                delivered=sum(after.values),
                asked=8,
                seconds=after.seconds,
                leaked=leaked,
                counters=f"hits after the restart={hits_after_restart}",
            )
    finally:
        backend.close()


def test_server_killed_with_calls_in_flight(s3: Any, bucket: str, reliability: Reliability) -> None:
    # A crash while HEADs are on the wire: freeze the server so the calls
    # hang, then SIGKILL the gateway (connections reset).  The objects stay
    # in the cluster; the writer stores them again anyway, as a tier whose
    # store lost them would be refilled.
    backend = _backend(s3, bucket)
    stored = keys("stored", 6)
    for key in stored:
        backend.store(key)
    try:
        with AsyncLookupManager(backend, lookup_timeout_s=20.0) as m:
            assert drive(m, {"warm": stored}).values == [True] * 6
            assert finish(m, ["warm"]) == 0
            s3.freeze()

            def crash(step: int) -> None:
                if step == 2:  # the first batch has been on the wire for a step
                    s3.kill()

            crashed = drive(m, {"r1": stored[:3], "r2": stored[3:]}, between_steps=crash)
            assert crashed.values == [False] * 6
            stats = m.stats
            assert stats.backend_errors >= 1 and stats.timeouts == 0, stats.failures
            leaked = finish(m, ["r1", "r2"])
            assert leaked == 0

            s3.start()
            for key in stored:
                backend.store(key)
            after = drive(m, {"after": stored})
            assert after.values == [True] * 6
            assert finish(m, ["after"]) == 0
            reliability.record(
                "S3 server killed (SIGKILL) with calls in flight, restarted and refilled",
                "NixlObjBackend + Ceph RGW",
                delivered=len(crashed.verdicts),
                asked=6,
                seconds=crashed.seconds,
                leaked=leaked,
                counters=counters(m, "backend_errors") + f"; after restart {sum(after.values)}/6 true",
            )
    finally:
        backend.close()


def test_server_frozen_beyond_lookup_timeout(s3: Any, bucket: str, reliability: Reliability) -> None:
    backend = _backend(s3, bucket)
    stored = keys("stored", 2)
    for key in stored:
        backend.store(key)
    max_stuck = 2
    try:
        # 1 s: well above a HEAD on a loaded machine, well below the ~3 s a
        # frozen server costs the SDK per call.
        with AsyncLookupManager(backend, lookup_timeout_s=1.0, max_stuck_calls=max_stuck) as m:
            worker = m.worker
            assert isinstance(worker, ThreadedWorker)
            assert drive(m, {"warm": stored}).values == [True, True]
            assert finish(m, ["warm"]) == 0

            s3.freeze()
            wants = {f"r{i}": keys(f"frozen-{i}", 2) for i in range(6)}
            peak_callers = 0

            def watch(step: int) -> None:
                nonlocal peak_callers
                peak_callers = max(peak_callers, worker.caller_threads)

            frozen = drive(m, wants, between_steps=watch)
            assert frozen.values == [False] * 12
            stats = m.stats
            # The manager fitted the backend's deadline under its timeout:
            # each call gives up (raising: no key answered) before the
            # timeout, so no call is left stuck on the frozen server.
            assert backend.deadline_s < m.lookup_timeout_s
            assert stats.failures.get("raised", 0) >= 1 and stats.timeouts == 0, stats.failures
            assert stats.hits == 2  # only the warm-up's
            assert peak_callers <= max_stuck + worker.max_concurrent_groups
            assert finish(m, list(wants)) == 0

            s3.thaw()
            # Nothing stuck to wait for, nothing late; then true verdicts again.
            deadline = time.monotonic() + 30
            while worker.stuck_calls and time.monotonic() < deadline:
                m.drain_results()
                time.sleep(0.01)
            assert worker.stuck_calls == 0
            m.drain_results()
            after = drive(m, {"after": stored})
            assert after.values == [True, True]
            leaked = finish(m, ["after"])
            assert leaked == 0
            reliability.record(
                "S3 server frozen (SIGSTOP) beyond lookup_timeout_s=1 s, then thawed",
                "NixlObjBackend + Ceph RGW",
                delivered=len(frozen.verdicts),
                asked=12,
                seconds=frozen.seconds,
                leaked=leaked,
                counters=counters(m, "timeouts", "saturated", "late_results") + f"; peak caller threads {peak_callers}",
            )
    finally:
        if s3.frozen:
            s3.thaw()
        backend.close()


def test_bucket_deleted(s3: Any, bucket: str, reliability: Reliability) -> None:
    from kvprobe.backends.nixl_obj import BucketNotFoundError

    backend = _backend(s3, bucket, deadline_s=DEADLINE_S)
    stored = keys("stored", 4)
    for key in stored:
        backend.store(key)
    try:
        with AsyncLookupManager(backend, lookup_timeout_s=TIMEOUT_S) as m:
            assert drive(m, {"before": stored}).values == [True] * 4
            assert finish(m, ["before"]) == 0
            client = s3.client()
            for key in stored:
                client.delete_object(Bucket=bucket, Key=backend.locate(key))
            client.delete_bucket(Bucket=bucket)

            result = drive(m, {"r1": stored, "r2": stored[2:]})
            assert result.values == [False] * 6
            # Through query_memory a missing bucket looks like "every key
            # missing": the verdicts are MISS but no backend error is counted.
            # The backend detects it on demand:
            with pytest.raises(BucketNotFoundError, match="does not exist"):
                backend.check_connection()
            leaked = finish(m, ["r1", "r2"])
            assert leaked == 0

            client.create_bucket(Bucket=bucket)
            still_serves(m, backend.store)
            reliability.record(
                "bucket deleted mid-run, re-created later",
                "NixlObjBackend + Ceph RGW",
                delivered=len(result.verdicts),
                asked=6,
                seconds=result.seconds,
                leaked=leaked,
                counters=counters(m, "backend_errors", "misses")
                + " (invisible to query_memory; check_connection() raises BucketNotFoundError)",
            )
    finally:
        backend.close()


def test_wrong_credentials(s3: Any, bucket: str, reliability: Reliability) -> None:
    from kvprobe.backends.nixl_obj import ObjStoreUnavailableError

    backend = _backend(s3, bucket, deadline_s=DEADLINE_S)  # built while the server checks nothing
    stored = keys("stored", 4)
    for key in stored:
        backend.store(key)
    try:
        with AsyncLookupManager(backend, lookup_timeout_s=TIMEOUT_S) as m:
            assert drive(m, {"before": stored}).values == [True] * 4
            assert finish(m, ["before"]) == 0

            s3.suspend_user(True)  # from now on our credentials are rejected (403)
            # A new backend with them fails at once, with a typed error.
            started = time.monotonic()
            with pytest.raises(ObjStoreUnavailableError, match=r"403|Forbidden|InvalidAccessKeyId"):
                _backend(s3, bucket, access_key="AKIAWRONGWRONGWRONG1")
            assert time.monotonic() - started < 10
            # The running manager: every lookup resolves as MISS, counted.
            result = drive(m, {"r1": stored[:2], "r2": stored[2:]})
            assert result.values == [False] * 4
            stats = m.stats
            assert stats.backend_errors >= 1 and stats.failures.get("raised", 0) == stats.backend_errors
            leaked = finish(m, ["r1", "r2"])
            assert leaked == 0

            s3.suspend_user(False)  # credentials accepted again
            still_serves(m, backend.store)
            reliability.record(
                "wrong credentials (server starts rejecting them: 403)",
                "NixlObjBackend + Ceph RGW",
                delivered=len(result.verdicts),
                asked=4,
                seconds=result.seconds,
                leaked=leaked,
                counters=counters(m, "backend_errors") + "; a new backend raises ObjStoreUnavailableError",
            )
    finally:
        backend.close()
