"""A scheduler-like loop over a real backend, and key generators."""

from __future__ import annotations

import random
import time
from collections.abc import Iterable, Mapping, Sequence

from kvprobe.statemachine import AsyncLookupManager, ReqContext


def block_keys(rng: random.Random, hashes: int, groups: int = 1) -> list[bytes]:
    """vLLM-like keys: a 32-byte hash followed by a 4-byte group index."""
    out = []
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
