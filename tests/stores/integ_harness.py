"""Shared helpers of the integration tests: skip markers, the backend list, keys, a scheduler-like loop."""

from __future__ import annotations

import random
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import pytest

from kvprobe.backends._nixl_import import nixl_unavailable
from kvprobe.statemachine import AsyncLookupManager, ReqContext


def nixl_missing() -> str | None:
    """Why NIXL cannot be used here, or None if it can."""
    return nixl_unavailable()


def s3_missing() -> str | None:
    """Why the S3 tests cannot run here (boto3 or Ceph RGW missing), or None if they can."""
    from kvprobe.testing.rgw import rgw_missing

    try:
        __import__("boto3")
    except ImportError as exc:
        return f"boto3 is not installed (pip install 'kvprobe[s3]'): {exc}"
    return rgw_missing()


def moto_missing() -> str | None:
    """Why moto's server cannot run here, or None (for the tests whose subject is moto)."""
    for module in ("moto.server", "boto3"):
        try:
            __import__(module)
        except ImportError as exc:
            return f"{module} is not installed (pip install 'kvprobe[s3]'): {exc}"
    return None


def skip_unless_rgw() -> None:
    """Skip (one line: how to install) when RGW cannot run; fail instead under ``KVPROBE_REQUIRE_RGW=1``."""
    from kvprobe.testing.rgw import skip_or_fail

    skip_or_fail(s3_missing())


requires_nixl = pytest.mark.skipif(nixl_missing() is not None, reason=f"NIXL not importable: {nixl_missing()}")
requires_moto = pytest.mark.skipif(moto_missing() is not None, reason=f"no moto server: {moto_missing()}")


def make_obj_backend(server: Any, bucket: str, **kwargs: Any) -> Any:
    from kvprobe.backends.nixl_obj import NixlObjBackend

    return NixlObjBackend(bucket=bucket, **server.credentials(), **kwargs)


BACKENDS = [
    pytest.param("fs", id="fs"),
    pytest.param("nixl_posix", id="nixl_posix", marks=requires_nixl),
    pytest.param("nixl_obj", id="nixl_obj", marks=requires_nixl),
]


def block_keys(rng: random.Random, hashes: int, groups: int = 1) -> list[bytes]:
    """vLLM-like keys: a 32-byte hash followed by a 4-byte group index."""
    out: list[bytes] = []
    for _ in range(hashes):
        digest = rng.randbytes(32)
        out.extend(digest + g.to_bytes(4, "little") for g in range(groups))
    return out


def resolve(
    m: AsyncLookupManager,
    wanted: Mapping[str, Sequence[bytes]],
    *,
    deadline_s: float = 60.0,
    poll_s: float = 0.002,
) -> dict[str, list[bool]]:
    """Look up every (request, key) until each has a verdict, flushing each step.

    Returns the verdicts per request, in key order.  Fails the test if a
    verdict does not arrive within ``deadline_s`` (a stuck probe).
    """
    contexts = {req: ReqContext(req) for req in wanted}
    verdicts: dict[str, list[bool | None]] = {req: [None] * len(keys) for req, keys in wanted.items()}
    end = time.monotonic() + deadline_s
    while True:
        missing = 0
        for req, keys in wanted.items():
            got = verdicts[req]
            for i, key in enumerate(keys):
                if got[i] is None:
                    got[i] = m.lookup(key, contexts[req])
                    missing += got[i] is None
        if not missing:
            return {req: [bool(v) for v in got] for req, got in verdicts.items()}
        m.flush()
        if time.monotonic() > end:
            raise AssertionError(f"{missing} verdicts still unknown after {deadline_s} s; stats {m.stats}")
        time.sleep(poll_s)


def cleanup_all(m: AsyncLookupManager, reqs: Iterable[str]) -> None:
    for req in reqs:
        m.cleanup(req)
