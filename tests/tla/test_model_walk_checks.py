"""The inferred walk's Python mirrors hold on every state TLC explores, and see a slip (issue 41).

``InferredAnswerNoKnownMiss`` and ``RefutedWalkedExactly``
(:mod:`kvprobe.spec.model_walk_checks`) are evaluated on every state of
``tla/inferred-cache.cfg``'s explored graph (one request, no symmetry; the
chain is ``<<k1, k2>>``, the order TLC's CHOOSE gives ``ChainOfKeys`` for
``Keys = {k1, k2}``).  Each must hold there, and each must fail on some
state once the slip it is written against is made: the model's search
ignoring an earlier known miss (it probes the chain's last key first), and
refuted keys dropped (as a cleanup that drops them would).
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from model_replay import walk_facts

from kvprobe.spec import model_chain
from kvprobe.spec.model_walk_checks import WALK_INVARIANTS, InferredAnswerNoKnownMiss, RefutedWalkedExactly, WalkFacts

pytestmark = pytest.mark.tlc

Graph = tuple[dict[str, dict[str, object]], list[tuple[str, str, str]]]
CHAIN = ("k1", "k2")


def facts_of(graph: Graph) -> list[WalkFacts]:
    return [walk_facts(state, CHAIN, inferred=True) for state in graph[0].values()]


def test_the_mirrors_hold_on_every_explored_state(inferred_cache_graph: Graph) -> None:
    facts = facts_of(inferred_cache_graph)
    assert len(facts) > 1000
    for name, holds in WALK_INVARIANTS.items():
        broken = [f for f in facts if not holds(f)]
        assert not broken, f"{name} fails on {len(broken)} states; first: {broken[0]}"
    # Not vacuous: some states have a decided search that infers, some a failed load.
    assert any(f.failed_loads for f in facts)


def test_a_search_that_ignores_an_earlier_miss_is_seen(
    inferred_cache_graph: Graph, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The slip: the search probes the last key first, so a known hit there
    # decides it whatever the request knows of the keys before.
    correct = model_chain.search_position
    monkeypatch.setattr(
        model_chain, "search_position", lambda lo, hi, n: n - 1 if lo < 0 and hi == n else correct(lo, hi, n)
    )
    assert any(not InferredAnswerNoKnownMiss(f) for f in facts_of(inferred_cache_graph))


def test_refuted_keys_dropped_are_seen(inferred_cache_graph: Graph) -> None:
    # The slip: refuted emptied (as a cleanup that drops the request's refuted keys);
    # the history of failed loads keeps them, so a walk that infers again is seen.
    slipped = [replace(f, refuted=frozenset()) for f in facts_of(inferred_cache_graph)]
    assert any(not RefutedWalkedExactly(f) for f in slipped)
