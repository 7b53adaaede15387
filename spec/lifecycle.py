"""The probe lifecycle, declared once.

Everything that decides how one key's probe state moves between phases lives
in this file, as data: :data:`RULES`.  Nothing else in kvprobe may restate it.

* The hot path of :mod:`kvprobe.statemachine` advances phases through
  :data:`NEXT_PHASE`, a table compiled from :data:`RULES` at import.
* :func:`build_machine` builds one ``transitions`` machine from the same rules;
  it validates them, draws the diagram, and is compared with the compiled
  table by the tests.
* The TLA+ model in ``tla/`` uses the same phase and event names (the event
  values are the TLA+ action names); a test compares the phase transitions TLC
  explores with :data:`RULES`.

Theory of operation.  A probe state exists per key while some request waits on
it or a probe for it is in flight.  ``ABSENT`` is the pseudo-phase "no state".
The one fact a rule may depend on besides phase and event is whether, *after*
the event, any request still waits on the probe (:class:`Waiters`): that is
what separates "reclaim" from "keep".  Rules that would leave a RESOLVED or
PENDING state nobody waits on send it to ABSENT instead (an orphan is
reclaimed); an IN_FLIGHT state nobody waits on is kept, so that a new request
can join the probe rather than start a second one.

The declaration is validated at import (:func:`validate`): exactly one
initial phase, every phase reachable from it, no trap phase, no (phase, event,
waiters) triple declared twice.  A broken declaration raises
:class:`LifecycleError` naming the offending rule.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = [
    "ABSENT",
    "ALL_PHASES",
    "INITIAL",
    "NEXT_PHASE",
    "RECALL_RULE",
    "RULES",
    "Event",
    "LifecycleError",
    "LookupPhase",
    "Phase",
    "Rule",
    "Waiters",
    "build_machine",
    "compile_rules",
    "machine_next",
    "phase_name",
    "to_dot",
    "validate",
]


class LookupPhase(enum.Enum):
    """Phase of a key's probe state (identity-compared sentinels)."""

    PENDING = "PENDING"
    """Asked for this step; will be submitted at the next flush."""
    IN_FLIGHT = "IN_FLIGHT"
    """Submitted to the worker; its verdict has not been applied yet."""
    RESOLVED = "RESOLVED"
    """The verdict is known (``True`` stored, ``False`` not stored)."""

    def __repr__(self) -> str:
        return f"LookupPhase.{self.name}"


# ``None`` stands for "no probe state" in every table; ABSENT names it.
ABSENT: None = None
Phase = LookupPhase | None
INITIAL: Phase = ABSENT


def phase_name(phase: Phase) -> str:
    """The TLA+/diagram name of a phase (``ABSENT`` for no state)."""
    return "ABSENT" if phase is None else phase.value


class Event(enum.Enum):
    """What can happen to a key's probe.  Values are the TLA+ action names."""

    LOOKUP = "Lookup"
    FLUSH = "Flush"
    DRAIN = "Drain"  # a result (verdict or failure) of this key's generation is applied
    CLEANUP = "Cleanup"
    MARK_MISS = "MarkMiss"
    SHUTDOWN = "Shutdown"


class Waiters(enum.Enum):
    """Whether any request waits on the probe after the event."""

    SOME = "some"
    NONE = "none"
    ANY = "any"  # the rule does not depend on it

    def admits(self, has_waiters: bool) -> bool:
        """Whether this guard holds for the given fact."""
        if self is Waiters.ANY:
            return True
        return has_waiters is (self is Waiters.SOME)


@dataclass(frozen=True)
class Rule:
    """One row of the lifecycle table."""

    source: Phase
    event: Event
    waiters: Waiters
    dest: Phase
    note: str


P, F, R = LookupPhase.PENDING, LookupPhase.IN_FLIGHT, LookupPhase.RESOLVED
E = Event
SOME, NONE, ANY = Waiters.SOME, Waiters.NONE, Waiters.ANY

#: The lifecycle table (docs/lifecycle.md), one row per guarded transition.
RULES: tuple[Rule, ...] = (
    Rule(ABSENT, E.LOOKUP, SOME, P, "new generation; joins this step's batch"),
    Rule(P, E.LOOKUP, SOME, P, "request added; no second batch entry"),
    Rule(F, E.LOOKUP, SOME, F, "joins the in-flight probe: no second probe"),
    Rule(R, E.LOOKUP, SOME, R, "verdict returned"),
    Rule(P, E.FLUSH, SOME, F, "submitted exactly once"),
    Rule(P, E.CLEANUP, SOME, P, "another request still waits"),
    Rule(P, E.CLEANUP, NONE, ABSENT, "last request left: never probed"),
    Rule(F, E.CLEANUP, SOME, F, "another request still waits"),
    Rule(F, E.CLEANUP, NONE, F, "kept, so a new request can join the probe"),
    Rule(R, E.CLEANUP, SOME, R, "another request still waits"),
    Rule(R, E.CLEANUP, NONE, ABSENT, "last request left: reclaimed"),
    Rule(P, E.MARK_MISS, SOME, R, "forced MISS; never submitted"),
    Rule(F, E.MARK_MISS, SOME, R, "forced MISS; the late result is dropped"),
    Rule(F, E.MARK_MISS, NONE, ABSENT, "nobody waits: orphan reclaimed"),
    Rule(R, E.MARK_MISS, SOME, R, "forced MISS"),
    Rule(F, E.DRAIN, SOME, R, "verdict applied (a failure applies MISS)"),
    Rule(F, E.DRAIN, NONE, ABSENT, "nobody waits: orphan reclaimed"),
    Rule(R, E.DRAIN, SOME, R, "second result of the generation dropped"),
    Rule(P, E.SHUTDOWN, ANY, ABSENT, "reclaimed by shutdown"),
    Rule(F, E.SHUTDOWN, ANY, ABSENT, "reclaimed by shutdown"),
    Rule(R, E.SHUTDOWN, ANY, ABSENT, "reclaimed by shutdown"),
)
del P, F, R, E, SOME, NONE, ANY


class LifecycleError(ValueError):
    """The lifecycle declaration is inconsistent (raised at import)."""


ALL_PHASES: tuple[Phase, ...] = (ABSENT, *LookupPhase)


def validate(rules: Iterable[Rule]) -> None:
    """Check a lifecycle declaration, as python-statemachine does for its machines.

    Raises:
        LifecycleError: two rules claim the same (phase, event, waiters) case,
            the initial phase has no way out, a phase cannot be reached from
            the initial phase, or a phase cannot get back to ABSENT (a trap:
            its states would leak).
    """
    rules = tuple(rules)
    seen: dict[tuple[Phase, Event, bool], Rule] = {}
    for rule in rules:
        for has_waiters in (True, False):
            if not rule.waiters.admits(has_waiters):
                continue
            case = (rule.source, rule.event, has_waiters)
            if case in seen:
                raise LifecycleError(f"rules {seen[case]} and {rule} both claim case {case}")
            seen[case] = rule
    edges: dict[Phase, set[Phase]] = {p: set() for p in ALL_PHASES}
    for rule in rules:
        edges[rule.source].add(rule.dest)
    if not edges[INITIAL] - {INITIAL}:
        raise LifecycleError("the initial phase ABSENT has no rule leading out of it")
    reached = _closure(INITIAL, edges)
    unreachable = [phase_name(p) for p in ALL_PHASES if p not in reached]
    if unreachable:
        raise LifecycleError(f"phases not reachable from ABSENT: {unreachable}")
    for phase in ALL_PHASES:
        if INITIAL not in _closure(phase, edges):
            raise LifecycleError(f"trap phase {phase_name(phase)}: no rule path leads back to ABSENT")


def _closure(start: Phase, edges: Mapping[Phase, set[Phase]]) -> set[Phase]:
    reached = {start}
    frontier = [start]
    while frontier:
        for nxt in edges[frontier.pop()]:
            if nxt not in reached:
                reached.add(nxt)
                frontier.append(nxt)
    return reached


def compile_rules(rules: Iterable[Rule]) -> dict[tuple[Phase, Event, bool], Phase]:
    """Compile rules into ``{(phase, event, has_waiters_after): next_phase}``.

    Cases absent from the result are events that cannot happen to a state in
    that phase (the core never asks for them).
    """
    table: dict[tuple[Phase, Event, bool], Phase] = {}
    for rule in rules:
        for has_waiters in (True, False):
            if rule.waiters.admits(has_waiters):
                table[(rule.source, rule.event, has_waiters)] = rule.dest
    return table


validate(RULES)

#: The Lookup of a key without a state whose verdict the opt-in verdict
#: cache still remembers (docs/cache.md): the same case as RULES' first row,
#: under a guard RULES does not index (a fresh remembered backend answer for
#: the key), so it is declared apart.  Without a cache it never happens.
RECALL_RULE = Rule(
    ABSENT,
    Event.LOOKUP,
    Waiters.SOME,
    LookupPhase.RESOLVED,
    "remembered backend answer within its TTL: resolved at once, never probed",
)

#: The hot path's view of :data:`RULES`.
NEXT_PHASE: dict[tuple[Phase, Event, bool], Phase] = compile_rules(RULES)


# --- the ``transitions`` machine -------------------------------------------
#
# Built from RULES on demand (building costs milliseconds; a model per probe
# would cost tens of microseconds per key, which is why the hot path uses
# NEXT_PHASE instead).  The guard is the model's ``waiters_after`` attribute.


class _ProbeModel:
    def __init__(self, phase: Phase) -> None:
        self.state = phase_name(phase)
        self.waiters_after = True

    def has_waiters(self) -> bool:
        return self.waiters_after

    def has_no_waiters(self) -> bool:
        return not self.waiters_after


def build_machine(rules: Iterable[Rule] = RULES) -> Any:
    """Build a ``transitions.Machine`` whose triggers are the event values.

    The model is created in the ABSENT state; drive it with
    :func:`machine_next`.  Raises ``ImportError`` if ``transitions`` is missing.
    """
    from transitions import Machine

    model = _ProbeModel(INITIAL)
    machine = Machine(
        model=model,
        states=[phase_name(p) for p in ALL_PHASES],
        initial=phase_name(INITIAL),
        auto_transitions=False,
        ignore_invalid_triggers=False,
    )
    for rule in rules:
        conditions: list[str | Callable[..., bool | None]] = []
        if rule.waiters is not Waiters.ANY:
            conditions.append("has_waiters" if rule.waiters is Waiters.SOME else "has_no_waiters")
        machine.add_transition(
            trigger=rule.event.value,
            source=phase_name(rule.source),
            dest=phase_name(rule.dest),
            conditions=conditions,
        )
    return machine


def machine_next(machine: Any, phase: Phase, event: Event, has_waiters: bool) -> Phase | str:
    """Fire ``event`` on the machine from ``phase``; return the next phase.

    Returns the string ``"invalid"`` when no rule applies (the machine raises
    ``MachineError`` or its guard refuses).
    """
    from transitions import MachineError

    model = machine.model
    machine.set_state(phase_name(phase), model)
    model.waiters_after = has_waiters
    try:
        fired = model.trigger(event.value)
    except MachineError:
        return "invalid"
    if not fired:
        return "invalid"
    name = model.state
    return ABSENT if name == "ABSENT" else LookupPhase(name)


def to_dot(rules: Iterable[Rule] = RULES) -> str:
    """Graphviz source of the lifecycle diagram, generated from the rules."""
    lines = ["digraph lifecycle {", "  rankdir=LR;", '  node [shape=box, style=rounded, fontname="Helvetica"];']
    lines.append('  ABSENT [shape=circle, label="ABSENT"];')
    grouped: dict[tuple[str, str], list[str]] = {}
    for rule in rules:
        guard = "" if rule.waiters is Waiters.ANY else f" [{rule.waiters.value}]"
        grouped.setdefault((phase_name(rule.source), phase_name(rule.dest)), []).append(rule.event.value + guard)
    for (src, dst), labels in grouped.items():
        label = "\\n".join(labels)
        lines.append(f'  {src} -> {dst} [label="{label}"];')
    lines.append("}")
    return "\n".join(lines) + "\n"
