"""kvprobe.spec: the lifecycle declaration and, built on it, the reference model."""

from kvprobe.spec.lifecycle import (
    ABSENT,
    NEXT_PHASE,
    RULES,
    Cached,
    Event,
    LifecycleError,
    LookupPhase,
    Rule,
    Waiters,
    build_machine,
    to_dot,
)

__all__ = [
    "ABSENT",
    "NEXT_PHASE",
    "RULES",
    "Cached",
    "Event",
    "LifecycleError",
    "LookupPhase",
    "Rule",
    "Waiters",
    "build_machine",
    "to_dot",
]
