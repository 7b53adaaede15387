"""``kvprobe conform`` fails three realistic defects of the object engine, and passes the engine itself.

The store is a Ceph RGW of this module's own behind a fault proxy that
answers a fifth of the requests ``500 InternalError`` (``obj_defects.py``):
the honest ``NixlObjBackend`` retries within its deadline (fitted under a
5 s timeout: ``TIMEOUT_S`` says why) and answers every key truthfully; each defect makes a
key's answer wrong, and conform's oracle (``TierAnswersTruthfully``) names it.
Counts only: each defect's run must fail, from every seed tried.  The
proxy's faults are drawn afresh in every run, so Hypothesis's replay of a
failing run can go differently: then the report says the replay was flaky
instead of naming the answer, so at least one seed's report must name it.
How often each seed catches each defect is measured by
``bench/checks/conform_obj_power.py`` (docs/performance.md).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from obj_defects import ERROR_SHARE, OBJ_DEFECTS, TIMEOUT_S, defect_class, proxied_factory

from kvprobe.backends._nixl_import import nixl_unavailable
from kvprobe.testing.stateful import run_conformance
from kvprobe.testing.stateful.objstore import BUCKET_ENV, PREFIX_ENV

pytestmark = pytest.mark.skipif(nixl_unavailable() is not None, reason=f"NIXL not importable: {nixl_unavailable()}")

BUCKET = "kvprobe-conform-defects"
#: Seeds tried per defect (each failing run takes a second or two).
SEEDS = 3
NAMED = "TierAnswersTruthfully: the tier answered"


@pytest.fixture(scope="module")
def gateway() -> Iterator[tuple[str, Any, dict[str, Any]]]:
    """The flaky gateway's URL, a client writing straight to the RGW behind it, and the RGW's credentials."""
    from kvprobe.testing.faultproxy import FaultProxy
    from kvprobe.testing.rgw import running_rgw

    with running_rgw() as server:
        server.create_bucket(BUCKET)
        with FaultProxy(server.endpoint_url, error500=ERROR_SHARE, seed=1) as proxy:
            yield proxy.endpoint_url, server.client(), dict(server.credentials())


@pytest.fixture
def proxied(gateway: tuple[str, Any, dict[str, Any]], monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, Any]]:
    """The gateway's URL and the writer, with the environment naming the bucket; the bucket is empty after the test."""
    proxy_url, writer, credentials = gateway
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", credentials["access_key"])
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", credentials["secret_key"])
    monkeypatch.setenv("AWS_REGION", credentials["region"])
    monkeypatch.setenv(BUCKET_ENV, BUCKET)
    monkeypatch.setenv(PREFIX_ENV, "defects")
    yield proxy_url, writer
    assert writer.list_objects_v2(Bucket=BUCKET).get("KeyCount") == 0


def test_the_honest_engine_passes_behind_the_flaky_gateway(proxied: tuple[str, Any]) -> None:
    # The control: the failures below are the defects', not the gateway's.
    factory = proxied_factory(defect_class("honest"), *proxied)
    result = run_conformance(factory, examples=30, derandomize=True, shrink=False, timeout_s=TIMEOUT_S)
    assert result.passed, result.failure


@pytest.mark.parametrize("name", sorted(OBJ_DEFECTS))
def test_conform_fails_the_defect_from_every_seed(name: str, proxied: tuple[str, Any]) -> None:
    factory = proxied_factory(defect_class(name), *proxied)
    reports = [run_conformance(factory, seed=seed, shrink=False, timeout_s=TIMEOUT_S) for seed in range(SEEDS)]
    assert not any(result.passed for result in reports), [result.seed for result in reports if result.passed]
    assert any(NAMED in result.failure for result in reports), reports[0].failure


def test_at_least_three_defects() -> None:
    assert len(OBJ_DEFECTS) >= 3
