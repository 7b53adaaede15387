"""The shipped stateful machine, run through the drop-in.

The machine builds ``manager_class(backend, name=, worker=, lookup_timeout_s=,
trace=)`` and drives lookup / flush / drain_results / cleanup / mark_miss /
shutdown.  ``ThroughDropIn`` sends every one of those calls to a drop-in
tier (a subclass of :class:`kvprobe.integrations.vllm.AsyncLookupManager`
whose ``batch_lookup`` asks the machine's backend), and reads what the
machine observes (core, worker, stats, phase, len) from the kvprobe manager
the drop-in runs on.  The machine itself is not modified.

Three calls follow vLLM 0.33's contract, where the machine's model is
kvprobe's own, and reach the drop-in only where the two agree:
``mark_miss`` sends keys that are RESOLVED or have no state through the
drop-in and keys still PENDING or IN_FLIGHT (which vLLM 0.33 and the drop-in
leave to their own result) to the kvprobe manager underneath;
``drain_results`` (None in vLLM) and ``shutdown`` (vLLM 0.33's waits for the
submitted groups and applies them, then keeps answering) go to that manager.
test_vllm_contract.py tests those three on the drop-in itself.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from hypothesis import settings

from kvprobe.backends.base import Backend
from kvprobe.integrations.vllm import AsyncLookupManager as VllmBase
from kvprobe.spec.lifecycle import LookupPhase
from kvprobe.statemachine import AsyncLookupManager
from kvprobe.statemachine.core import LookupCore
from kvprobe.statemachine.types import ChainAnswer, HasReqId, Stats
from kvprobe.statemachine.workers import Worker
from kvprobe.testing.stateful import lookup_machine


class _Tier(VllmBase):
    """A vLLM-style tier: batch_lookup asks the backend the machine scripts."""

    def __init__(self, backend: Backend, tier_type: str, **extras: Any) -> None:
        super().__init__(tier_type=tier_type, **extras)
        self._backend = backend

    def batch_lookup(self, keys: list[bytes], req_context: Any) -> Iterable[bool]:
        return self._backend.batch_lookup(keys, req_context)


class ThroughDropIn(AsyncLookupManager):
    """kvprobe's manager surface, every action routed through the drop-in."""

    def __init__(self, backend: Backend, *, name: str = "tier", **extras: Any) -> None:
        # Not super().__init__: the drop-in builds (and owns) the kvprobe manager.
        self.tier = _Tier(backend, name, **extras)
        self.inner = self.tier.manager

    def lookup(self, key: bytes, req_context: HasReqId) -> bool | None:
        return self.tier.lookup(key, req_context)

    def lookup_chain(self, keys: Sequence[bytes], req_context: HasReqId) -> ChainAnswer:
        # vLLM's surface has no chain lookup: it goes to the manager the
        # drop-in owns, which its other methods share.
        return self.inner.lookup_chain(keys, req_context)

    def flush(self) -> None:
        self.tier.flush()

    def drain_results(self) -> int:
        # The machine counts the groups applied; vLLM's drain_results returns None.
        return self.inner.drain_results()

    def cleanup(self, req_id: str) -> None:
        self.tier.cleanup(req_id)

    def mark_miss(self, keys: Iterable[bytes]) -> None:
        keys = list(keys)
        states = self.inner.core.states
        unresolved = [k for k in keys if (s := states.get(k)) is not None and s.phase is not LookupPhase.RESOLVED]
        self.tier.mark_miss([k for k in keys if k not in unresolved])
        if unresolved:
            self.inner.mark_miss(unresolved)

    def shutdown(self) -> None:
        self.inner.shutdown()

    def __len__(self) -> int:
        return len(self.tier)

    def phase(self, key: bytes) -> LookupPhase | None:
        return self.inner.phase(key)

    @property
    def stats(self) -> Stats:
        return self.tier.stats

    @property
    def closed(self) -> bool:
        return self.inner.closed

    @property
    def core(self) -> LookupCore:
        return self.inner.core

    @property  # type: ignore[override]
    def worker(self) -> Worker:
        return self.inner.worker


TestDropInManualWorker = lookup_machine(manager_class=ThroughDropIn).TestCase

_Threaded = lookup_machine(manager_class=ThroughDropIn, worker="thread")
_Threaded.TestCase.settings = settings(settings(), max_examples=max(10, settings().max_examples // 4))
TestDropInThreadedWorker = _Threaded.TestCase
