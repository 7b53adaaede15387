"""The TLA+ model takes exactly the phase transitions the lifecycle declares.

The transitions are derived from the state graph TLC explores for
tla/default.cfg (see graph_conformance.py) and compared with
kvprobe.spec.lifecycle.RULES and with the ``transitions`` machine built from
them.  The negative tests show the comparison notices a row added to or
removed from either side.
"""

from __future__ import annotations

import pytest
from graph_conformance import compare, observed_transitions

from kvprobe.spec.lifecycle import RULES, Event, LookupPhase, Rule, Waiters, build_machine, machine_next

pytestmark = pytest.mark.tlc

State = dict[str, object]
Graph = tuple[dict[str, State], list[tuple[str, str, str]]]


def test_model_takes_exactly_the_declared_transitions(default_graph: Graph) -> None:
    states, edges = default_graph
    observed = observed_transitions(states, edges)
    assert observed.edges > 10_000  # the whole default state space, not a stub
    assert observed.worker_phase_changes == []  # the worker never moves a phase itself
    unexplained, unwitnessed = compare(observed.transitions, RULES)
    assert unexplained == set(), f"the model takes transitions RULES does not declare: {unexplained}"
    assert unwitnessed == [], f"RULES declares transitions the model never takes: {unwitnessed}"


def test_transitions_machine_agrees_with_the_model(default_graph: Graph) -> None:
    states, edges = default_graph
    machine = build_machine()
    for source, event, waiting, dest in observed_transitions(states, edges).transitions:
        assert machine_next(machine, source, event, waiting) is dest, (source, event, waiting, dest)


def test_a_row_removed_from_the_declaration_is_noticed(default_graph: Graph) -> None:
    observed = observed_transitions(*default_graph).transitions
    for index, rule in enumerate(RULES):
        fewer = RULES[:index] + RULES[index + 1 :]
        unexplained, _ = compare(observed, fewer)
        assert unexplained, f"removing {rule} went unnoticed"
        assert all(t[0] is rule.source and t[1] is rule.event and t[3] is rule.dest for t in unexplained)


def test_a_row_added_to_the_declaration_is_noticed(default_graph: Graph) -> None:
    observed = observed_transitions(*default_graph).transitions
    fake = Rule(LookupPhase.RESOLVED, Event.FLUSH, Waiters.SOME, LookupPhase.IN_FLIGHT, "re-probe a resolved key")
    _, unwitnessed = compare(observed, (*RULES, fake))
    assert unwitnessed == [fake]


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
    assert unwitnessed == [row]


def test_a_transition_added_to_the_model_is_noticed(default_graph: Graph) -> None:
    observed = observed_transitions(*default_graph).transitions
    extra = (LookupPhase.PENDING, Event.DRAIN, True, LookupPhase.RESOLVED)  # a result for a probe never submitted
    unexplained, _ = compare({*observed, extra}, RULES)
    assert unexplained == {extra}
