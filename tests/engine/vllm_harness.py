"""Helpers shared by the drop-in tests: small tiers and a way to wait for the worker."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from kvprobe.integrations.vllm import AsyncLookupManager, ChainAnswer, LookupResult, as_lookup_result
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


def chain_retry_then_miss(m: AsyncLookupManager | KvprobeManager, keys: list[bytes], ctx: Any) -> None:
    """Four keys, the first two stored and the third not: one step's chain walks and their result kinds.

    Before the step nothing is known (RETRY, every key looked up); after it the
    walk stops at the third key (MISS, two leading hits, the fourth never looked up).
    """
    first = m.lookup_chain(keys, ctx)
    assert first == ChainAnswer(0, False, True, 4)
    assert as_lookup_result(first) is LookupResult.RETRY
    m.flush()
    settle(m)
    done = m.lookup_chain(keys, ctx)
    assert done == ChainAnswer(2, True, False, 3)
    assert as_lookup_result(done) is LookupResult.MISS


class ScriptedTier:
    """A mixin for a tier on any base: contents a set, every batch_lookup recorded as (keys, req_id).

    ``gate`` (an Event) holds each call until it is set (only the calls for
    one of ``gated_keys``, when that is not None); ``answer`` (keys -> result)
    replaces the set's answer.  Put it before the base class:
    ``class T(ScriptedTier, Base)``.
    """

    def __init__(self, tier_type: str = "set", stored: Iterable[bytes] = (), **extras: Any) -> None:
        super().__init__(tier_type, **extras)  # type: ignore[call-arg]  # the base's constructor
        self.stored = set(stored)
        self.calls: list[tuple[list[bytes], str]] = []
        self.gate: threading.Event | None = None
        self.gated_keys: set[bytes] | None = None
        self.answer: Callable[[list[bytes]], Any] | None = None

    def batch_lookup(self, keys: list[bytes], req_context: Any) -> Any:
        self.calls.append((list(keys), req_context.req_id))
        if self.gate is not None and (self.gated_keys is None or self.gated_keys.intersection(keys)):
            self.gate.wait(10)
        if self.answer is not None:
            return self.answer(keys)
        return [k in self.stored for k in keys]


class SetTier(ScriptedTier, AsyncLookupManager):
    """A scripted tier on the drop-in."""


def hold_in_flight(tier: Any, key: bytes, ctx: Any) -> threading.Event:
    """Look ``key`` up and flush, with the tier's calls held until the returned gate is set."""
    tier.gate = threading.Event()
    tier.lookup(key, ctx)
    tier.flush()
    return tier.gate


def step_verdicts(tier: Any, key: bytes, ctx: Any, steps: int = 20) -> list[bool | None]:
    """``steps`` scheduler steps (lookup, flush, a short pause); the verdict of each step's lookup."""
    verdicts = []
    for _ in range(steps):
        verdicts.append(tier.lookup(key, ctx))
        tier.flush()
        time.sleep(0.005)
    return verdicts


def raise_after(n: int, verdicts: list[bool]) -> Iterator[bool]:
    """A lazily raising result: ``n`` verdicts, then an error while it is iterated."""
    yield from verdicts[:n]
    raise OSError("the tier went away while the result was read")
