"""The probe lifecycle, declared once.

Everything that decides how one key's probe state moves between phases lives
in this file, as data: :data:`RULES`.  Nothing else in kvprobe may restate it.

* The hot path of :mod:`kvprobe.statemachine` advances phases through
  :data:`NEXT_PHASE`, a table compiled from :data:`RULES` at import.
* :func:`validate` checks the declaration at import; :func:`to_dot` and
  ``kvprobe check --diagram`` (docs/lifecycle.md) draw it.
* :func:`build_machine` builds a second, independent reading of the same
  rules with the ``transitions`` library (the ``dev`` extra); the tests
  compare it with the compiled table and with TLC's explored graph.
* The TLA+ model in ``tla/`` uses the same phase and event names (the event
  values are the TLA+ action names); a test compares the phase transitions TLC
  explores (tla/default.cfg, and tla/cache.cfg for the verdict cache) with
  :data:`RULES`.

Theory of operation.  A probe state exists per key while some request waits on
it or a probe for it is in flight.  ``ABSENT`` is the pseudo-phase "no state".
Two facts a rule may depend on besides phase and event.  Whether, *after*
the event, any request still waits on the probe (:class:`Waiters`): that is
what separates "reclaim" from "keep".  Rules that would leave a RESOLVED or
PENDING state nobody waits on send it to ABSENT instead (an orphan is
reclaimed); an IN_FLIGHT state nobody waits on is kept, so that a new request
can join the probe rather than start a second one.  And, for a Lookup of a
key without a state, whether the opt-in verdict cache (docs/cache.md) holds
a fresh backend answer for it (:class:`Cached`): then the state is RESOLVED
at once and never probed (:data:`RECALL_RULE`).  Without a cache no answer
is ever cached, so that row never fires; :data:`NEXT_PHASE` is the table for
the not-cached case.

The declaration is validated at import (:func:`validate`): exactly one
initial phase, every phase reachable from it, no trap phase, no (phase, event,
waiters, cached) case declared twice.  A broken declaration raises
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
    "Cached",
    "Event",
    "LifecycleError",
    "LookupPhase",
    "Phase",
    "Rule",
    "Waiters",
    "build_machine",
    "compile_rules",
    "guard_label",
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


class Cached(enum.Enum):
    """Whether the verdict cache holds a fresh backend answer for the key at the event."""

    YES = "cached"
    NO = "not cached"
    ANY = "any"  # the rule does not depend on it

    def admits(self, cached: bool) -> bool:
        """Whether this guard holds for the given fact."""
        if self is Cached.ANY:
            return True
        return cached is (self is Cached.YES)


@dataclass(frozen=True)
class Rule:
    """One row of the lifecycle table."""

    source: Phase
    event: Event
    waiters: Waiters
    dest: Phase
    note: str
    cached: Cached = Cached.ANY

    def admits(self, has_waiters: bool, cached: bool) -> bool:
        """Whether this rule's guards hold for the given facts."""
        return self.waiters.admits(has_waiters) and self.cached.admits(cached)


def guard_label(rule: Rule) -> str:
    """The rule's guards as a diagram label suffix: ``" [some]"``, ``" [some, cached]"``, or ``""``."""
    parts = [g.value for g in (rule.waiters, rule.cached) if g.value != "any"]
    return f" [{', '.join(parts)}]" if parts else ""


P, F, R = LookupPhase.PENDING, LookupPhase.IN_FLIGHT, LookupPhase.RESOLVED
E = Event
SOME, NONE, ANY = Waiters.SOME, Waiters.NONE, Waiters.ANY
CACHED, NOT_CACHED = Cached.YES, Cached.NO

#: The lifecycle table (docs/lifecycle.md), one row per guarded transition.
RULES: tuple[Rule, ...] = (
    Rule(ABSENT, E.LOOKUP, SOME, P, "new generation; joins this step's batch", NOT_CACHED),
    Rule(ABSENT, E.LOOKUP, SOME, R, "verdict cache's fresh answer: resolved at once, never probed", CACHED),
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
del P, F, R, E, SOME, NONE, ANY, CACHED, NOT_CACHED


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
    seen: dict[tuple[Phase, Event, bool, bool], Rule] = {}
    for rule in rules:
        for has_waiters, cached in _FACTS:
            if not rule.admits(has_waiters, cached):
                continue
            case = (rule.source, rule.event, has_waiters, cached)
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


_FACTS = ((True, False), (False, False), (True, True), (False, True))


def _closure(start: Phase, edges: Mapping[Phase, set[Phase]]) -> set[Phase]:
    reached = {start}
    frontier = [start]
    while frontier:
        for nxt in edges[frontier.pop()]:
            if nxt not in reached:
                reached.add(nxt)
                frontier.append(nxt)
    return reached


def compile_rules(rules: Iterable[Rule], cached: bool = False) -> dict[tuple[Phase, Event, bool], Phase]:
    """Compile rules into ``{(phase, event, has_waiters_after): next_phase}``.

    Args:
        rules: the declaration.
        cached: which verdict-cache fact the table is for: ``False`` (the
            key has no fresh cached answer; the only case without a cache)
            or ``True``.

    Cases absent from the result are events that cannot happen to a state in
    that phase (the core never asks for them).
    """
    table: dict[tuple[Phase, Event, bool], Phase] = {}
    for rule in rules:
        for has_waiters in (True, False):
            if rule.admits(has_waiters, cached):
                table[(rule.source, rule.event, has_waiters)] = rule.dest
    return table


validate(RULES)

#: The row of :data:`RULES` for a Lookup of a key without a state whose
#: backend answer the opt-in verdict cache holds within its TTL
#: (docs/cache.md).  Without a cache it never fires.
RECALL_RULE: Rule = next(r for r in RULES if r.cached is Cached.YES)

#: The hot path's view of :data:`RULES` for a key with no fresh cached answer
#: (every key without a cache); :data:`RECALL_RULE` is the one row that
#: differs when the key's answer is cached.
NEXT_PHASE: dict[tuple[Phase, Event, bool], Phase] = compile_rules(RULES)
if compile_rules(RULES, cached=True) != {**NEXT_PHASE, (ABSENT, Event.LOOKUP, True): RECALL_RULE.dest}:
    raise LifecycleError("a cached answer changes a row other than the Lookup of a key without a state")


# --- the ``transitions`` machine -------------------------------------------
#
# Built from RULES on demand by the tests (building costs milliseconds; a model
# per probe would cost tens of microseconds per key, which is why the hot path
# uses NEXT_PHASE instead).  The guards are the model's ``waiters_after`` and
# ``cached`` attributes.  ``transitions`` is not a dependency of the core: it
# comes with the ``dev`` extra.

_NO_TRANSITIONS = (
    "kvprobe.spec.lifecycle.{} needs the 'transitions' package, which kvprobe "
    "installs only with its dev extra: pip install 'kvprobe[dev]' (or pip install transitions)"
)


class _ProbeModel:
    def __init__(self, phase: Phase) -> None:
        self.state = phase_name(phase)
        self.waiters_after = True
        self.cached = False

    def has_waiters(self) -> bool:
        return self.waiters_after

    def has_no_waiters(self) -> bool:
        return not self.waiters_after

    def is_cached(self) -> bool:
        return self.cached

    def is_not_cached(self) -> bool:
        return not self.cached


def build_machine(rules: Iterable[Rule] = RULES) -> Any:
    """Build a ``transitions.Machine`` from the rules; its triggers are the event values.

    The machine is a second reading of the declaration, for the tests to
    compare with :data:`NEXT_PHASE` and with TLC's explored graph; it neither
    validates the rules (:func:`validate` does) nor draws them
    (:func:`to_dot` does).  The model is created in the ABSENT state; drive
    it with :func:`machine_next`.

    Raises:
        ImportError: ``transitions`` is not installed (the message names the
            extra that brings it).
    """
    try:
        from transitions import Machine
    except ImportError as err:
        raise ImportError(_NO_TRANSITIONS.format("build_machine")) from err

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
        if rule.cached is not Cached.ANY:
            conditions.append("is_cached" if rule.cached is Cached.YES else "is_not_cached")
        machine.add_transition(
            trigger=rule.event.value,
            source=phase_name(rule.source),
            dest=phase_name(rule.dest),
            conditions=conditions,
        )
    return machine


def machine_next(machine: Any, phase: Phase, event: Event, has_waiters: bool, cached: bool = False) -> Phase | str:
    """Fire ``event`` on the machine from ``phase``; return the next phase.

    Args:
        machine: a machine from :func:`build_machine`.
        phase: the phase the key is in before the event.
        event: what happens.
        has_waiters: whether a request still waits on the probe after it.
        cached: whether the verdict cache holds a fresh answer for the key.

    Returns the string ``"invalid"`` when no rule applies (the machine raises
    ``MachineError`` or its guard refuses).

    Raises:
        ImportError: ``transitions`` is not installed.
    """
    try:
        from transitions import MachineError
    except ImportError as err:
        raise ImportError(_NO_TRANSITIONS.format("machine_next")) from err

    model = machine.model
    machine.set_state(phase_name(phase), model)
    model.waiters_after = has_waiters
    model.cached = cached
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
        grouped.setdefault((phase_name(rule.source), phase_name(rule.dest)), []).append(
            rule.event.value + guard_label(rule)
        )
    for (src, dst), labels in grouped.items():
        label = "\\n".join(labels)
        lines.append(f'  {src} -> {dst} [label="{label}"];')
    lines.append("}")
    return "\n".join(lines) + "\n"
