"""The stateful machine in inferred mode: the shipped search passes, mutant searches are caught.

``lookup_machine(chain_mode="inferred")`` walks every chain with the
manager's search and compares each answer, ``inferred`` included, with the
reference model's (:func:`kvprobe.spec.model_chain.lookup_chain_inferred`),
and the whole state after every step.  Its tier is not prefix-closed (the
machine stores and removes keys at random), which is the broken assumption:
the model and the manager must still agree on what was probed, inferred,
refuted and re-walked exactly.  Each mutant core carries one defect of the
search; the machine must fail on every one (derandomized: 4 of 4 when
written).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis.stateful import run_state_machine_as_test
from test_chain_mutants import mutant_settings

from kvprobe.statemachine import AsyncLookupManager, ChainAnswer, HasReqId, LookupCore
from kvprobe.statemachine.inferred import next_position
from kvprobe.testing.stateful import lookup_machine


def search(core: LookupCore, keys: Sequence[bytes], ctx: HasReqId, *, verify_boundary: bool = True) -> ChainAnswer:
    """The search, rebuilt on ``core.lookup``: with ``verify_boundary=False`` it stops one probe short.

    A boundary not verified: once a single position separates the last key
    known stored from the first known NOT stored (or the chain's end), that
    position is counted stored without a probe.
    """
    lo, hi, looked, verified = -1, len(keys), 0, 0
    while hi > lo + 1:
        if not verify_boundary and hi == lo + 2:
            lo += 1
            break
        position = next_position(lo, hi, len(keys))
        verdict = LookupCore.lookup(core, keys[position], ctx)
        looked += 1
        if verdict is None:
            return ChainAnswer(lo + 1, hi < len(keys), True, looked, lo + 1 - verified)
        if verdict:
            lo, verified = position, verified + 1
        else:
            hi = position
    return ChainAnswer(lo + 1, hi < len(keys), False, looked, lo + 1 - verified)


class InfersPastAnUnverifiedBoundary(LookupCore):
    """Counts the last key before the first miss (or the chain's end) stored without probing it."""

    def lookup_chain(self, keys: Sequence[bytes], req_context: HasReqId) -> ChainAnswer:
        if not keys or not self.refuted_keys.keys().isdisjoint(keys):
            return super().lookup_chain(keys, req_context)
        self.drain()
        return search(self, list(keys), req_context, verify_boundary=False)


class SkipsTheExactRewalk(LookupCore):
    """Forgets the refuted keys: a chain whose inferred key failed to load is searched again."""

    def lookup_chain(self, keys: Sequence[bytes], req_context: HasReqId) -> ChainAnswer:
        self.refuted_keys.clear()
        return super().lookup_chain(keys, req_context)


class ProbesPastAKnownMiss(LookupCore):
    """After the search met a miss, also probes the key after it."""

    def lookup_chain(self, keys: Sequence[bytes], req_context: HasReqId) -> ChainAnswer:
        a = super().lookup_chain(keys, req_context)
        after = a.leading_hits + 1
        if a.stopped_at_miss and not a.pending and after < len(keys):
            LookupCore.lookup(self, keys[after], req_context)
        return a


class InferredCountedAsAnswered(LookupCore):
    """Reports no inferred hits (a caller would trust them as answered by the backend)."""

    def lookup_chain(self, keys: Sequence[bytes], req_context: HasReqId) -> ChainAnswer:
        a = super().lookup_chain(keys, req_context)
        return ChainAnswer(a.leading_hits, a.stopped_at_miss, a.pending, a.looked_up)


MUTANTS = [InfersPastAnUnverifiedBoundary, SkipsTheExactRewalk, ProbesPastAKnownMiss, InferredCountedAsAnswered]


def test_the_shipped_search_agrees_with_the_model() -> None:
    machine: Any = lookup_machine(chain_mode="inferred")
    run_state_machine_as_test(machine, settings=mutant_settings(300))


def test_the_inferred_machine_refuses_a_bad_mode() -> None:
    with pytest.raises(ValueError, match="chain_mode"):
        lookup_machine(chain_mode="guessed")


@pytest.mark.parametrize("core", MUTANTS, ids=[m.__name__ for m in MUTANTS])
def test_stateful_machine_catches_the_mutant_search(core: type[LookupCore]) -> None:
    manager = type(f"Manager{core.__name__}", (AsyncLookupManager,), {"core_class": core})
    machine = lookup_machine(manager_class=manager, chain_mode="inferred")
    with pytest.raises(AssertionError):
        run_state_machine_as_test(machine, settings=mutant_settings())
