"""The reference model's state: its records, its constants, and the steps every action shares.

A :class:`State` is immutable; every action (:mod:`kvprobe.spec.model`,
:mod:`kvprobe.spec.model_worker`) returns a new one.  Its mappings are
read-only views (:func:`frozen_map`).  Besides the variables the
implementation has, it carries *history* variables that only the invariants
(:mod:`kvprobe.spec.model_invariants`) read, as TLA+ specs do.  The names of
failures are ``FailureKind`` values, so a recorded trace of the
implementation compares as it is.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import NamedTuple, TypeVar

from kvprobe.spec.lifecycle import LookupPhase

__all__ = [
    "DEAD",
    "DEATH_MARKER",
    "IN_FLIGHT",
    "PENDING",
    "RESOLVED",
    "SATURATED",
    "STOPPED",
    "TIMEOUT",
    "UP",
    "WORKER_DIED",
    "CacheSpec",
    "ChainAsk",
    "Counts",
    "Group",
    "Key",
    "ModelClosedError",
    "ModelError",
    "Outcome",
    "Probe",
    "Remembered",
    "State",
    "begin",
    "bump",
    "frozen_map",
    "initial",
    "is_death_marker",
    "tell",
]

Key = bytes
PENDING = LookupPhase.PENDING
IN_FLIGHT = LookupPhase.IN_FLIGHT
RESOLVED = LookupPhase.RESOLVED

#: The failure name of a timed-out group (``FailureKind.TIMEOUT.value``).
TIMEOUT = "timeout"
#: The failure name of a group answered at once while too many calls are stuck.
SATURATED = "saturated"
#: The failure name of a dead worker's open groups (``FailureKind.WORKER_DIED.value``).
WORKER_DIED = "worker_died"

# Worker states (docs/worker.md).
UP = "up"
DEAD = "dead"
STOPPED = "stopped"


class ModelError(ValueError):
    """An action was applied where the model has no step (its guard is false)."""


class ModelClosedError(ModelError):
    """An action other than :func:`shutdown` was applied after shutdown."""


@dataclass(frozen=True)
class Probe:
    """A key's probe state: phase, generation, waiting requests, verdict."""

    phase: LookupPhase
    gen: int
    waiters: frozenset[str]
    verdict: bool | None


@dataclass(frozen=True)
class Group:
    """One request's share of a flush: one backend call."""

    group_id: int
    batch_id: int
    req: str
    keys: tuple[Key, ...]
    gens: tuple[int, ...]


@dataclass(frozen=True)
class Outcome:
    """What the worker published for a group: verdicts, or a failure name."""

    group: Group
    verdicts: tuple[bool, ...] | None
    failure: str | None = None
    late: bool = False


#: The death marker a dying worker publishes: group id 0, no keys (as
#: ``kvprobe.statemachine.types.death_marker``).  Draining it fails every
#: open group with WORKER_DIED.
DEATH_MARKER = Outcome(Group(0, 0, "", (), ()), None, WORKER_DIED)


def is_death_marker(outcome: Outcome) -> bool:
    """Whether ``outcome`` is the :data:`DEATH_MARKER` rather than a group's outcome."""
    return outcome.group.group_id == 0 and not outcome.group.keys


@dataclass(frozen=True)
class Counts:
    """The counters of ``kvprobe.statemachine.types.Stats`` the model predicts."""

    probes_created: int = 0
    probes_submitted: int = 0
    joins: int = 0
    in_flight_reuses: int = 0
    never_probed: int = 0
    orphans_reclaimed: int = 0
    stale_results_dropped: int = 0
    forced_misses: int = 0
    hits: int = 0
    misses: int = 0
    batches: int = 0
    backend_calls: int = 0
    backend_errors: int = 0
    timeouts: int = 0
    late_results: int = 0
    unknown_cleanups: int = 0
    unknown_mark_miss: int = 0


_K = TypeVar("_K")
_V = TypeVar("_V")


def frozen_map(items: Mapping[_K, _V] | None = None) -> Mapping[_K, _V]:
    """A read-only copy of ``items``: the state is immutable, actions build new mappings."""
    return MappingProxyType(dict(items or {}))


# --- the chain walk (kvprobe.spec.model_chain): its history record -----------------------


class ChainAsk(NamedTuple):
    """One Lookup made by a chain walk, as it happened (history, read only by the chain invariants).

    ``position`` is the key's index in the chain, ``window_start`` where
    the window holding it starts (by the walk's schedule), and ``before``
    the verdicts the walk's earlier keys had at that moment, in chain order.
    """

    req: str
    key: Key
    position: int
    window_start: int
    before: tuple[bool | None, ...]


# --- the opt-in verdict cache (kvprobe.spec.model_cache) ----------------------------------


@dataclass(frozen=True)
class CacheSpec:
    """The verdict cache's configuration (``VerdictCache``'s fields): a TTL of 0 stores nothing."""

    max_entries: int
    hit_ttl: float
    miss_ttl: float


class Remembered(NamedTuple):
    """One remembered backend answer: its key, verdict, the generation answered, and when it ends."""

    key: Key
    verdict: bool
    gen: int
    until: float


@dataclass(frozen=True)
class State:
    """The whole model state (immutable; mappings are read-only views).

    Implementation variables: ``probes``, ``requests`` (the reverse index),
    ``step_batch`` (``(key, gen, req)`` in first-asked order), ``outstanding``
    (submitted groups whose first outcome is not applied), the worker's
    ``queue`` (batches not taken), ``taken`` groups and the ``timed_out`` ones
    among them, the ``inbox`` of published outcomes, the id counters,
    ``closed`` and ``counts``.

    The worker (``docs/worker.md``): ``worker`` is ``"up"``, ``"dead"`` or
    ``"stopped"``; ``timed_out`` are the current worker's stuck calls (still
    in ``taken``, as the code's ManualWorker keeps them); ``stray`` are stuck
    calls of a worker that died or stopped (they may still answer late);
    ``stopped_taken`` are calls the stopped worker was running at shutdown
    (they may still publish); ``discarded`` is what was published but will
    never be applied (the inbox at shutdown and everything published after).
    ``death_unannounced`` marks a death without a marker (the code's
    ``ManualWorker.die()``), noticed only by :func:`revive`; the TLA+ model's
    ``Die`` always publishes the marker (``worker_dies(s, marker=True)``).
    ``out`` is what the last action, if a lookup, answered:
    ``(key, req, verdict)``, else None.

    History variables (read only by invariants): ``submitted`` (times each
    ``(key, gen)`` was submitted), ``submitted_not_pending`` (generations
    submitted while their state was not PENDING of that generation),
    ``applied`` (results applied per ``(key, gen)``), ``stale_applied``
    (outcomes that changed a state of another generation), ``forced``
    (generations hit by a forced miss), ``moot`` (IN_FLIGHT generations a
    forced miss made moot) and ``told`` (per ``(key, gen)``, the first
    outcome published for it: the backend's verdict, False for a failure,
    timeout or saturation, and the manager's False for a dead worker's open
    groups).  ``backend_hits`` is the history of the backend itself, written
    only where a call returns in time with its answers
    (:func:`~kvprobe.spec.model_worker.complete_group`), never from what the
    worker publishes: the ``(key, gen)`` it answered "stored" for.  The chain
    walk's history (:mod:`kvprobe.spec.model_chain`): ``chain_asks``, each
    Lookup a walk made (:class:`ChainAsk`), and ``chain_counted``, each key a
    walk counted as stored: ``(key, gen, forced)``, forced telling whether a
    forced miss had hit that generation.

    The opt-in verdict cache (:mod:`kvprobe.spec.model_cache`): ``cache``
    is its configuration (None: no cache, and the memory stays empty),
    ``now`` the time, ``memory`` the remembered answers (LRU first).
    History: ``backend_misses`` mirrors ``backend_hits`` for the backend's
    in-time "not stored" answers, ``recalled`` maps each generation answered
    from memory to the generation whose answer it was, and ``invalidated``
    lists the entries MarkMiss forgot.
    """

    probes: Mapping[Key, Probe] = field(default_factory=frozen_map)
    requests: Mapping[str, frozenset[Key]] = field(default_factory=frozen_map)
    step_batch: tuple[tuple[Key, int, str], ...] = ()
    outstanding: Mapping[int, Group] = field(default_factory=frozen_map)
    queue: tuple[tuple[Group, ...], ...] = ()
    taken: Mapping[int, Group] = field(default_factory=frozen_map)
    timed_out: frozenset[int] = frozenset()
    inbox: tuple[Outcome, ...] = ()
    next_gen: int = 1
    next_batch: int = 1
    next_group: int = 1
    closed: bool = False
    worker: str = "up"
    death_unannounced: bool = False
    stray: Mapping[int, Group] = field(default_factory=frozen_map)
    stopped_taken: Mapping[int, Group] = field(default_factory=frozen_map)
    discarded: tuple[Outcome, ...] = ()
    out: tuple[Key, str, bool | None] | None = None
    # --- the chain walk's history (kvprobe.spec.model_chain) ---
    chain_asks: tuple[ChainAsk, ...] = ()
    chain_counted: frozenset[tuple[Key, int, bool]] = frozenset()
    # --- positioned lookups' history (kvprobe.spec.model_positions) ---
    position_probes: tuple[ChainAsk, ...] = ()
    deferred: frozenset[tuple[str, Key]] = frozenset()
    counts: Counts = Counts()
    submitted: Mapping[tuple[Key, int], int] = field(default_factory=frozen_map)
    submitted_not_pending: frozenset[tuple[Key, int]] = frozenset()
    applied: Mapping[tuple[Key, int], int] = field(default_factory=frozen_map)
    stale_applied: int = 0
    forced: frozenset[tuple[Key, int]] = frozenset()
    moot: frozenset[tuple[Key, int]] = frozenset()
    told: Mapping[tuple[Key, int], bool] = field(default_factory=frozen_map)
    backend_hits: frozenset[tuple[Key, int]] = frozenset()
    # --- the verdict cache (kvprobe.spec.model_cache) ---
    cache: CacheSpec | None = None
    now: float = 0.0
    memory: tuple[Remembered, ...] = ()
    backend_misses: frozenset[tuple[Key, int]] = frozenset()
    recalled: Mapping[tuple[Key, int], int] = field(default_factory=frozen_map)
    invalidated: frozenset[tuple[Key, int]] = frozenset()

    @property
    def worker_dead(self) -> bool:
        """Whether the worker died and was not revived yet."""
        return self.worker == DEAD

    def stuck(self) -> Mapping[int, Group]:
        """Every stuck call, of this worker or of one that died or stopped."""
        return {**self.stray, **{gid: self.taken[gid] for gid in self.timed_out}}


def tell(s: State, group: Group, verdicts: Sequence[bool] | None) -> Mapping[tuple[Key, int], bool]:
    """``told`` after the first outcome of ``group`` (None: a failure, every key False)."""
    told = dict(s.told)
    said = verdicts if verdicts is not None else (False,) * len(group.keys)
    for key, gen, verdict in zip(group.keys, group.gens, said, strict=False):
        told.setdefault((key, gen), bool(verdict))
    return frozen_map(told)


def initial() -> State:
    """The initial state: nothing held, nothing submitted."""
    return State()


def bump(counts: Counts, **deltas: int) -> Counts:
    """``counts`` with each named counter raised by its delta."""
    return replace(counts, **{name: getattr(counts, name) + d for name, d in deltas.items()})


def begin(s: State, *, scheduler: bool = True) -> State:
    """Start an action: scheduler actions raise ModelClosedError after shutdown; ``out`` is cleared."""
    if scheduler and s.closed:
        raise ModelClosedError("the manager was shut down")
    return s if s.out is None else replace(s, out=None)
