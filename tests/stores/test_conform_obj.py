"""``kvprobe conform`` on the object tier: ``nixl_obj_factory`` on a bucket of the local Ceph RGW.

The factory is configured from the environment (the bucket is required; the
message of a bad setting names the variable), writes each run under a
prefix of its own, and deletes it when the run ends: after a whole
``kvprobe conform`` the bucket is empty.

The per-call timeout is the default, 1 s, stated on the command line.  Why
it fits: the machine hands it to the backend's ``fit_deadline`` as a
manager with ``lookup_timeout_s=1`` would, so each call gives up at 0.75 s
(a quarter before the timeout) and answers what it has; on a store that
never pushes back the pace is unpaced (it starts HEADs at once), and a call
of this machine (at most three keys) took 4 ms at the median and 342 ms at
most over two default runs on this loaded 2-core machine (the commit that
added this file says how it was measured).  A stored key the deadline or
the pace left unanswered reads MISS, and the audit reports it as a wrong
answer: the timeout is not what makes a throttled store fail, the oracle is.
"""

from __future__ import annotations

import gc
import weakref
from collections.abc import Sequence
from typing import Any

import pytest
from integ_harness import requires_nixl

from kvprobe.conform import main as conform_main
from kvprobe.testing.lifetimes import Lifetimes
from kvprobe.testing.stateful import ConformConfigError, Target, nixl_obj_factory, run_conformance
from kvprobe.testing.stateful.objstore import BUCKET_ENV, PREFIX_ENV, nixl_obj_target

FACTORY = "kvprobe.testing.stateful:nixl_obj_factory"
#: Examples per worker mode: about 15 s each here (a run builds a backend: ~0.4 s).
EXAMPLES = 30


def _no_configuration(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (BUCKET_ENV, PREFIX_ENV, "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(name, raising=False)


def test_a_missing_bucket_is_named(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    _no_configuration(monkeypatch)
    with pytest.raises(ConformConfigError, match=f"{BUCKET_ENV} is not set"):
        nixl_obj_factory()
    assert conform_main([FACTORY]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "ConformConfigError" in err[0] and BUCKET_ENV in err[0], err


@pytest.mark.parametrize(
    ("present", "missing"),
    [("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"), ("AWS_SECRET_ACCESS_KEY", "AWS_ACCESS_KEY_ID")],
)
def test_one_access_key_without_the_other_is_named(present: str, missing: str, monkeypatch: pytest.MonkeyPatch) -> None:
    _no_configuration(monkeypatch)
    monkeypatch.setenv(BUCKET_ENV, "some-bucket")
    monkeypatch.setenv(present, "value")
    with pytest.raises(ConformConfigError, match=f"{present} is set but {missing} is not"):
        nixl_obj_factory()


def _configure(monkeypatch: pytest.MonkeyPatch, server: Any, bucket: str) -> None:
    credentials = server.credentials()
    monkeypatch.setenv("AWS_ENDPOINT_URL", credentials["endpoint_url"])
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", credentials["access_key"])
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", credentials["secret_key"])
    monkeypatch.setenv("AWS_REGION", credentials["region"])
    monkeypatch.setenv(BUCKET_ENV, bucket)
    monkeypatch.setenv(PREFIX_ENV, "conform-test")


def _objects(server: Any, bucket: str) -> list[str]:
    listing = server.client().list_objects_v2(Bucket=bucket)
    return [item["Key"] for item in listing.get("Contents", [])]


@requires_nixl
def test_each_run_writes_under_its_own_prefix_and_removes_it(
    s3_server: Any, bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    _configure(monkeypatch, s3_server, bucket)
    first, second = nixl_obj_factory(), nixl_obj_factory()
    try:
        prefixes = {first.backend.prefix, second.backend.prefix}  # type: ignore[attr-defined]
        assert len(prefixes) == 2 and all(p.startswith("conform-test/run-") for p in prefixes), prefixes
        key = b"\x01" * 12
        first.store(key)
        second.store(key)
        # The objects are the names the backend looks up, and it finds them.
        assert sorted(_objects(s3_server, bucket)) == sorted(t.backend.locate(key) for t in (first, second))  # type: ignore[attr-defined]
        assert list(first.backend.batch_lookup([key], None)) == [True]
        first.remove(key)
        assert list(first.backend.batch_lookup([key], None)) == [False]
    finally:
        for target in (first, second):
            assert target.close is not None
            target.close()
    assert _objects(s3_server, bucket) == []


@requires_nixl
@pytest.mark.parametrize("worker", ["manual", "thread"])
def test_conform_passes_on_rgw_and_leaves_the_bucket_empty(
    worker: str, s3_server: Any, bucket: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _configure(monkeypatch, s3_server, bucket)
    argv = [FACTORY, "--derandomize", "--examples", str(EXAMPLES), "--worker", worker, "--timeout", "1"]
    assert conform_main(argv) == 0, capsys.readouterr().out
    assert f"PASS: {EXAMPLES} examples" in capsys.readouterr().out
    assert _objects(s3_server, bucket) == []


def _always_stored() -> type[Any]:
    from kvprobe.backends.nixl_obj import NixlObjBackend

    class AlwaysStored(NixlObjBackend):
        """Answers every key stored (its lookups still go to the store)."""

        def batch_lookup(self, keys: Sequence[bytes], req_context: object) -> list[bool]:
            return [True for _ in super().batch_lookup(keys, req_context)]

    return AlwaysStored


@requires_nixl
def test_a_failed_run_leaves_no_backend_thread_or_object(
    s3_server: Any, bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A failing run's traceback reaches the machine and its tier; with a
    # backend that holds NIXL agents and threads, a kept tier would keep them.
    _configure(monkeypatch, s3_server, bucket)
    made: list[weakref.ref[Any]] = []
    lying = _always_stored()

    def factory() -> Target:
        target = nixl_obj_target(lying)
        made.append(weakref.ref(target.backend))
        return target

    before = Lifetimes(prefix="kvprobe-")
    result = run_conformance(factory, derandomize=True, shrink_runs=20)  # shrinking kept, bounded: it keeps failures
    assert not result.passed and "TierAnswersTruthfully: the tier answered" in result.failure, result.failure
    assert len(made) > 2
    gc.collect()
    alive = [ref for ref in made if ref() is not None]
    assert alive == [], f"{len(alive)} of the {len(made)} backends the run made are still alive"
    before.assert_ended()
    assert _objects(s3_server, bucket) == []
