"""The model's invariants: one predicate per safety invariant of ``tla/KVProbe.tla``.

Each is the invariant of the same name in ``tla/KVProbe.tla`` and
``docs/properties.md``, written over the model's variables (history
variables included); ``tests/tla/test_model_replay.py`` checks they agree
with TLC's on every state TLC explores under default.cfg.  The correct model
never breaks one; a state abstracted from a buggy implementation can.  None
of them raises.
"""

from __future__ import annotations

from collections.abc import Callable

from kvprobe.spec.lifecycle import LookupPhase
from kvprobe.spec.model_probe import verdict_iff_resolved
from kvprobe.spec.model_state import (
    DEAD,
    IN_FLIGHT,
    PENDING,
    RESOLVED,
    STOPPED,
    UP,
    Group,
    Key,
    Probe,
    State,
    is_death_marker,
)

__all__ = [
    "INVARIANTS",
    "AfterShutdownEmpty",
    "EnqueueOnce",
    "ForcedMissSticks",
    "LookupAnswers",
    "LookupReturnsVerdict",
    "NoDuplicateProbe",
    "NothingLeaks",
    "Reclaimed",
    "ReverseIndexConsistent",
    "StaleGenerationDropped",
    "TypeOK",
    "VerdictFromBackend",
    "VerdictIffResolved",
    "VerdictProvenance",
    "broken_invariants",
    "coming",
]


def _all_groups(s: State) -> list[Group]:
    return [
        *s.outstanding.values(),
        *s.taken.values(),
        *s.stray.values(),
        *s.stopped_taken.values(),
        *(g for b in s.queue for g in b),
        *(o.group for o in (*s.inbox, *s.discarded) if not is_death_marker(o)),
    ]


def TypeOK(s: State) -> bool:
    """Every variable holds values of its type."""
    for key, probe in s.probes.items():
        if type(key) is not bytes or not isinstance(probe, Probe) or not isinstance(probe.phase, LookupPhase):
            return False
        if type(probe.gen) is not int or probe.verdict not in (None, True, False):
            return False
        if not all(type(r) is str for r in probe.waiters):
            return False
    for req, keys in s.requests.items():
        if type(req) is not str or not all(type(k) is bytes for k in keys):
            return False
    for group in _all_groups(s):
        if len(group.keys) != len(group.gens) or not group.keys:
            return False
    for outcome in (*s.inbox, *s.discarded):
        if (outcome.verdicts is None) == (outcome.failure is None):
            return False
        if outcome.verdicts is not None and len(outcome.verdicts) != len(outcome.group.keys):
            return False
    return s.worker in (UP, DEAD, STOPPED) and s.timed_out <= set(s.taken) and s.closed == (s.worker == STOPPED)


def EnqueueOnce(s: State) -> bool:
    """A generation is submitted at most once, only while PENDING; at most one outcome applied."""
    return (
        all(n <= 1 for n in s.submitted.values())
        and not s.submitted_not_pending
        and all(n <= 1 for n in s.applied.values())
    )


def NoDuplicateProbe(s: State) -> bool:
    """Per key at most one open generation not made moot by a forced miss and not RESOLVED now."""
    live: dict[Key, set[int]] = {}
    for group in s.outstanding.values():
        for key, gen in zip(group.keys, group.gens, strict=True):
            probe = s.probes.get(key)
            if (key, gen) in s.moot or (probe is not None and probe.gen == gen and probe.phase is RESOLVED):
                continue
            live.setdefault(key, set()).add(gen)
    return all(len(gens) <= 1 for gens in live.values())


def StaleGenerationDropped(s: State) -> bool:
    """No outcome ever changed a state of another generation."""
    return s.stale_applied == 0


def VerdictIffResolved(s: State) -> bool:
    """The verdict is set exactly when the phase is RESOLVED."""
    return all(verdict_iff_resolved(p) for p in s.probes.values())


def _forced(s: State, key: Key) -> bool:
    # TLA's forced[k]: the key's current state was hit by a forced miss.
    probe = s.probes.get(key)
    return probe is not None and (key, probe.gen) in s.forced


def ForcedMissSticks(s: State) -> bool:
    """A force-missed state still held has verdict MISS."""
    return all(probe.verdict is False for key, probe in s.probes.items() if _forced(s, key))


def VerdictProvenance(s: State) -> bool:
    """A RESOLVED state's verdict is False if forced, else the first outcome published for its generation."""
    for key, probe in s.probes.items():
        if probe.phase is RESOLVED:
            want = False if _forced(s, key) else s.told.get((key, probe.gen))
            if probe.verdict is not want:
                return False
    return True


def LookupAnswers(s: State) -> bool:
    """What the last lookup returned: MISS for a forced state; a verdict once one was published.

    Visibility: if an outcome for the key's current generation has been
    published (``told``), the lookup (which drains first) saw a verdict.
    """
    if s.out is None:
        return True
    key, _, answer = s.out
    probe = s.probes.get(key)
    if _forced(s, key) and answer is not False:
        return False
    return not (probe is not None and (key, probe.gen) in s.told and answer is None)


def ReverseIndexConsistent(s: State) -> bool:
    """Every remembered (request, key) points at a live state listing it, and vice versa."""
    for req, keys in s.requests.items():
        if not keys:
            return False
        for key in keys:
            probe = s.probes.get(key)
            if probe is None or req not in probe.waiters:
                return False
    for key, probe in s.probes.items():
        for req in probe.waiters:
            if key not in s.requests.get(req, ()):
                return False
    return True


def coming(s: State) -> list[Group]:
    """Groups whose outcome will reach the scheduler (TLA's ``Coming``).

    While a death marker is published (or a death without one awaits
    :func:`revive`), every open group: it will be failed.  Otherwise the
    groups of published first outcomes, and, with the worker up, its queue
    and running calls.
    """
    if s.death_unannounced or any(is_death_marker(o) for o in s.inbox):
        return list(s.outstanding.values())
    groups = [o.group for o in s.inbox if not o.late]
    if s.worker == UP:
        groups += [g for b in s.queue for g in b]
        groups += [g for gid, g in s.taken.items() if gid not in s.timed_out]
    return groups


def NothingLeaks(s: State) -> bool:
    """Safety part of nothing-leaks.

    No PENDING or RESOLVED state without waiters; a PENDING state is in this
    step's batch; an IN_FLIGHT state's outcome is coming (:func:`coming`).
    """
    pairs = {(k, g) for grp in coming(s) for k, g in zip(grp.keys, grp.gens, strict=True)}
    batch = {(k, g) for k, g, _ in s.step_batch}
    for key, probe in s.probes.items():
        if probe.phase is IN_FLIGHT:
            if (key, probe.gen) not in pairs:
                return False
        elif not probe.waiters:
            return False
        elif probe.phase is PENDING and (key, probe.gen) not in batch:
            return False
    return True


def AfterShutdownEmpty(s: State) -> bool:
    """After shutdown the table, batch, queue and open groups are empty and the worker is stopped."""
    if not s.closed:
        return True
    return (
        not s.probes
        and not s.requests
        and not s.step_batch
        and not s.queue
        and not s.outstanding
        and s.worker == STOPPED
    )


# --- outputs and verdicts pinned to what happened elsewhere (issue 26) ---------------


def LookupReturnsVerdict(s: State) -> bool:
    """What the last lookup returned is exactly its key's state's verdict.

    None ("ask again") until an outcome of the state's generation was applied
    (``applied``, written by drains) or the state was forced (``forced``,
    written by mark_miss); then that verdict.
    """
    if s.out is None:
        return True
    key, _, answer = s.out
    probe = s.probes.get(key)
    if probe is None or answer is not probe.verdict:
        return False
    known = _forced(s, key) or s.applied.get((key, probe.gen), 0) > 0 or (key, probe.gen) in s.recalled
    return (answer is None) is not known


def VerdictFromBackend(s: State) -> bool:
    """A RESOLVED state not forced is True exactly when the backend answered "stored" for it in time.

    ``backend_hits`` is written only where a call returns, so a saturated,
    failed, timed-out or dead group's keys must be False.  A generation
    answered from the verdict cache is judged by the generation it was
    recalled from (``recalled``).
    """
    return all(
        probe.verdict is ((key, s.recalled.get((key, probe.gen), probe.gen)) in s.backend_hits)
        for key, probe in s.probes.items()
        if probe.phase is RESOLVED and not _forced(s, key)
    )


def Reclaimed(s: State) -> bool:
    """The end state EventuallyReclaimed promises: nothing held, nothing open."""
    return not s.probes and not s.requests and not s.outstanding and not s.step_batch


#: The safety invariants by their shared names (docs/properties.md, tla/KVProbe.tla).
INVARIANTS: dict[str, Callable[[State], bool]] = {
    "TypeOK": TypeOK,
    "EnqueueOnce": EnqueueOnce,
    "NoDuplicateProbe": NoDuplicateProbe,
    "StaleGenerationDropped": StaleGenerationDropped,
    "VerdictIffResolved": VerdictIffResolved,
    "ForcedMissSticks": ForcedMissSticks,
    "VerdictProvenance": VerdictProvenance,
    "LookupAnswers": LookupAnswers,
    "ReverseIndexConsistent": ReverseIndexConsistent,
    "NothingLeaks": NothingLeaks,
    "AfterShutdownEmpty": AfterShutdownEmpty,
    "LookupReturnsVerdict": LookupReturnsVerdict,
    "VerdictFromBackend": VerdictFromBackend,
}


def broken_invariants(s: State) -> list[str]:
    """Names of the invariants that do not hold in ``s`` (empty when all hold)."""
    return [name for name, holds in INVARIANTS.items() if not holds(s)]
