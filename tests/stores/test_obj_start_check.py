"""The check that the endpoint is S3 is never skipped by a throttled start-up (issue 39 part 3).

A server that is not S3 (or not a store at all) and answers 200 to every
object HEAD would make every block read as stored.  The connection check
catches it by a random name's HEAD; a start-up throttled by such a server
(or by a real store a fleet saturates) must not skip that check: it is
completed at start-up when it can be, and otherwise before any verdict is
returned.  The endpoint here is a small HTTP server on loopback that plays
each part; NIXL and boto3 are real.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from integ_harness import requires_nixl
from obj_fakes import serve_endpoint

from kvprobe.backends._obj_check import PROBE_ATTEMPTS_MAX
from kvprobe.backends.nixl_obj import ObjStoreUnavailableError

pytestmark = requires_nixl


@pytest.fixture
def endpoint() -> Iterator[Any]:
    with serve_endpoint() as handler:
        yield handler


def _backend(endpoint: Any, tmp_path: Any, monkeypatch: pytest.MonkeyPatch, **kw: Any) -> Any:
    from kvprobe.backends.nixl_obj import NixlObjBackend

    monkeypatch.setenv("KVPROBE_PACE_DIR", str(tmp_path))
    options = {"access_key": "ab", "secret_key": "cd", "deadline_s": 1.0, "connect_timeout_s": 1.0} | kw
    return NixlObjBackend("kvblocks", endpoint_url=endpoint.url, **options)


def test_a_server_that_throttles_the_bucket_check_then_answers_200_is_refused(
    endpoint: Any, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    endpoint.mode = "all-stored"  # the bucket's HEAD and the listing throttled, every object HEAD 200
    with pytest.raises(ObjStoreUnavailableError, match="reads as stored"):
        _backend(endpoint, tmp_path, monkeypatch).close()


def test_a_start_up_throttled_throughout_is_verified_before_any_verdict(
    endpoint: Any, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Accepted while everything is throttled; once answers come, a never-written name reading stored refuses them."""
    endpoint.mode = "throttle"
    backend = _backend(endpoint, tmp_path, monkeypatch)
    try:
        endpoint.mode, endpoint.throttle_bucket = "all-stored", False
        keys = [b"never-written-%d" % i for i in range(4)]
        for _ in range(2):  # and every later call: no verdict from this endpoint is ever trusted
            with pytest.raises(ObjStoreUnavailableError, match="reads as stored"):
                backend.batch_lookup(keys, None)
    finally:
        backend.close()


def test_a_start_up_throttled_throughout_serves_a_real_store_once_verified(
    endpoint: Any, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kvprobe.backends.layout import relative_name

    endpoint.mode = "throttle"
    backend = _backend(endpoint, tmp_path, monkeypatch)
    try:
        stored, absent = b"stored-key", b"absent-key"
        endpoint.stored.add(relative_name(stored).rsplit("/", 1)[-1])
        with pytest.raises(ObjStoreUnavailableError, match="not yet verified"):
            backend.batch_lookup([stored, absent], None)  # still throttled: nothing trusted, nothing remembered
        endpoint.mode, endpoint.throttle_bucket = "s3", False
        assert backend.batch_lookup([stored, absent], None) == [True, False]
        assert backend.batch_lookup([stored, absent], None) == [True, False]  # verified once, for good
    finally:
        backend.close()


def test_one_random_503_on_nixls_probe_does_not_refuse_the_store(
    endpoint: Any, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 39: 10 of 80 start-ups under random 503s refused with "NIXL cannot query it".

    The HEADs at start-up: boto3's of a random name (0), NIXL's probe (1),
    boto3's of the probe's name (2).  The probe's 503 was followed by
    boto3's answered HEAD, read as "NIXL itself cannot use the store".
    """
    endpoint.mode, endpoint.throttle_bucket, endpoint.throttle_at = "s3", False, {1}
    backend = _backend(endpoint, tmp_path, monkeypatch)
    try:
        assert backend.batch_lookup([b"never-written"], None) == [False]
        assert len(endpoint.heads) >= 4, endpoint.heads  # the probe was sent again, and answered
    finally:
        backend.close()


def test_a_nixl_probe_failing_every_time_while_boto3_is_answered_is_refused(
    endpoint: Any, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The probe is retried a bounded number of times: NIXL failing on each while the store answers is refused.

    Seven probes: boto3 answering each of its HEADs puts the store's random
    loss at 1/(n + 4) after n probes, and seven NIXL failures in a row at
    that loss are the first less likely than one in a million.
    """
    endpoint.mode, endpoint.throttle_bucket = "s3", False
    endpoint.throttle_at = set(range(1, 2 * PROBE_ATTEMPTS_MAX, 2))  # every NIXL probe
    with pytest.raises(ObjStoreUnavailableError, match="NIXL cannot query it"):
        _backend(endpoint, tmp_path, monkeypatch).close()
    assert len(endpoint.heads) == 1 + 2 * 7, endpoint.heads  # 7 probes, each with boto3's HEAD, after the check's
