"""A toy scheduler loop shared by the per-backend examples.

Each step: new requests arrive; every waiting request looks up its blocks
(``None`` = not known yet, ask again next step); a request whose verdicts are
all known is scheduled and "loads" its longest stored prefix; one load fails
and is reported with ``mark_miss``; finished requests are cleaned up; the
step ends with ``flush``.  Nothing here blocks on the tier.

Keys are vLLM offload keys, built by :func:`block_key` (the one key encoding
of every example, and of ``docs/backends.md``).
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field
from typing import Any

from kvprobe import AsyncLookupManager, ReqContext


def block_key(block_hash: bytes, group: int = 0) -> bytes:
    """A vLLM offload key: the block hash, then the KV-cache group index as 4 big-endian bytes.

    (vLLM's ``make_offload_key``; the backends keep the group suffix in the
    block's file or object name.)
    """
    return block_hash + group.to_bytes(4, "big")


@dataclass
class Request:
    req_id: str
    keys: list[bytes]
    steps_left: int = 3  # steps it runs once scheduled
    prefix_hits: int | None = None
    load_failed: bool = False
    ctx: ReqContext = field(init=False)

    def __post_init__(self) -> None:
        self.ctx = ReqContext(self.req_id)


def make_requests(rng: random.Random, count: int, blocks: int) -> list[Request]:
    """Requests sharing a common prefix (a system prompt) plus their own blocks."""
    shared = [block_key(rng.randbytes(32)) for _ in range(blocks // 2)]
    out = []
    for i in range(count):
        own = [block_key(rng.randbytes(32)) for _ in range(blocks - len(shared))]
        out.append(Request(f"req-{i}", shared + own))
    return out


def run(
    backend: Any, *, writer: Any = None, requests: int = 8, blocks: int = 64, seed: int = 0, max_s: float = 60.0
) -> None:
    """Drive ``backend`` through a manager; store part of the blocks first (ground truth).

    ``writer`` stores the blocks (default: ``backend`` itself).
    """
    rng = random.Random(seed)
    incoming = make_requests(rng, requests, blocks)
    for req in incoming:
        # The shared prefix and the first few own blocks are in the tier.
        for key in req.keys[: blocks // 2 + rng.randrange(0, 8)]:
            (writer or backend).store(key, b"kv-block")
    waiting: list[Request] = []
    running: list[Request] = []
    failed_once = False
    started = time.monotonic()
    with AsyncLookupManager(backend, name=type(backend).__name__, lookup_timeout_s=10.0) as m:
        step = 0
        while (incoming or waiting or running) and time.monotonic() - started < max_s:
            step += 1
            if incoming and step % 2 == 0:
                waiting.append(incoming.pop())
            for req in list(waiting):
                verdicts = [m.lookup(k, req.ctx) for k in req.keys]
                if None in verdicts:
                    continue  # not known yet: ask again next step
                req.prefix_hits = next((i for i, v in enumerate(verdicts) if not v), len(verdicts))
                waiting.remove(req)
                running.append(req)
                print(f"step {step:2d}: {req.req_id} scheduled, {req.prefix_hits}/{len(req.keys)} blocks from the tier")
                if not failed_once and req.prefix_hits:
                    # Loading the last block of the prefix failed (e.g. it was
                    # evicted meanwhile): tell the manager, so every request
                    # asking for it now gets a MISS instead of a stale HIT.
                    failed_once = True
                    req.load_failed = True
                    lost = req.keys[req.prefix_hits - 1]
                    m.mark_miss([lost])
                    print(f"          loading one block failed; mark_miss -> lookup now says {m.lookup(lost, req.ctx)}")
            for req in list(running):
                req.steps_left -= 1
                if req.steps_left == 0:
                    running.remove(req)
                    m.cleanup(req.req_id)
            m.flush()  # end of step: submit this step's lookups as one batch
            time.sleep(0.01)  # the rest of the step (the model's forward pass)
        print(f"done in {time.monotonic() - started:.2f} s; states held: {len(m)}; stats: {m.stats}")
