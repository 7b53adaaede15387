"""Throttling, errors, outages and non-S3 endpoints: NixlObjBackend on Ceph RGW through the fault proxy.

The fault proxy (:mod:`kvprobe.testing.faultproxy`) answers a seeded fraction
of requests with ``503 SlowDown`` (or 500, or a reset) before they reach the
gateway.  Targets: with 5 % and 20 % throttled (and 5 % 500s, 20 % resets),
>= 99 % of stored keys answer True through the manager (so within its
``lookup_timeout_s``) and no absent key answers True; with 100 % throttled
every key is MISS within the deadline.
Before the backend retried per chunk, 5 % throttling gave 0 True of 1,000.
"""

from __future__ import annotations

import http.server
import logging
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from integ_harness import make_obj_backend, requires_nixl, resolve

from kvprobe.backends.nixl_obj import BucketNotFoundError, ObjStoreUnavailableError
from kvprobe.statemachine import AsyncLookupManager, ReqContext
from kvprobe.testing.fds import open_fds

pytestmark = requires_nixl

LOOKUP_TIMEOUT_S = 10.0
DEADLINE_S = 8.0


@pytest.fixture
def proxy(s3_server: Any) -> Iterator[Any]:
    from kvprobe.testing.faultproxy import FaultProxy

    with FaultProxy(s3_server.endpoint_url, seed=7) as p:
        yield p


def _through(proxy: Any, server: Any, bucket: str, **kwargs: Any) -> Any:
    from kvprobe.backends.nixl_obj import NixlObjBackend

    creds = {**server.credentials(), "endpoint_url": proxy.endpoint_url}
    return NixlObjBackend(bucket=bucket, **{**creds, "seed": 1, **kwargs})


def _keys(n: int) -> list[bytes]:
    return [b"throttle-%06d" % i for i in range(n)]


# Throttling at 5 % and 20 %; 500s at 5 %, resets at 20 %.  libcurl (inside
# NIXL) sends a request again itself when its reused connection is reset
# before any answer, so at 5 % few resets reach the backend (3 of 29 and 3
# of 39 in runs here; none in one CI run, where `failed_queries > 0` failed).
# At 20 % the resent request is reset again one time in five (45 failed
# queries of 194 resets), so the check that the faults reached the
# backend's retries holds.
@pytest.mark.long
@pytest.mark.parametrize(
    ("kind", "fraction"), [("throttle", 0.05), ("throttle", 0.20), ("error500", 0.05), ("reset", 0.20)]
)
def test_failing_requests_never_become_a_miss_storm(
    s3_server: Any, bucket: str, proxy: Any, fraction: float, kind: str
) -> None:
    keys = _keys(600)
    stored, absent = keys[::2], keys[1::2]
    backend = _through(proxy, s3_server, bucket, deadline_s=DEADLINE_S)
    try:
        for key in stored:
            backend.store(key)
        proxy.configure(**{kind: fraction})
        with AsyncLookupManager(backend, name="throttled", lookup_timeout_s=LOOKUP_TIMEOUT_S) as m:
            verdicts = resolve(m, {f"r{i}": keys[i::4] for i in range(4)}, deadline_s=60)
            truth = {k: v for i in range(4) for k, v in zip(keys[i::4], verdicts[f"r{i}"], strict=True)}
            assert m.stats.timeouts == 0, "a call outlived the manager's lookup_timeout_s"
            for req in verdicts:
                m.cleanup(req)
        done = proxy.stats()["done"]
        assert done.get(kind, 0) > 0, f"the proxy injected no {kind}: {done}"
        true_stored = sum(truth[k] for k in stored)
        assert true_stored >= 0.99 * len(stored), (true_stored, backend.stats, done)
        assert not any(truth[k] for k in absent), "an absent key answered True"
        counters = backend.stats
        assert counters["failed_queries"] > 0 and counters["retried_keys"] > 0, counters
    finally:
        backend.close()


# Quiet: it asks that each of 400 keys had a query fail within 2 s, which
# a starved worker may not reach (CI 51a, beside make test's TLC stages:
# 391 of 400, the others unasked at the deadline).
@pytest.mark.quiet
def test_everything_throttled_is_miss_within_the_deadline(s3_server: Any, bucket: str, proxy: Any) -> None:
    keys = _keys(400)
    deadline = 2.0
    backend = _through(proxy, s3_server, bucket, deadline_s=deadline)
    try:
        for key in keys[::2]:
            backend.store(key)
        proxy.configure(throttle=1.0)
        with AsyncLookupManager(backend, name="all-throttled", lookup_timeout_s=deadline + 1) as m:
            started = time.monotonic()
            verdicts = resolve(m, {"r": keys}, deadline_s=30)
            elapsed = time.monotonic() - started
            assert verdicts["r"] == [False] * len(keys)
            assert elapsed < deadline + 1.5, elapsed
            assert m.stats.timeouts == 0 and m.stats.backend_errors == 1, m.stats
            m.cleanup("r")
        counters = backend.stats
        assert counters["miss_failing"] == len(keys), counters
        proxy.configure(throttle=0.0)
        assert backend.batch_lookup(keys[:4], None) == [True, False, True, False]
    finally:
        backend.close()


_CAUSES = ("throttled", "server_error", "reset", "timed_out")


@pytest.mark.parametrize(
    ("fault", "cause"),
    [({"throttle": 1.0}, "throttled"), ({"error500": 1.0}, "server_error"), ({"reset": 1.0}, "reset")],
)
def test_failures_are_counted_by_cause(
    s3_server: Any, bucket: str, proxy: Any, fault: dict[str, float], cause: str
) -> None:
    """A 503, a 500 and a reset are told apart in ``stats`` (NIXL raises the same error for all three)."""
    keys = _keys(40)
    backend = _through(proxy, s3_server, bucket, deadline_s=1.0)
    try:
        proxy.configure(**fault)
        with pytest.raises(ObjStoreUnavailableError):
            backend.batch_lookup(keys, None)  # nothing answered: the store is refusing everything
        counters = backend.stats
        # A key's first query and first retry are NIXL's (cause unknown:
        # other); its later retries are boto3's, each failure counted by cause.
        chunks = -(-len(keys) // backend.agent_threads)
        assert counters["retried_keys"] >= len(keys), counters
        assert counters[f"failed_{cause}"] > 0, counters
        assert counters["failed_other"] >= chunks, counters
        assert counters["failed_other"] + counters[f"failed_{cause}"] == counters["failed_queries"], counters
        for other in _CAUSES:
            if other != cause:
                assert counters[f"failed_{other}"] == 0, (other, counters)
    finally:
        backend.close()


def test_timeouts_are_counted_by_cause(s3_server: Any, bucket: str, proxy: Any) -> None:
    keys = _keys(4)
    # 4 s added per request: NIXL's queries (the chunk, then each key's first
    # retry) time out after the SDK's 3 s, the boto3 retries after 0.5 s.
    backend = _through(proxy, s3_server, bucket, deadline_s=8.0, connect_timeout_s=0.5)
    try:
        proxy.configure(delay_s=4.0)
        with pytest.raises(ObjStoreUnavailableError):
            backend.batch_lookup(keys, None)
        counters = backend.stats
        assert counters["failed_timed_out"] >= 1 + len(keys) + 1, counters
        assert counters["failed_timed_out"] == counters["failed_queries"], counters  # every failure was a timeout
    finally:
        proxy.configure(delay_s=0.0)
        backend.close()


def test_without_boto3_retries_the_causes_are_unknown_but_counted(s3_server: Any, bucket: str, proxy: Any) -> None:
    backend = _through(proxy, s3_server, bucket, deadline_s=1.0, retry_with_boto3=False)
    try:
        proxy.configure(throttle=1.0)
        with pytest.raises(ObjStoreUnavailableError):
            backend.batch_lookup(_keys(8), None)
        counters = backend.stats
        assert counters["failed_other"] == counters["failed_queries"] > 8, counters
        assert all(counters[f"failed_{c}"] == 0 for c in _CAUSES), counters
    finally:
        backend.close()


def test_recovery_after_a_frozen_server_is_bounded(s3_server: Any, bucket: str) -> None:
    """Issue 12 item 8: 2,000-key groups, server frozen then thawed; True within 2 x timeout + 2 s."""
    lookup_timeout = 1.0
    backend = make_obj_backend(s3_server, bucket, deadline_s=0.8)
    stored = b"recovery-stored"
    try:
        backend.store(stored)
        threads0, fds0 = threading.active_count(), open_fds()
        peak_threads = peak_fds = 0
        with AsyncLookupManager(backend, name="recovery", lookup_timeout_s=lookup_timeout) as m:
            s3_server.freeze()
            try:
                # A new 2,000-key request every second for 3 s (a rate the tier
                # serves when healthy); each step every waiting request looks
                # up its keys again, as a scheduler does.
                waiting: dict[str, list[bytes]] = {}
                step = 0
                end = time.monotonic() + 3.0
                next_request = 0.0
                while time.monotonic() < end:
                    if time.monotonic() >= next_request:
                        waiting[f"frozen-{step}"] = [b"frozen-%d-%d" % (step, i) for i in range(2000)]
                        step += 1
                        next_request = time.monotonic() + 1.0
                    for req, keys in waiting.items():
                        ctx = ReqContext(req)
                        for key in keys:
                            m.lookup(key, ctx)
                    m.flush()
                    peak_threads = max(peak_threads, threading.active_count())
                    peak_fds = max(peak_fds, open_fds())
                    time.sleep(0.01)
            finally:
                s3_server.thaw()
            thawed = time.monotonic()
            recovered = None
            n = 0
            while time.monotonic() - thawed < 30:
                ctx = ReqContext(f"after-{n}")
                verdict = None
                while verdict is None and time.monotonic() - thawed < 30:
                    verdict = m.lookup(stored, ctx)
                    m.flush()
                    time.sleep(0.01)
                m.cleanup(ctx.req_id)
                n += 1
                if verdict:
                    recovered = time.monotonic() - thawed
                    break
            for s in range(step):
                m.cleanup(f"frozen-{s}")
            peak_threads = max(peak_threads, threading.active_count())
            peak_fds = max(peak_fds, open_fds())
        assert recovered is not None and recovered <= 2 * lookup_timeout + 2, recovered
        # Bounded: the backend's pool (agents + 1 agents, ~25 connections each)
        # and the manager's caller threads, whatever the number of groups.
        assert peak_threads - threads0 <= backend.agents * (backend.agent_threads + 4) + 16, peak_threads
        assert peak_fds - fds0 <= (backend.agents + 1) * 26 + 32, peak_fds
        print(f"recovered {recovered:.2f} s after thaw; threads +{peak_threads - threads0}, fds +{peak_fds - fds0}")
    finally:
        if s3_server.frozen:
            s3_server.thaw()
        backend.close()


class _PlainHandler(http.server.BaseHTTPRequestHandler):
    """A web server that is not S3: 200 with HTML for everything, a redirect to itself, or 503 (a gateway's outage)."""

    mode = "200"

    def log_message(self, *args: object) -> None:
        pass

    def _answer(self, body: bool) -> None:
        if self.mode == "301":
            self.send_response(301)
            self.send_header("Location", self.path)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        self.send_response(503 if self.mode == "503" else 200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", "13")
        self.end_headers()
        if body:
            self.wfile.write(b"<html></html>")

    def do_GET(self) -> None:
        self._answer(True)

    def do_HEAD(self) -> None:
        self._answer(False)


@pytest.mark.parametrize("mode", ["200", "301", "503"])
def test_plain_http_server_is_a_typed_error_without_fd_leak(mode: str) -> None:
    """Issue 12 item 9: no raw RecursionError, no "every key stored", no fd leak."""
    from kvprobe.backends.nixl_obj import NixlObjBackend, ObjStoreUnavailableError

    handler = type("Handler", (_PlainHandler,), {"mode": mode})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    try:

        def attempt() -> None:
            with pytest.raises(ObjStoreUnavailableError) as info:
                NixlObjBackend("kvblocks", endpoint_url=url, access_key="ab", secret_key="cd")
            # A 503 to everything is not S3 throttling (whose listing says SlowDown): not accepted as such.
            says = "no S3 throttling" if mode == "503" else "not an S3"
            assert url in str(info.value) and says in str(info.value), info.value
            assert not isinstance(info.value.__context__, RecursionError) or mode == "301"

        attempt()  # warm-up: NIXL's and botocore's one-time files
        fds = open_fds()
        for _ in range(10):
            attempt()
        assert open_fds() <= fds + 2, (fds, open_fds())
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize("n", [16, 64, 256])
def test_num_threads_puts_n_heads_in_flight(s3_server: Any, bucket: str, proxy: Any, n: int) -> None:
    """Issue 17 part 3: N HEADs in flight (one NIXL agent alone keeps ~25), seen at the proxy with 300 ms added."""
    backend = _through(proxy, s3_server, bucket, num_threads=n, deadline_s=60)
    try:
        proxy.configure(delay_s=0.3)
        assert backend.batch_lookup(_keys(2 * n), None) == [False] * (2 * n)
        peak = proxy.stats()["peak_inflight"]
        assert peak >= 0.9 * n, (n, peak)
        assert peak <= n, (n, peak)
    finally:
        backend.close()


def test_a_store_throttling_every_head_at_start_up_is_no_reason_to_fail(
    s3_server: Any, bucket: str, proxy: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """A fleet starting against a store it saturates: the backend is built, warns, and serves once the store does."""
    key = b"throttle-start-up"
    writer = _through(proxy, s3_server, bucket)
    writer.store(key, b"x")
    writer.close()
    proxy.configure(head_rate=0.01, head_burst=1.0)  # one HEAD admitted, then 503 for every HEAD for 100 s
    try:
        with caplog.at_level(logging.WARNING, logger="kvprobe.backends.nixl_obj"):
            backend = _through(proxy, s3_server, bucket, deadline_s=1.0)  # raised ObjStoreUnavailableError before
        assert "is throttling every one of boto3's HEADs" in caplog.text and bucket in caplog.text
        try:
            assert proxy.stats()["done"].get("rate_limited", 0) >= 4  # the probe was retried while throttled
            proxy.configure(head_rate=0.0)  # the store keeps up again
            assert backend.batch_lookup([key, b"throttle-absent"], None) == [True, False]
        finally:
            backend.close()
        # A bucket that does not exist is still told apart while HEADs are throttled: its listing says so.
        proxy.configure(head_rate=0.01, head_burst=1.0)
        with pytest.raises(BucketNotFoundError, match="does not exist"):
            _through(proxy, s3_server, "kvprobe-no-such-bucket").close()
    finally:
        proxy.configure(head_rate=0.0)


def test_a_store_throttling_everything_at_start_up_is_accepted_unverified(
    s3_server: Any, bucket: str, proxy: Any, caplog: pytest.LogCaptureFixture
) -> None:
    proxy.configure(throttle=1.0)  # every request, listings included, answered SlowDown
    try:
        with caplog.at_level(logging.WARNING, logger="kvprobe.backends.nixl_obj"):
            backend = _through(proxy, s3_server, bucket, deadline_s=1.0)
        backend.close()
        assert "is throttling every one of boto3's HEADs" in caplog.text
    finally:
        proxy.configure(throttle=0.0)
