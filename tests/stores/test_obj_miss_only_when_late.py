"""Issue 39: a stored key reads MISS only when its deadline truly cannot be met at the store's served rate.

On the object backend itself (moto behind the fault proxy, which caps the
HEADs it serves per second and answers a random share of the rest ``503
SlowDown``), judged from counts, never from time:

* a deadline that fits the keys at the served rate with a margin: every
  stored key is True, no key is shed or unanswered;
* a deadline that cannot fit them: every stored key not True is marked
  unanswered and counted by cause (shed, failing, in flight, not started),
  never read as "not stored"; no absent key is True.

A pace that sheds early (``shed_margin`` returning the whole deadline, so a
query the pace starts later than the call's start is given up) fails the
first test: :func:`test_the_fitting_deadline_catches_an_early_shed` runs it
against that mutant and requires the check to fail.

Marked ``quiet``: make test runs these alone, after its stages.  In stage
four beside TLC (a fresh-clone CI run of 6584886) the fitting deadline
left one stored key unanswered, its retries still failing: the starved
Python proxy, not the pace, is what such a run measures.  That a
CPU-starved host still costs verdicts is issue 39's open part.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator
from typing import Any

import pytest
from integ_harness import requires_moto, requires_nixl

pytestmark = [pytest.mark.quiet, requires_nixl, requires_moto]

_ids = itertools.count(1)

#: HEADs per second the proxy serves (a token bucket: beyond it, 503s).
SERVED_PER_S = 200
#: The share of requests the proxy answers 503 at random, whatever the rate.
RANDOM_LOSS = 0.2
#: Counts that say a key got no answer, by cause.
UNANSWERED_CAUSES = ("shed", "miss_failing", "miss_in_flight", "miss_not_started")


@pytest.fixture(scope="module")
def moto() -> Iterator[Any]:
    from kvprobe.testing.s3server import S3Server

    with S3Server() as server:
        yield server


@pytest.fixture
def store(moto: Any) -> Iterator[tuple[Any, dict[str, Any]]]:
    """A fresh bucket behind a proxy serving ``SERVED_PER_S`` HEAD/s: (proxy, the backend's arguments)."""
    from kvprobe.testing.faultproxy import FaultProxy

    bucket = f"late-{os.getpid()}-{next(_ids)}"
    moto.create_bucket(bucket)
    with FaultProxy(moto.endpoint_url, seed=7) as proxy:
        args = {**moto.credentials(), "bucket": bucket, "endpoint_url": proxy.endpoint_url, "pace_scope": "process"}
        yield proxy, args


def _stored_and_absent(backend: Any, n: int, tag: str) -> tuple[list[bytes], set[bytes]]:
    keys = [f"{tag}-{i:05d}".encode() for i in range(n)]
    stored = set(keys[::2])
    for key in stored:
        backend.store(key)
    return keys, stored


def _fitting_run(store: tuple[Any, dict[str, Any]]) -> tuple[list[bytes], set[bytes], Any, dict[str, int]]:
    """300 keys, a 6 s deadline, at 200 HEAD/s with 20 % random loss: ~500 HEADs, ~2.5 s of the store's rate.

    A warm-up call first brings the pace down to the store's cap (a
    serving engine's pace is never fresh), so the measured call is paced.
    """
    from kvprobe.backends.nixl_obj import NixlObjBackend

    proxy, args = store
    backend = NixlObjBackend(**args, deadline_s=6.0, seed=3)
    try:
        keys, stored = _stored_and_absent(backend, 300, "fit")
        proxy.configure(throttle=RANDOM_LOSS, head_rate=SERVED_PER_S, seed=5)
        backend.batch_lookup([f"warm-{i:04d}".encode() for i in range(400)], None)
        before = dict(backend.stats)
        verdicts = backend.batch_lookup(keys, None)
        counts = {name: backend.stats[name] - before[name] for name in UNANSWERED_CAUSES}
        return keys, stored, verdicts, counts
    finally:
        backend.close()


def _deadline_met_violations(keys: list[bytes], stored: set[bytes], verdicts: Any, counts: dict[str, int]) -> list[str]:
    """What contradicts "every key answered, none shed" in a call whose deadline fits (empty: none)."""
    wrong = [k for k, v in zip(keys, verdicts, strict=True) if v != (k in stored)]
    out = []
    if wrong:
        out.append(f"{len(wrong)} keys answered wrong or not at all, e.g. {wrong[:3]}")
    unanswered: frozenset[int] = getattr(verdicts, "unanswered", frozenset())  # a plain list: every key answered
    if unanswered:
        out.append(f"{len(unanswered)} keys unanswered")
    out.extend(f"{name}={value}" for name, value in counts.items() if value)
    return out


def test_a_deadline_that_fits_at_the_served_rate_loses_no_key(store: tuple[Any, dict[str, Any]]) -> None:
    keys, stored, verdicts, counts = _fitting_run(store)
    assert _deadline_met_violations(keys, stored, verdicts, counts) == []


def test_the_fitting_deadline_catches_an_early_shed(
    store: tuple[Any, dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The mutant: a query must start when its call does, or it is shed (whatever time is left)."""
    import kvprobe.backends._obj_lookup as lookup

    monkeypatch.setattr(lookup, "shed_margin", lambda usual_s, deadline_s: deadline_s)
    keys, stored, verdicts, counts = _fitting_run(store)
    violations = _deadline_met_violations(keys, stored, verdicts, counts)
    assert counts["shed"] > 0 and violations, (counts, violations)


def test_a_deadline_that_cannot_fit_counts_every_lost_key_as_unanswered(store: tuple[Any, dict[str, Any]]) -> None:
    """2,000 keys in 2 s at 200 HEAD/s: at most ~400 can be asked; the rest are MISS by cause, never "absent"."""
    from kvprobe.backends.nixl_obj import NixlObjBackend

    proxy, args = store
    backend = NixlObjBackend(**args, deadline_s=2.0, seed=4)
    try:
        keys, stored = _stored_and_absent(backend, 2000, "late")
        proxy.configure(throttle=RANDOM_LOSS, head_rate=SERVED_PER_S, seed=6)
        before = dict(backend.stats)
        verdicts = backend.batch_lookup(keys, None)
        counts = {name: backend.stats[name] - before[name] for name in UNANSWERED_CAUSES}
    finally:
        backend.close()
    unanswered: frozenset[int] = getattr(verdicts, "unanswered", frozenset())  # a plain list: every key answered
    assert 0 < len(unanswered) < len(keys), len(unanswered)
    assert sum(counts.values()) == len(unanswered), (counts, len(unanswered))
    for i, (key, verdict) in enumerate(zip(keys, verdicts, strict=True)):
        if key in stored:
            assert verdict or i in unanswered, f"stored key {key!r} read as not stored"
        else:
            assert not verdict, f"absent key {key!r} read as stored"
