"""The declaration, the compiled table and the transitions machine agree."""

from __future__ import annotations

import itertools
import sys

import pytest

from kvprobe.spec.lifecycle import (
    ABSENT,
    ALL_PHASES,
    NEXT_PHASE,
    RECALL_RULE,
    RULES,
    Cached,
    Event,
    LifecycleError,
    LookupPhase,
    Rule,
    Waiters,
    build_machine,
    compile_rules,
    machine_next,
    to_dot,
    validate,
)

P, F, R = LookupPhase.PENDING, LookupPhase.IN_FLIGHT, LookupPhase.RESOLVED


def test_machine_and_compiled_table_agree_on_every_case() -> None:
    machine = build_machine()
    checked = 0
    for phase, event, has_waiters in itertools.product(ALL_PHASES, Event, (True, False)):
        expected = NEXT_PHASE.get((phase, event, has_waiters), "invalid")
        assert machine_next(machine, phase, event, has_waiters) == expected, (phase, event, has_waiters)
        checked += 1
    assert checked == len(ALL_PHASES) * len(Event) * 2


def test_machine_disagrees_with_a_table_missing_a_row() -> None:
    # The comparison above can fail: a machine built from fewer rules differs.
    machine = build_machine(RULES[1:])
    assert machine_next(machine, ABSENT, Event.LOOKUP, True) == "invalid"
    assert NEXT_PHASE[(ABSENT, Event.LOOKUP, True)] is P


@pytest.mark.parametrize(
    ("case", "dest"),
    [
        ((ABSENT, Event.LOOKUP, True), P),
        ((P, Event.FLUSH, True), F),
        ((P, Event.CLEANUP, False), ABSENT),
        ((F, Event.CLEANUP, False), F),
        ((F, Event.DRAIN, True), R),
        ((F, Event.DRAIN, False), ABSENT),
        ((F, Event.MARK_MISS, True), R),
        ((R, Event.DRAIN, True), R),
        ((R, Event.CLEANUP, False), ABSENT),
        ((F, Event.SHUTDOWN, False), ABSENT),
    ],
)
def test_design_table_rows(case: tuple[LookupPhase | None, Event, bool], dest: LookupPhase | None) -> None:
    assert NEXT_PHASE[case] is dest


def test_every_rule_is_compiled_and_nothing_else() -> None:
    uncached = [r for r in RULES if r.cached is not Cached.YES]
    expected = sum(1 if r.waiters is not Waiters.ANY else 0 for r in uncached) + 2 * sum(
        1 for r in uncached if r.waiters is Waiters.ANY
    )
    assert len(NEXT_PHASE) == expected == len(compile_rules(RULES))


def test_the_recall_is_a_row_of_the_table_and_differs_only_when_cached() -> None:
    assert RECALL_RULE in RULES
    assert (RECALL_RULE.source, RECALL_RULE.event, RECALL_RULE.dest) == (ABSENT, Event.LOOKUP, R)
    cached = compile_rules(RULES, cached=True)
    assert {case for case in cached if cached[case] is not NEXT_PHASE.get(case)} == {(ABSENT, Event.LOOKUP, True)}
    machine = build_machine()
    assert machine_next(machine, ABSENT, Event.LOOKUP, True, cached=True) is R
    assert machine_next(machine, ABSENT, Event.LOOKUP, True, cached=False) is P
    assert machine_next(machine, F, Event.LOOKUP, True, cached=True) is F


def test_validate_rejects_a_recall_without_its_cache_guard() -> None:
    loose = Rule(ABSENT, Event.LOOKUP, Waiters.SOME, R, "recall whatever the cache holds")
    with pytest.raises(LifecycleError, match="both claim"):
        validate((*(r for r in RULES if r is not RECALL_RULE), loose))


def test_the_machine_names_the_extra_when_transitions_is_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "transitions", None)  # import fails as if not installed
    with pytest.raises(ImportError, match=r"kvprobe\[dev\]"):
        build_machine()
    with pytest.raises(ImportError, match=r"machine_next.*kvprobe\[dev\]"):
        machine_next(object(), ABSENT, Event.LOOKUP, True)


def test_validate_rejects_a_case_declared_twice() -> None:
    clash = Rule(P, Event.FLUSH, Waiters.ANY, R, "clash")
    with pytest.raises(LifecycleError, match="both claim"):
        validate((*RULES, clash))


def test_validate_rejects_an_unreachable_phase() -> None:
    without_flush = tuple(r for r in RULES if r.dest is not F)
    with pytest.raises(LifecycleError, match=r"not reachable.*IN_FLIGHT"):
        validate(without_flush)


def test_validate_rejects_a_trap_phase() -> None:
    no_exit_from_resolved = tuple(r for r in RULES if not (r.source is R and r.dest is ABSENT))
    with pytest.raises(LifecycleError, match="trap phase RESOLVED"):
        validate(no_exit_from_resolved)


def test_validate_rejects_a_dead_initial_phase() -> None:
    with pytest.raises(LifecycleError, match="initial phase"):
        validate(tuple(r for r in RULES if r.source is not ABSENT))


def test_diagram_is_generated_from_every_rule() -> None:
    dot = to_dot()
    for rule in RULES:
        assert rule.event.value in dot
    assert "IN_FLIGHT -> RESOLVED" in dot and "PENDING -> ABSENT" in dot
