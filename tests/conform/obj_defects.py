"""The object tier with one realistic defect each, and the store ``kvprobe conform`` runs them on.

Each defect is a :class:`~kvprobe.backends.nixl_obj.NixlObjBackend` subclass
changing one thing an object engine could get wrong.  Two of them differ
from the honest engine only when HEADs fail, so the runs go through a
:class:`~kvprobe.testing.faultproxy.FaultProxy` in front of the RGW that
answers a share of the requests ``500 InternalError`` (a flaky gateway: loss
that is not load).  The ground truth is written by another client, straight
to the RGW (as the blocks of a fleet are written and evicted by other
engines), so the proxy's faults never fail a write.

``OBJ_DEFECTS`` maps a short name to ``(class name, the defect in words)``;
``tests/conform/test_obj_defects.py`` requires conform to fail each (and to
pass the honest engine on the same store), and
``bench/checks/conform_obj_power.py`` counts how often, over seeds.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from typing import Any

from kvprobe.backends._obj_lookup import ChunkedLookup
from kvprobe.backends._obj_plan import Chunk
from kvprobe.backends.nixl_obj import NixlObjBackend
from kvprobe.testing.stateful import Target
from kvprobe.testing.stateful.objstore import nixl_obj_target

#: The share of requests the proxy answers 500 (each HEAD draws afresh, so a retry can pass).
ERROR_SHARE = 0.2
#: The conform ``--timeout`` of these runs: a manager's ``lookup_timeout_s`` of 5 s, the object
#: engine's own default deadline.  Under 1 s (a 0.75 s deadline) a fifth of HEADs failing
#: leaves the honest engine's stored keys unanswered in some runs on a loaded machine.
TIMEOUT_S = 5.0
#: How long the stale cache believes a HEAD that found the object.
HIT_TTL_S = 60.0


class FailedHeadReadAsAbsent(NixlObjBackend):
    """A query that failed reads as "not stored" for each of its keys, instead of unknown and retried."""

    def _query(self, names: Sequence[str]) -> list[Any]:
        try:
            return super()._query(names)
        except Exception:  # the defect: any failure taken for a 404
            return [None] * len(names)


class _MisplacingLookup(ChunkedLookup):
    """Writes a retried chunk's answers from the call's first key on, not from the chunk's own first key."""

    def _record(self, plan: Any, chunk: Chunk, outcome: Any) -> None:
        if outcome.error is None and chunk.attempt > 0:
            chunk = Chunk(0, chunk.stop - chunk.start, chunk.attempt)
        super()._record(plan, chunk, outcome)


class RetriedAnswersMisplaced(NixlObjBackend):
    """The answers of a retried part of a call are applied to the call's first keys (an offset dropped)."""

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self._engine.__class__ = _MisplacingLookup


class StaleHitCache(NixlObjBackend):
    """Remembers every object it found for ``HIT_TTL_S`` and answers it stored from memory.

    Its own ``remove`` forgets the key, so it looks careful; a block removed
    by another writer (another engine evicting it) still reads stored.
    """

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.hits: dict[bytes, float] = {}

    def batch_lookup(self, keys: Sequence[bytes], req_context: object) -> list[bool]:
        now = time.monotonic()
        asked = [k for k in keys if self.hits.get(k, -math.inf) <= now]
        found = dict(zip(asked, super().batch_lookup(asked, req_context), strict=True)) if asked else {}
        for key, stored in found.items():
            if stored:
                self.hits[key] = now + HIT_TTL_S
        return [found.get(k, True) for k in keys]

    def remove(self, key: bytes) -> None:
        self.hits.pop(key, None)
        super().remove(key)


#: name -> (class in this module, the defect in words)
OBJ_DEFECTS: dict[str, tuple[str, str]] = {
    "failed-head-absent": ("FailedHeadReadAsAbsent", "a failed HEAD read as not stored, not retried"),
    "retry-misplaced": ("RetriedAnswersMisplaced", "a retried part's answers applied to the call's first keys"),
    "stale-hit-cache": ("StaleHitCache", "a found object remembered 60 s; removed by another writer, still found"),
}


def defect_class(name: str) -> type[NixlObjBackend]:
    """The class of the defect named ``name`` in :data:`OBJ_DEFECTS` ("honest": the engine itself)."""
    if name == "honest":
        return NixlObjBackend
    found: type[NixlObjBackend] = globals()[OBJ_DEFECTS[name][0]]
    return found


def proxied_factory(make: type[NixlObjBackend], proxy_url: str, writer: Any) -> Callable[[], Target]:
    """A conform factory: ``make`` looking up through the proxy, the truth written by ``writer``.

    ``writer`` is a boto3 client straight to the store; the bucket and
    credentials come from the environment, as for ``nixl_obj_factory``.  The
    start-up check is off: it is not under test here, and a 500 at start-up
    would fail the run before the machine's first step.
    """

    def factory() -> Target:
        made = nixl_obj_target(make, endpoint_url=proxy_url, check=False)
        backend: Any = made.backend

        def store(key: bytes) -> None:
            writer.put_object(Bucket=backend.bucket, Key=backend.locate(key), Body=b"")

        def remove(key: bytes) -> None:
            writer.delete_object(Bucket=backend.bucket, Key=backend.locate(key))

        def close() -> None:
            try:
                listing = writer.list_objects_v2(Bucket=backend.bucket, Prefix=backend.prefix)
                for item in listing.get("Contents", []):
                    writer.delete_object(Bucket=backend.bucket, Key=item["Key"])
            finally:
                backend.close()

        return Target(backend, store, remove, close)

    return factory
