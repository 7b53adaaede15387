"""The model's per-probe steps: the transition function, the per-probe actions, the batch partitioner.

These are the pure functions the actions (:mod:`kvprobe.spec.model`)
are built from, and the part of the model that CrossHair checks: each
carries PEP 316 contracts (``pre:``/``post:`` in its docstring; ``crosshair
check kvprobe.spec.model_probe``, or the folder ``spec``).  Per-key phase
changes go through :func:`transition`, i.e. through
:data:`kvprobe.spec.lifecycle.NEXT_PHASE`, the table compiled from the one
lifecycle declaration, so the model cannot drift from the declared table.
The names a contract reads must be this module's globals.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from kvprobe.spec.lifecycle import ABSENT, NEXT_PHASE, Event, Phase
from kvprobe.spec.model_state import IN_FLIGHT, RESOLVED, Key, ModelError, Probe  # noqa: F401 (contracts read IN_FLIGHT)

__all__ = [
    "partition_batch",
    "probe_cleanup",
    "probe_drain",
    "probe_lookup",
    "probe_mark_miss",
    "transition",
    "verdict_iff_resolved",
]


def transition(phase: Phase, event: Event, has_waiters: bool) -> tuple[bool, Phase]:
    """Look up the declared lifecycle: ``(declared, next_phase)``.

    When the lifecycle declares no rule for the case, returns
    ``(False, phase)``: the event leaves the phase alone (the core treats an
    undeclared drain as "drop the result").  Never raises.

    pre: isinstance(event, Event)
    post: __return__[0] == ((phase, event, has_waiters) in NEXT_PHASE)
    post: __return__[0] or __return__[1] is phase
    post: not (event is Event.SHUTDOWN and phase is not None) or __return__ == (True, None)
    post: not (event is Event.LOOKUP and phase is not None and __return__[0]) or __return__[1] is phase
    post: not (event is Event.MARK_MISS and __return__[0]) or __return__[1] in (RESOLVED, None)
    post: not (phase is IN_FLIGHT and event is Event.DRAIN and has_waiters) or __return__[1] is RESOLVED
    post: not (phase is IN_FLIGHT and event is Event.CLEANUP) or __return__[1] is IN_FLIGHT
    """
    case = (phase, event, has_waiters)
    if case in NEXT_PHASE:
        return True, NEXT_PHASE[case]
    return False, phase


def verdict_iff_resolved(probe: Probe) -> bool:
    """The per-state part of :func:`VerdictIffResolved`.

    post: __return__ == ((probe.phase is RESOLVED) == (probe.verdict is not None))
    """
    return (probe.verdict is not None) is (probe.phase is RESOLVED)


# --- per-probe actions (the part CrossHair checks) -----------------------------------


def probe_lookup(probe: Probe, req: str) -> Probe:
    """A lookup by ``req`` of a key that has a state: join it, keep its phase.

    pre: verdict_iff_resolved(probe)
    post: __return__.phase is probe.phase and __return__.gen == probe.gen
    post: __return__.verdict == probe.verdict
    post: __return__.waiters == probe.waiters | {req}
    post: verdict_iff_resolved(__return__)
    """
    _, dest = transition(probe.phase, Event.LOOKUP, True)
    assert dest is not None
    if req in probe.waiters and dest is probe.phase:
        return probe
    return Probe(dest, probe.gen, probe.waiters | {req}, probe.verdict)


def probe_drain(probe: Probe, gen: int, verdict: bool) -> Probe | None:
    """Apply a result of generation ``gen`` (a failure passes ``False``).

    Returns the new state, or None when the state is reclaimed (an orphan:
    nobody waits on it).  A result of another generation, or for a state
    that is not IN_FLIGHT, leaves the state unchanged.

    pre: verdict_iff_resolved(probe)
    pre: probe.waiters or probe.phase is IN_FLIGHT
    post: __return__ is None or verdict_iff_resolved(__return__)
    post: probe.gen == gen or __return__ == probe
    post: probe.phase is not RESOLVED or __return__ == probe
    post: __return__ is None or __return__.gen == probe.gen
    post: (__return__ is None) == (probe.gen == gen and probe.phase is IN_FLIGHT and not probe.waiters)
    post: __return__ is None or __return__ == probe or __return__ == Probe(RESOLVED, gen, probe.waiters, verdict)
    post: not (probe.gen == gen and probe.phase is IN_FLIGHT and probe.waiters) or __return__ != probe
    """
    if probe.gen != gen:
        return probe
    declared, dest = transition(probe.phase, Event.DRAIN, bool(probe.waiters))
    if not declared or probe.phase is RESOLVED:
        return probe
    if dest is ABSENT:
        return None
    if dest is not RESOLVED:
        return probe
    return Probe(dest, gen, probe.waiters, verdict)


def probe_cleanup(probe: Probe, req: str) -> Probe | None:
    """``req`` no longer waits: the state after cleanup, None when reclaimed.

    pre: req in probe.waiters
    pre: verdict_iff_resolved(probe)
    post: __return__ is None or req not in __return__.waiters
    post: __return__ is None or verdict_iff_resolved(__return__)
    post: not (probe.phase is IN_FLIGHT) or __return__ is not None
    post: __return__ is not None or probe.waiters == {req}
    post: __return__ is None or __return__.phase is probe.phase
    """
    waiters = probe.waiters - {req}
    declared, dest = transition(probe.phase, Event.CLEANUP, bool(waiters))
    if not declared:
        raise ModelError(f"no declared cleanup from {probe.phase}")
    if dest is ABSENT:
        return None
    return Probe(dest, probe.gen, waiters, probe.verdict)


def probe_mark_miss(probe: Probe) -> Probe | None:
    """Force MISS: RESOLVED(False), or None when nobody waits (reclaimed).

    pre: probe.waiters or probe.phase is IN_FLIGHT
    post: __return__ is None or (__return__.phase is RESOLVED and __return__.verdict is False)
    post: (__return__ is None) == (not probe.waiters)
    post: __return__ is None or __return__.gen == probe.gen
    """
    declared, dest = transition(probe.phase, Event.MARK_MISS, bool(probe.waiters))
    if not declared:
        raise ModelError(f"no declared mark_miss from {probe.phase} with waiters={bool(probe.waiters)}")
    if dest is ABSENT:
        return None
    return Probe(RESOLVED, probe.gen, probe.waiters, False)


def partition_batch(
    entries: Sequence[tuple[Key, int, str]], pending: Mapping[Key, tuple[int, frozenset[str]]]
) -> list[tuple[str, list[Key], list[int]]]:
    """How a flush groups this step's entries by request.

    ``entries`` is the step batch (``(key, gen, req)`` in first-asked order);
    ``pending`` maps each key whose state is PENDING to ``(gen, waiters)``.
    An entry is submitted only if its key is PENDING with the same generation
    (otherwise its state was reclaimed, replaced or forced to MISS since the
    lookup: never probed) and only once.  It goes to the group of the request
    that asked for it, or, if that request left, of the smallest waiting
    request id.  Groups come in order of their first entry.  Never raises.

    post: all(len(ks) == len(gs) and ks for _, ks, gs in __return__)
    post: len({r for r, _, _ in __return__}) == len(__return__)
    post: all(k in pending and pending[k][0] == g for _, ks, gs in __return__ for k, g in zip(ks, gs))
    post: all(r in pending[k][1] for r, ks, _ in __return__ for k in ks)
    post: sum(len(ks) for _, ks, _ in __return__) == len(_keys_of(__return__))
    post: _keys_of(__return__) == {k for k, g, _ in entries if k in pending and pending[k][0] == g and pending[k][1]}
    """
    groups: dict[str, tuple[list[Key], list[int]]] = {}
    seen: set[Key] = set()
    for key, gen, req in entries:
        live = pending.get(key)
        if live is None or live[0] != gen or key in seen or not live[1]:
            continue
        seen.add(key)
        if req not in live[1]:
            req = min(live[1])
        slot = groups.setdefault(req, ([], []))
        slot[0].append(key)
        slot[1].append(gen)
    return [(req, keys, gens) for req, (keys, gens) in groups.items()]


def _keys_of(groups: Iterable[tuple[str, list[Key], list[int]]]) -> set[Key]:
    return {key for _, keys, _ in groups for key in keys}
