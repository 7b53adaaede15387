"""Helpers shared by the drop-in tests: small tiers and a way to wait for the worker."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from kvprobe.integrations.vllm import AsyncLookupManager
from kvprobe.statemachine import AsyncLookupManager as KvprobeManager


def settle(m: AsyncLookupManager | KvprobeManager, timeout_s: float = 10.0) -> None:
    """Wait until the worker has answered every submitted group, then apply the answers.

    ``m`` is a drop-in or a kvprobe manager.
    """
    core = (m.manager if isinstance(m, AsyncLookupManager) else m).core
    deadline = time.monotonic() + timeout_s
    while len(core.inbox) < len(core.outstanding):
        if time.monotonic() > deadline:
            raise AssertionError(f"the worker answered {len(core.inbox)} of {len(core.outstanding)} groups")
        time.sleep(0.001)
    m.drain_results()


class SetTier(AsyncLookupManager):
    """A tier whose contents are a set; records every batch_lookup call as (keys, req_id)."""

    def __init__(self, tier_type: str = "set", stored: Iterable[bytes] = (), **extras: Any) -> None:
        super().__init__(tier_type, **extras)
        self.stored = set(stored)
        self.calls: list[tuple[list[bytes], str]] = []
        self.gate: threading.Event | None = None
        self.answer: Callable[[list[bytes]], Any] | None = None

    def batch_lookup(self, keys: list[bytes], req_context: Any) -> Any:
        self.calls.append((list(keys), req_context.req_id))
        if self.gate is not None:
            self.gate.wait(10)
        if self.answer is not None:
            return self.answer(keys)
        return [k in self.stored for k in keys]


def raise_after(n: int, verdicts: list[bool]) -> Iterator[bool]:
    """A lazily raising result: ``n`` verdicts, then an error while it is iterated."""
    yield from verdicts[:n]
    raise OSError("the tier went away while the result was read")
