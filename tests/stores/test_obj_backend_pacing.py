"""NixlObjBackend under throttling on moto through the fault proxy: pace, shedding, quiet stderr, a clean exit.

Issue 27 part 2 and the object-backend items of issue 26.  moto (the ``s3``
extra) serves as the store: these tests are about the client, and moto
answers in well under the deadlines used here.  The fault proxy
(:mod:`kvprobe.testing.faultproxy`) answers a seeded fraction of requests
``503 SlowDown`` and can delay the others, so NIXL queries fail or are still
on the wire when a process exits.
"""

from __future__ import annotations

import itertools
import math
import os
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from integ_harness import requires_moto, requires_nixl

pytestmark = [requires_nixl, requires_moto]

_ids = itertools.count(1)


@pytest.fixture(scope="module")
def moto() -> Iterator[Any]:
    from kvprobe.testing.s3server import S3Server

    with S3Server() as server:
        yield server


@pytest.fixture
def proxy(moto: Any) -> Iterator[Any]:
    from kvprobe.testing.faultproxy import FaultProxy

    with FaultProxy(moto.endpoint_url, seed=11) as p:
        yield p


@pytest.fixture
def bucket(moto: Any) -> str:
    name = f"pacing-{os.getpid()}-{next(_ids)}"
    moto.create_bucket(name)
    return name


def _backend(moto: Any, proxy: Any, bucket: str, **kwargs: Any) -> Any:
    from kvprobe.backends.nixl_obj import NixlObjBackend

    return NixlObjBackend(bucket=bucket, **{**moto.credentials(), "endpoint_url": proxy.endpoint_url, **kwargs})


def _keys(n: int) -> list[bytes]:
    return [b"pacing-%05d" % i for i in range(n)]


def test_answers_stay_exact_and_fewer_heads_are_wasted_under_throttling(moto: Any, proxy: Any, bucket: str) -> None:
    """20 % of HEADs throttled: every verdict right, and far fewer HEADs than one query per chunk then per key.

    Before (a failed 16-key query retried one key per query): 2.1-2.2 HEADs
    per key on this workload; now about 1.5 once the query size has adapted
    (a NIXL query keeps none of its answers when one HEAD fails, so smaller
    queries under failures waste fewer).
    """
    keys = _keys(300)
    backend = _backend(moto, proxy, bucket, deadline_s=30.0, seed=1)
    try:
        for key in keys[::2]:
            backend.store(key)
        proxy.configure(throttle=0.2, seed=99)
        backend.batch_lookup([b"warm-up-%03d" % i for i in range(100)], None)  # a serving engine runs on
        proxy.configure(throttle=0.2, seed=100)  # resets the proxy's counts
        verdicts = backend.batch_lookup(keys, None)
        assert verdicts == [i % 2 == 0 for i in range(len(keys))]
        heads = sum(proxy.stats()["done"].values())
        assert heads <= 1.8 * len(keys), (heads, backend.stats, backend.pacing)
        assert backend.stats["failed_queries"] > 0
    finally:
        backend.close()


def test_backends_on_the_same_store_share_one_pace(moto: Any, proxy: Any, bucket: str) -> None:
    a = _backend(moto, proxy, bucket, prefix="tier", check=False)
    b = _backend(moto, proxy, bucket, prefix="tier/", check=False)
    c = _backend(moto, proxy, bucket, prefix="other", check=False)
    try:
        assert a.pacer is b.pacer and a.pacer is not c.pacer
        a.pacer.failed(time.monotonic(), 1, retry_after_s=30.0)
        assert b.pacing["holds"] == 1 and c.pacing["holds"] == 0
    finally:
        for backend in (a, b, c):
            backend.close()


def test_a_group_shed_whole_answers_miss_at_once_without_an_error(moto: Any, proxy: Any, bucket: str) -> None:
    keys = _keys(64)
    backend = _backend(moto, proxy, bucket, deadline_s=20.0)
    try:
        backend.store(keys[0])
        proxy.configure(throttle=0.0)  # resets the proxy's counts
        backend.pacer.failed(time.monotonic(), 1, retry_after_s=30.0)  # as a store's Retry-After would
        started = time.monotonic()
        assert backend.batch_lookup(keys, None) == [False] * 64  # shed, not ObjStoreUnavailableError
        assert time.monotonic() - started < 10.0, "the call waited for its deadline"
        assert backend.stats["shed"] == 64
        assert sum(proxy.stats()["done"].values()) == 0, "a shed key was sent"
    finally:
        backend.close()


_CHILD = textwrap.dedent(
    """
    import logging, sys
    from kvprobe.backends.nixl_obj import NixlObjBackend, ObjStoreUnavailableError
    endpoint, access_key, secret_key, bucket, mode = sys.argv[1:6]
    if mode == "debug":
        logging.basicConfig(level=logging.DEBUG, format="%(name)s %(message)s")
    backend = NixlObjBackend(bucket=bucket, endpoint_url=endpoint, access_key=access_key,
                             secret_key=secret_key, deadline_s=0.5, check=False)
    try:
        backend.batch_lookup([b"exit-%04d" % i for i in range(256)], None)
    except ObjStoreUnavailableError:
        pass
    print("stats", backend.stats["failed_queries"], backend._pool.busy, flush=True)  # busy: NIXL calls running
    if mode == "close":
        backend.close()
    """
)


def _child(moto: Any, proxy: Any, bucket: str, mode: str, **env: str) -> subprocess.CompletedProcess[str]:
    creds = moto.credentials()
    # The parent's own import of NIXL set NIXL_LOG_LEVEL; the child must start without it.
    clean = {k: v for k, v in os.environ.items() if k != "NIXL_LOG_LEVEL"}
    argv = [sys.executable, "-c", _CHILD, proxy.endpoint_url, creds["access_key"], creds["secret_key"], bucket, mode]
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, env={**clean, **env})


@pytest.mark.parametrize("mode", ["exit", "close"])
def test_a_process_exits_cleanly_and_quietly_under_throttling(moto: Any, proxy: Any, bucket: str, mode: str) -> None:
    """Queries still on the wire at exit (0.3 s added per request, a 0.5 s deadline), half the HEADs throttled.

    Before: SIGABRT ("terminate called without an active exception") when a
    NIXL query returned into a thread the interpreter had stopped, and one
    NIXL error line on stderr per throttled HEAD.
    """
    proxy.configure(throttle=0.5, delay_s=0.3)
    done = _child(moto, proxy, bucket, mode)
    assert "stats" in done.stdout, done.stderr[-2000:]
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
    assert "terminate called" not in done.stderr
    assert "checkObjectExistsAsync" not in done.stderr and "Failed to query memory" not in done.stderr
    failed, running = map(int, done.stdout.split()[1:3])
    assert failed > 0 and running > 0, done.stdout  # throttled queries, and NIXL queries running at exit


def test_nixl_lines_come_back_when_asked_and_failures_are_logged_at_debug(moto: Any, proxy: Any, bucket: str) -> None:
    proxy.configure(throttle=0.5, delay_s=0.0)
    loud = _child(moto, proxy, bucket, "exit", NIXL_LOG_LEVEL="ERROR")
    assert loud.returncode == 0 and "checkObjectExistsAsync" in loud.stderr  # the lines the default hides
    debug = _child(moto, proxy, bucket, "debug")
    assert debug.returncode == 0 and "checkObjectExistsAsync" not in debug.stderr
    assert "kvprobe.backends._obj_lookup a query of" in debug.stderr, debug.stderr[-2000:]


@pytest.mark.parametrize("bad", [math.nan, math.inf, -1.0, 0.0, 3601.0, True, "2"])
def test_connect_timeout_must_be_a_finite_positive_number_of_seconds(bad: Any) -> None:
    """Issue 26: NaN or infinity was accepted, and the failures it caused then blamed the server."""
    from kvprobe.backends.nixl_obj import NixlObjBackend

    with pytest.raises(ValueError, match="connect_timeout_s"):
        NixlObjBackend("kvblocks", endpoint_url="http://127.0.0.1:9", connect_timeout_s=bad, check=False)


class _FakeClient:
    built = 0
    lock = threading.Lock()

    def __init__(self) -> None:
        time.sleep(0.05)  # building a boto3 client takes a while: concurrent callers overlap
        with self.lock:
            type(self).built += 1
        self.closed = False

    def close(self) -> None:
        self.closed = True


def test_the_boto3_client_is_built_once_and_never_after_close(
    moto: Any, proxy: Any, bucket: str, monkeypatch: Any
) -> None:
    """Issue 26: concurrent retries built several clients (one closed), and a retry after close() built another."""
    import boto3

    backend = _backend(moto, proxy, bucket, check=False)
    monkeypatch.setattr(_FakeClient, "built", 0)
    monkeypatch.setattr(boto3, "client", lambda *args, **kwargs: _FakeClient())
    barrier = threading.Barrier(8)
    clients: list[Any] = []

    def retry() -> None:
        barrier.wait()
        clients.append(backend._client())

    threads = [threading.Thread(target=retry) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert _FakeClient.built == 1 and all(c is clients[0] for c in clients)
    backend.close()
    assert clients[0].closed
    with pytest.raises(RuntimeError, match="closed"):
        backend._client()
    with pytest.raises(RuntimeError, match="closed"):
        backend.store(b"after-close")
    assert _FakeClient.built == 1
