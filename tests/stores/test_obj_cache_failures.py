"""The verdict cache never remembers what the object tier did not answer (issue 39 part 3).

The object tier answers ``False`` for a key whose HEADs kept failing, were
shed by the pace, or were unanswered at its deadline: a MISS that says
nothing about the store.  With ``miss_ttl_s > 0`` such a key must not be
remembered as "not stored" (docs/cache.md: failures are never
remembered); a key the store answered absent is.  NIXL and boto3 are real;
the store is a loopback endpoint (:class:`obj_fakes.FakeEndpoint`).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from integ_harness import cleanup_all, requires_nixl, resolve
from obj_fakes import serve_endpoint

from kvprobe.backends.layout import relative_name
from kvprobe.statemachine import AsyncLookupManager, VerdictCache

pytestmark = requires_nixl

STORED, FAILING, ABSENT = b"cache-stored", b"cache-failing", b"cache-absent"


def _last(key: bytes) -> str:
    return relative_name(key).rsplit("/", 1)[-1]


@pytest.fixture
def endpoint() -> Iterator[Any]:
    stored, failing = {_last(STORED)}, {_last(FAILING)}
    with serve_endpoint(mode="s3", throttle_bucket=False, stored=stored, failing=failing) as handler:
        yield handler


def _resolve(m: AsyncLookupManager, req_id: str, keys: list[bytes]) -> list[bool]:
    """``req_id``'s verdicts for ``keys``, in order (the harness's bounded resolve), then its cleanup."""
    answers = resolve(m, {req_id: keys})[req_id]
    cleanup_all(m, [req_id])
    return answers


def test_a_key_failing_at_the_deadline_is_asked_again_an_absent_one_is_remembered(
    endpoint: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kvprobe.backends.nixl_obj import NixlObjBackend

    monkeypatch.setenv("KVPROBE_PACE_DIR", str(tmp_path))
    backend = NixlObjBackend(
        "kvblocks", endpoint_url=endpoint.url, access_key="ab", secret_key="cd", deadline_s=0.5, seed=1
    )
    cache = VerdictCache(max_entries=64, hit_ttl_s=60.0, miss_ttl_s=60.0)
    try:
        with AsyncLookupManager(backend, verdict_cache=cache, lookup_timeout_s=2.0) as m:
            keys = [STORED, FAILING, ABSENT]
            assert _resolve(m, "r1", keys) == [True, False, False]
            assert backend.stats["miss_failing"] >= 1  # the failing key's False was no answer
            asked = {name: endpoint.heads.count(name) for name in map(_last, keys)}
            assert _resolve(m, "r2", keys) == [True, False, False]
            again = {name: endpoint.heads.count(name) - asked[name] for name in asked}
    finally:
        backend.close()
    assert again[_last(FAILING)] >= 1, "the key unanswered at the deadline was remembered as not stored"
    assert again[_last(STORED)] == 0 and again[_last(ABSENT)] == 0, again  # real answers remembered
