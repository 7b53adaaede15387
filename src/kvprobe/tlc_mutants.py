"""The TLA+ model's mutants, listed once, and how a TLC run selects one.

``tla/KVProbe.tla`` states only the intended system.  Each mutant is a
defective variant of a small part of one of its actions, defined in
``tla/KVProbeMutants.tla`` and swapped in by TLC's operator override
(``Part <- Variant`` in the config's CONSTANTS section): :data:`MUTANTS` says,
for each, which parts it replaces with what, and a one-line summary.
``kvprobe check --mutant NAME`` and ``--list`` read this table; so do the
tests that make TLC catch every mutant.  docs/properties.md describes each
one and the property that catches it.

Three kinds: ``named`` mutants are the defects seen in the field (the
property suite catches them too); ``spec`` mutants are one-line slips
written to measure the power of the model's invariants; ``chain`` mutants
are defects of the chain walk (``lookup_chain``'s windows, and its inferred
mode's search), inert on the
default config (its chain is empty): each is caught on a chain config
(its ``config``, which ``kvprobe check --mutant NAME`` uses).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

__all__ = [
    "KINDS",
    "MUTANTS",
    "MUTANTS_MODULE",
    "MUTANT_NAMES",
    "Mutant",
    "UnknownMutant",
    "find_mutant",
    "mutant_config",
    "root_module",
]

#: The module a mutant run checks: it extends MC and defines the variants.
MUTANTS_MODULE = "KVProbeMutants.tla"
#: The module the intended model's runs check.
MODEL_MODULE = "MC.tla"

#: Mutant kinds, in the order ``--list`` shows them, with their headings.
KINDS: Mapping[str, str] = {
    "named": "named mutants, the defects seen in the field",
    "spec": "spec mutants, one-line slips that measure the invariants",
    "chain": "chain-walk mutants, each caught on a chain config (docs/chains.md)",
    "cache": "verdict-cache mutants, each caught on cache.cfg (docs/cache.md)",
}


class UnknownMutant(ValueError):
    """No mutant of that name (the message lists the names there are)."""


@dataclass(frozen=True)
class Mutant:
    """One mutant: its name, kind (a key of :data:`KINDS`), a one-line summary,
    the operators of KVProbe.tla it replaces (name -> the KVProbeMutants.tla
    operator put in its place), and the config (``tla/NAME.cfg``) whose check
    catches it: ``default`` for most; ``vllm`` for a defect of the vLLM
    drop-in's flavour; ``reach`` for one that only removes behaviours (a
    reachability witness disappears)."""

    name: str
    kind: str
    summary: str
    overrides: Mapping[str, str]
    config: str = "default"


def _named(name: str, summary: str, **overrides: str) -> Mutant:
    return Mutant(name, "named", summary, overrides)


def _spec(name: str, summary: str, **overrides: str) -> Mutant:
    return Mutant(name, "spec", summary, overrides)


def _spec_on(config: str, name: str, summary: str, **overrides: str) -> Mutant:
    return Mutant(name, "spec", summary, overrides, config)


def _chain(config: str, name: str, summary: str, **overrides: str) -> Mutant:
    return Mutant(name, "chain", summary, overrides, config)


def _cache(name: str, summary: str, **overrides: str) -> Mutant:
    return Mutant(name, "cache", summary, overrides, "cache")


#: Every mutant, named ones first (DESIGN's field defects), then the spec mutants.
MUTANTS: tuple[Mutant, ...] = (
    _named(
        "flush-submits-cleaned",
        "Flush submits entries whose state was reclaimed since the lookup",
        FlushEntries="WholeBatch",
    ),
    _named(
        "cleanup-drops-in-flight",
        "Cleanup deletes an IN_FLIGHT state; the key is probed again",
        CleanupReclaims="ReclaimsInFlight",
    ),
    _named(
        "stale-result-applied",
        "Drain applies a result without comparing generations",
        OutcomeMatches="MatchesAnyGeneration",
        OutcomeProbe="AnyProbeOfKey",
    ),
    _named(
        "double-result",
        "Drain applies a second result (a late answer) to a RESOLVED state",
        OutcomeResolves="ResolvesAgain",
    ),
    _named(
        "worker-error-drops-batch",
        "a failed backend call publishes nothing; its probes stay IN_FLIGHT",
        FailGroupOf="PublishesNothing",
    ),
    _named(
        "orphan-never-reclaimed",
        "a result for a state nobody waits on resolves it instead of reclaiming it",
        OutcomeResolves="ResolvesOrphans",
        OutcomeReclaims="ReclaimsNothing",
    ),
    _named(
        "mark-miss-in-flight-unguarded",
        "MarkMiss leaves an IN_FLIGHT state IN_FLIGHT: its result overrides the MISS",
        ForcedPhase="LeavesInFlight",
    ),
    _spec(
        "fail-resolves-hit",
        "Drain resolves a failed, timed-out or saturated group's keys as HIT",
        OutcomeAnswer="AnswerFailedAsHit",
    ),
    _spec(
        "verdict-from-other-key",
        "Drain gives each key the answer of one (any) key of the group",
        OutcomeAnswer="AnswerOfAnyKey",
    ),
    _spec(
        "flush-ignores-gen",
        "Flush submits a PENDING key's entry without comparing its generation",
        FlushSubmits="SubmitsAnyGeneration",
    ),
    _spec(
        "flush-submits-forced",
        "Flush submits an entry without checking it is still PENDING",
        FlushSubmits="SubmitsAnyPhase",
    ),
    _spec(
        "lookup-rejoins-batch",
        "a request joining a PENDING probe adds a second batch entry",
        LookupJoin="LookupJoinRejoinsBatch",
    ),
    _spec(
        "lookup-skips-drain",
        "Lookup answers without draining the published outcomes first",
        Drained="NeverWaitsForDrain",
    ),
    _spec(
        "stale-reclaims-newer",
        "an outcome reclaims an orphan without comparing generations",
        OutcomeReclaims="ReclaimsAnyGeneration",
    ),
    _spec(
        "flush-while-dead",
        "Flush submits to a dead worker instead of reviving it first",
        CanSubmit="SubmitsToDeadWorker",
    ),
    _spec(
        "death-forgets-open",
        "the death marker's Drain forgets the open groups instead of failing them",
        OutcomeProbes="ProbesForgettingOpen",
    ),
    _spec(
        "lookup-after-shutdown",
        "Lookup is not refused after Shutdown",
        LookupReady="LookupReadyAfterShutdown",
    ),
    _spec(
        "cleanup-keeps-reverse-index",
        "Cleanup leaves the request's keys in the reverse index",
        RequestsAfterCleanup="KeepsReverseIndex",
    ),
    _spec(
        "saturate-publishes-nothing",
        "Saturate takes the group but publishes nothing",
        SaturateOf="SaturatesSilently",
    ),
    # Outputs and verdicts pinned to what happened elsewhere (issues 26, 29, 25).
    _spec(
        "lookup-answers-pending-miss",
        "a lookup joining a PENDING probe answers MISS instead of 'ask again'",
        JoinAnswer="PendingAnswersMiss",
    ),
    _spec(
        "saturate-answers-stored",
        "a saturated group (no call made) is published as answered, every key stored",
        SaturateOf="SaturatesAsStored",
    ),
    _spec(
        "stale-answer-applied",
        "Drain applies an outcome of another generation with its own probe's answer",
        OutcomeMatches="MatchesAnyGeneration",
        OutcomeAnswer="AnswerOfItsProbe",
    ),
    _spec(
        "mark-miss-skips-unresolved",
        "the native MarkMiss leaves PENDING and IN_FLIGHT keys alone (vLLM 0.33's)",
        MarkMissForces="ForcesResolvedOnly",
    ),
    _spec_on(
        "vllm",
        "mark-miss-forces-unresolved",
        "the drop-in's MarkMiss forces PENDING and IN_FLIGHT keys too (the native one)",
        MarkMissForces="ForcesEveryLiveKey",
    ),
    _spec_on(
        "reach",
        "worker-holds-until-idle",
        "a group's answer is published only once no other group is running",
        CompleteGroupOf="PublishesWhenIdle",
    ),
    # --- positioned lookups (tla/positions.cfg; issue 38) ---
    _spec_on(
        "positions",
        "position-probes-past-miss",
        "a positioned lookup probes a key after a key its request knows NOT stored",
        PosMissBefore="MissNeverSeen",
    ),
    _spec_on(
        "positions",
        "position-window-never-opens",
        "a positioned lookup defers every key past the first window, so a deferred key is never probed",
        PosPastWindow="WindowNeverOpens",
    ),
    # --- the chain walk (tla/chain.cfg, tla/chain-window.cfg) ---
    _chain(
        "chain",
        "window-skips-ahead",
        "a walk probes the next window before the one it is in answered",
        ChainWindowOpen="WindowOpenEarly",
    ),
    _chain(
        "chain-window",
        "probe-after-miss",
        "a walk finishes its window after a key known NOT stored",
        ChainNoMissBefore="NoMissBeforeWindow",
    ),
    _chain(
        "chain",
        "window-presumed-stored",
        "a walk reports the keys of an unanswered window as stored",
        ChainFindsStored="FindsUnansweredStored",
    ),
    # --- the inferred walk (tla/chain-inferred.cfg) ---
    _chain(
        "chain-inferred",
        "search-infers-unverified",
        "the inferred walk answers one probe short, counting an unprobed boundary key stored",
        SearchDecided="DecidedOneShort",
    ),
    _chain(
        "chain-inferred",
        "search-skips-exact-rewalk",
        "the inferred walk infers across a key whose load failed (refuted) instead of walking exactly",
        ChainTrusted="TrustsRefuted",
    ),
    # --- issue 41: each caught by a fact the action under check cannot write ---
    _chain(
        "chain",
        "walk-skips-a-key",
        "a walk looks a key up before the key just before it, and counts the skipped one",
        ChainReached="ReachedButLast",
    ),
    _chain(
        "chain-inferred",
        "search-ignores-earlier-miss",
        "the inferred walk counts a key stored that its request knows NOT stored, before a later hit",
        SearchHi="MissAfterLastHit",
    ),
    _chain(
        "chain-inferred",
        "cleanup-drops-refuted",
        "a request's cleanup takes its keys off the refuted set: the next walk infers across a failed load",
        CleanupStore="DropsRefuted",
    ),
    # --- the verdict cache (tla/cache.cfg) ---
    _cache(
        "cache-keeps-marked-miss",
        "MarkMiss does not make the verdict cache forget the keys",
        Forgets="ForgetsNothing",
    ),
    _cache(
        "cache-remembers-failure",
        "the verdict cache remembers a failure's MISS as a backend answer",
        Remembers="RemembersAnyOutcome",
    ),
    _cache(
        "cache-forgets-live-only",
        "MarkMiss makes the verdict cache forget only the keys that have a state",
        Forgets="ForgetsLiveOnly",
    ),
    _cache(
        "cache-keeps-moot-answer",
        "the verdict cache keeps the answer of a probe a MarkMiss made moot while it was in flight",
        CachedProbes="CachesEveryAnswer",
    ),
)

#: The mutant names by kind: ``{"named": (...), "spec": (...)}``.
MUTANT_NAMES: Mapping[str, tuple[str, ...]] = {kind: tuple(m.name for m in MUTANTS if m.kind == kind) for kind in KINDS}


def find_mutant(name: str) -> Mutant:
    """The mutant called ``name``.

    Raises:
        UnknownMutant: there is none; the message lists every name.
    """
    for mutant in MUTANTS:
        if mutant.name == name:
            return mutant
    raise UnknownMutant(f"unknown mutant {name!r}; choose from {', '.join(m.name for m in MUTANTS)}")


def root_module(mutant: str | None) -> str:
    """The module a run checks: :data:`MUTANTS_MODULE` for a mutant, else MC.tla.

    Raises:
        UnknownMutant: ``mutant`` names no mutant.
    """
    if mutant is None:
        return MODEL_MODULE
    find_mutant(mutant)
    return MUTANTS_MODULE


def mutant_config(cfg_text: str, mutant: str) -> str:
    """A TLC config that checks ``mutant``: ``cfg_text`` plus its overrides.

    Run it on :data:`MUTANTS_MODULE` (:func:`root_module`); on MC.tla TLC
    would not find the replacement operators.

    Raises:
        UnknownMutant: ``mutant`` names no mutant.
    """
    overrides = find_mutant(mutant).overrides
    lines = [f"    {part} <- {variant}" for part, variant in overrides.items()]
    return cfg_text.rstrip("\n") + f"\n\\* mutant {mutant}\nCONSTANTS\n" + "\n".join(lines) + "\n"
