"""NIXL OBJ specifics: connection check, bounded retries, outages, agents, import errors."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from typing import Any

import pytest
from integ_harness import make_obj_backend, requires_nixl, resolve

from kvprobe.statemachine import AsyncLookupManager, FailureKind

pytestmark = requires_nixl


def test_missing_bucket_is_reported_at_construction(s3_server: Any) -> None:
    from kvprobe.backends.nixl_obj import BucketNotFoundError

    with pytest.raises(BucketNotFoundError, match="no-such-bucket"):
        make_obj_backend(s3_server, "no-such-bucket")


def test_unreachable_endpoint_is_reported_fast() -> None:
    from kvprobe.backends.nixl_obj import NixlObjBackend, ObjStoreUnavailableError
    from kvprobe.testing.s3server import free_port

    started = time.monotonic()
    with pytest.raises(ObjStoreUnavailableError, match="unreachable"):
        NixlObjBackend(
            bucket="kvblocks",
            endpoint_url=f"http://127.0.0.1:{free_port()}",
            access_key="a",
            secret_key="b",
        )
    assert time.monotonic() - started < 10


def test_bad_arguments_are_refused() -> None:
    from kvprobe.backends.nixl_obj import NixlObjBackend

    with pytest.raises(ValueError, match="3 characters"):
        NixlObjBackend(bucket="ab", endpoint_url="http://127.0.0.1:1", check=False)
    with pytest.raises(ValueError, match="endpoint_url"):
        NixlObjBackend(bucket="abc", endpoint_url="127.0.0.1:1", check=False)
    with pytest.raises(ValueError, match="num_threads"):
        NixlObjBackend(bucket="abc", endpoint_url="http://127.0.0.1:1", num_threads=0, check=False)


def test_retry_environment_is_set_only_while_building(s3_server: Any, bucket: str) -> None:
    before = {name: os.environ.get(name) for name in ("AWS_RETRY_MODE", "AWS_MAX_ATTEMPTS")}
    backend = make_obj_backend(s3_server, bucket)
    backend.close()
    assert {name: os.environ.get(name) for name in before} == before


def test_credentials_come_from_the_environment(s3_server: Any, bucket: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from kvprobe.backends.nixl_obj import NixlObjBackend

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", s3_server.access_key)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", s3_server.secret_key)
    monkeypatch.setenv("AWS_REGION", "eu-west-3")
    with NixlObjBackend(bucket=bucket, endpoint_url=s3_server.endpoint_url) as backend:
        assert backend.region == "eu-west-3"
        backend.store(b"env-key")
        assert backend.batch_lookup([b"env-key", b"other"], None) == [True, False]


def test_agents_are_unique_and_released(s3_server: Any, bucket: str) -> None:
    a = make_obj_backend(s3_server, bucket)
    b = make_obj_backend(s3_server, bucket)
    try:
        assert set(a.agent_names).isdisjoint(b.agent_names)
        assert a.batch_lookup([b"k"], None) == [False]
    finally:
        a.close()
        b.close()
    a.close()  # idempotent
    with pytest.raises(RuntimeError, match="closed"):
        a.batch_lookup([b"k"], None)


def test_outage_is_bounded_by_the_deadline_resolves_miss_and_recovers(s3_server: Any, bucket: str) -> None:
    from kvprobe.backends.nixl_obj import ObjStoreUnavailableError

    backend = make_obj_backend(s3_server, bucket, num_threads=8, deadline_s=1.0)
    keys = [i.to_bytes(8, "big") for i in range(200)]
    try:
        for key in keys[:30]:
            backend.store(key)
        s3_server.stop()  # keeps its objects for the restart
        try:
            started = time.monotonic()
            with pytest.raises(ObjStoreUnavailableError, match=r"none of 200 keys answered within 1.0 s"):
                backend.batch_lookup(keys, None)
            # Retried within the deadline, then given up: without the SDK's
            # retries bounded this took ~25 s per key.
            assert time.monotonic() - started < 2.5
            assert backend.stats["miss_failing"] == 200
            with AsyncLookupManager(backend, name="outage", lookup_timeout_s=30) as m:
                verdicts = resolve(m, {"r": keys})
                assert verdicts["r"] == [False] * len(keys)
                assert m.stats.failures.get(FailureKind.RAISED.value) == 1
                m.cleanup("r")
                assert len(m) == 0
        finally:
            s3_server.start()
        # The same backend (same agent) works again once the server is back.
        assert backend.batch_lookup(keys, None) == [True] * 30 + [False] * 170
    finally:
        backend.close()


def test_frozen_server_is_given_up_before_the_managers_timeout(s3_server: Any, bucket: str) -> None:
    """The manager fits the backend's deadline under its timeout: the call raises (no key answered), never times out."""
    backend = make_obj_backend(s3_server, bucket, num_threads=4)
    try:
        backend.store(b"present")
        s3_server.freeze()
        try:
            with AsyncLookupManager(backend, name="frozen", lookup_timeout_s=0.5) as m:
                started = time.monotonic()
                verdicts = resolve(m, {"r": [b"present", b"absent"]})
                assert time.monotonic() - started < 3
                assert verdicts["r"] == [False, False]
                assert m.stats.timeouts == 0 and m.stats.failures.get(FailureKind.RAISED.value) == 1, m.stats
                m.cleanup("r")
        finally:
            s3_server.thaw()
        assert backend.batch_lookup([b"present", b"absent"], None) == [True, False]
    finally:
        backend.close()


def test_without_nixl_backends_raise_import_error_naming_the_extra(tmp_path: Any) -> None:
    code = """
import sys
for name in ("nixl", "nixl._api", "nixl_cu12", "nixl_cu12._api"):
    sys.modules[name] = None  # makes every import of them fail
import kvprobe.backends as b
assert b.FsBackend(sys.argv[1]).batch_lookup([b"k"], None) == [False]
for make in (lambda: b.NixlPosixBackend(sys.argv[1]), lambda: b.NixlObjBackend(bucket="abc", check=False)):
    try:
        make()
    except ImportError as exc:
        assert "kvprobe[nixl]" in str(exc), exc
    else:
        raise SystemExit("no ImportError")
print("ok")
"""
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"
