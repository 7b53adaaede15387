"""A vLLM-like request context with key positions, and scheduler scans over a drop-in tier."""

from __future__ import annotations

from typing import Any

GROUP = (0).to_bytes(4, "big")
TOKENS_PER_CHUNK = 16


def chain_keys(prompt: int, length: int, group: bytes = GROUP) -> list[bytes]:
    """``length`` keys shaped as vLLM's ``make_offload_key`` (an 8-byte hash, then the 4-byte group)."""
    return [prompt.to_bytes(4, "big") + i.to_bytes(4, "big") + group for i in range(length)]


class PositionedContext:
    """What the drop-in reads of vLLM 0.33's ``ReqContext``: ``req_id`` and the recorded key positions."""

    def __init__(self, req_id: str) -> None:
        self.req_id = req_id
        self._positions: dict[bytes, int] = {}

    def set_offload_key_position(self, key: bytes, end_token: int) -> None:
        self._positions[key] = end_token

    def get_offload_key_position(self, key: bytes) -> int | None:
        return self._positions.get(key)

    def record(self, keys: list[bytes]) -> None:
        """Positions as vLLM's ``update_offload_keys`` records them: the end token of each chunk."""
        for i, key in enumerate(keys):
            self.set_offload_key_position(key, (i + 1) * TOKENS_PER_CHUNK)


def maximal_prefix_scan(tier: Any, keys: list[bytes], ctx: Any) -> int | None:
    """vLLM 0.33's scan: count hits, stop at a miss, keep going on None; None if any answer was None."""
    hits = 0
    deferred = False
    for key in keys:
        answer = tier.lookup(key, ctx)
        if answer is True:
            hits += 1
        elif answer is None:
            deferred = True
        else:
            break
    return None if deferred else hits


def run_manual_step(tier: Any) -> None:
    """End of step with a manual worker: flush, then answer every submitted group from the tier's batch_lookup."""
    tier.flush()
    worker = tier.manager.worker
    while (batch := worker.take_batch()) is not None:
        for group in batch.groups:
            worker.complete(group)
    tier.drain_results()
