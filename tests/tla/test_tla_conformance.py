"""The TLA+ model takes exactly the phase transitions the lifecycle declares.

The transitions are derived from the state graphs TLC explores (see
graph_conformance.py): tla/default.cfg, where the verdict cache is off, and
tla/cache.cfg, where it is on.  They are compared with
kvprobe.spec.lifecycle.RULES (every row, the recall from the cache included)
and with the ``transitions`` machine built from them.  The negative tests
show the comparison notices a row added to or removed from either side.
"""

from __future__ import annotations

import pytest
from graph_conformance import Transition, compare, observed_transitions

from kvprobe.spec.lifecycle import (
    RECALL_RULE,
    RULES,
    Cached,
    Event,
    LookupPhase,
    Rule,
    Waiters,
    build_machine,
    machine_next,
)

pytestmark = pytest.mark.tlc

State = dict[str, object]
Graph = tuple[dict[str, State], list[tuple[str, str, str]]]


def _both(default_graph: Graph, cache_graph: Graph) -> set[Transition]:
    return observed_transitions(*default_graph).transitions | observed_transitions(*cache_graph).transitions


def test_model_takes_exactly_the_declared_transitions(default_graph: Graph) -> None:
    states, edges = default_graph
    observed = observed_transitions(states, edges)
    assert observed.edges > 10_000  # the whole default state space, not a stub
    assert observed.worker_phase_changes == []  # the worker never moves a phase itself
    unexplained, unwitnessed = compare(observed.transitions, RULES)
    assert unexplained == set(), f"the model takes transitions RULES does not declare: {unexplained}"
    # Without the cache nothing is ever cached: the recall is the one row left unwitnessed.
    assert unwitnessed == [RECALL_RULE], f"RULES declares transitions the model never takes: {unwitnessed}"


def test_with_the_cache_the_model_takes_every_row_recall_included(cache_graph: Graph) -> None:
    observed = observed_transitions(*cache_graph)
    assert observed.edges > 10_000
    assert observed.worker_phase_changes == []
    recalls = {t for t in observed.transitions if t.cached}
    assert recalls == {Transition(None, Event.LOOKUP, True, True, LookupPhase.RESOLVED)}
    unexplained, unwitnessed = compare(observed.transitions, RULES)
    assert unexplained == set(), f"the model takes transitions RULES does not declare: {unexplained}"
    assert unwitnessed == [], f"RULES declares transitions the cached model never takes: {unwitnessed}"


def test_a_recall_served_only_from_a_remembered_answer(cache_graph: Graph) -> None:
    # The cached fact is read off the recorded history; the model's guard is
    # the memory: every recall starts from a state that remembers the key.
    states, edges = cache_graph
    sources = [
        states[src]
        for src, action, dst in edges
        if action == "Lookup"
        and states[dst]["phase"] != states[src]["phase"]
        and states[dst]["phase"]["k1"] == "RESOLVED"
    ]  # type: ignore[index]
    assert sources and all(s["mem"]["k1"] != "none" for s in sources)  # type: ignore[index]


def test_transitions_machine_agrees_with_the_model(default_graph: Graph, cache_graph: Graph) -> None:
    machine = build_machine()
    for t in _both(default_graph, cache_graph):
        assert machine_next(machine, t.source, t.event, t.waiting, t.cached) is t.dest, t


def test_a_row_removed_from_the_declaration_is_noticed(default_graph: Graph, cache_graph: Graph) -> None:
    observed = _both(default_graph, cache_graph)
    assert compare(observed, RULES) == (set(), [])
    for index, rule in enumerate(RULES):
        fewer = RULES[:index] + RULES[index + 1 :]
        unexplained, _ = compare(observed, fewer)
        assert unexplained, f"removing {rule} went unnoticed"
        assert all(t.source is rule.source and t.event is rule.event and t.dest is rule.dest for t in unexplained)


def test_a_recall_declared_without_its_cache_guard_is_noticed(default_graph: Graph, cache_graph: Graph) -> None:
    # A recall row that fired whatever the cache held would claim the model
    # resolves uncached keys at once; the one-row-per-case check catches the
    # clash with the probe row, and so does the graph (no such step).
    loose = Rule(None, Event.LOOKUP, Waiters.SOME, LookupPhase.RESOLVED, "recall without a guard", Cached.ANY)
    rules = tuple(loose if r is RECALL_RULE else r for r in RULES)
    _, unwitnessed = compare(observed_transitions(*default_graph).transitions, rules)
    assert loose in unwitnessed
    unexplained, _ = compare(
        {Transition(None, Event.LOOKUP, True, False, LookupPhase.RESOLVED)} | _both(default_graph, cache_graph), RULES
    )
    assert unexplained == {Transition(None, Event.LOOKUP, True, False, LookupPhase.RESOLVED)}


def test_a_row_added_to_the_declaration_is_noticed(default_graph: Graph) -> None:
    observed = observed_transitions(*default_graph).transitions
    fake = Rule(LookupPhase.RESOLVED, Event.FLUSH, Waiters.SOME, LookupPhase.IN_FLIGHT, "re-probe a resolved key")
    _, unwitnessed = compare(observed, (*RULES, fake))
    assert unwitnessed == [RECALL_RULE, fake]


def test_a_transition_removed_from_the_model_is_noticed(default_graph: Graph) -> None:
    states, edges = default_graph
    # Drop every edge where MarkMiss reclaims an IN_FLIGHT orphan: the model
    # without that behaviour no longer witnesses the row.
    row = next(r for r in RULES if r.source is LookupPhase.IN_FLIGHT and r.event is Event.MARK_MISS and r.dest is None)

    def reclaims_in_flight(src: str, action: str, dst: str) -> bool:
        before, after = states[src]["phase"], states[dst]["phase"]
        return action == "MarkMiss" and any(before[k] == "IN_FLIGHT" and after[k] == "ABSENT" for k in before)  # type: ignore[attr-defined,index]

    kept = [edge for edge in edges if not reclaims_in_flight(*edge)]
    assert len(kept) < len(edges)
    unexplained, unwitnessed = compare(observed_transitions(states, kept).transitions, RULES)
    assert unexplained == set()
    assert unwitnessed == [RECALL_RULE, row]


def test_a_recall_removed_from_the_model_is_noticed(cache_graph: Graph) -> None:
    states, edges = cache_graph
    kept = [
        (s, a, d)
        for s, a, d in edges
        if not (a == "Lookup" and states[d]["phase"]["k1"] == "RESOLVED" and states[s]["phase"]["k1"] == "ABSENT")
    ]  # type: ignore[index]
    assert len(kept) < len(edges)
    unexplained, unwitnessed = compare(observed_transitions(states, kept).transitions, RULES)
    assert unexplained == set()
    assert unwitnessed == [RECALL_RULE]


def test_a_transition_added_to_the_model_is_noticed(default_graph: Graph) -> None:
    observed = observed_transitions(*default_graph).transitions
    extra = Transition(LookupPhase.PENDING, Event.DRAIN, True, False, LookupPhase.RESOLVED)  # a result never submitted
    unexplained, _ = compare({*observed, extra}, RULES)
    assert unexplained == {extra}
