"""Values that cross the line between the scheduler-owned core and the worker.

The core produces :class:`ProbeGroup` s at flush, a worker turns each into
exactly one first :class:`GroupOutcome` (and, after a timeout, possibly one
late one), and the core applies outcomes when it drains.  Groups and
outcomes are immutable records; a group refers to the :class:`ProbeState` s
it submitted, and the worker reads nothing of them but their ``key``, which
never changes.  Errors are typed by who is to blame, as in h11.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from operator import attrgetter
from typing import Protocol, runtime_checkable

from kvprobe.statemachine.records import ProbeState

__all__ = [
    "Batch",
    "ChainAnswer",
    "FailureKind",
    "GroupOutcome",
    "HasReqId",
    "InvalidInputError",
    "InvalidValueError",
    "InvariantViolation",
    "KvprobeError",
    "ManagerClosedError",
    "ProbeGroup",
    "ReqContext",
    "Stats",
    "WrongThreadError",
    "death_marker",
    "is_death_marker",
]

Key = bytes


@runtime_checkable
class HasReqId(Protocol):
    """What the manager needs of a request context: a ``req_id`` string."""

    @property
    def req_id(self) -> str: ...


@dataclass(frozen=True, slots=True)
class ReqContext:
    """A ready-made request context.  Any object with ``.req_id: str`` works too."""

    req_id: str


@dataclass(frozen=True, slots=True)
class ChainAnswer:
    """What one ``lookup_chain`` call learned about a request's ordered keys.

    The walk looks the keys up in order and stops after the first key whose
    verdict is False; it also stops at the end of the window of the first
    key whose verdict is unknown (the windows grow: see
    :mod:`kvprobe.statemachine.windows`).  Keys after a stop are not looked
    up.  In the exact mode every key counted as stored has a verdict True
    that the backend gave for that key; in the inferred mode all but
    :attr:`inferred` of them do.

    Attributes:
        leading_hits: how many keys, from the first, are known stored (the
            count stops at the first key that is not known stored).  Once
            :attr:`decided`, the stored prefix is exactly this long.
        stopped_at_miss: the walk met a key known NOT stored and looked up
            nothing after it.
        pending: some key before the stop is not known yet (its probe is
            pending or in flight, or its window was not probed yet): ask
            again next step.
        looked_up: how many keys were looked up (the stopping key included;
            keys past the current window are not counted).
        inferred: how many of the ``leading_hits`` keys were answered
            stored by inference rather than by the backend: always 0 in
            the exact mode; in the inferred mode
            (:mod:`kvprobe.statemachine.inferred`) the keys before the
            verified boundary that the search did not probe.  A load of one
            that fails is reported with ``mark_miss``, and the chain is
            walked exactly from then on.
    """

    leading_hits: int
    stopped_at_miss: bool
    pending: bool
    looked_up: int
    inferred: int = 0

    @property
    def decided(self) -> bool:
        """The stored prefix is known: ``leading_hits`` keys, then a miss or the chain's end."""
        return not self.pending


class KvprobeError(Exception):
    """Base class of kvprobe's own errors."""


class InvalidInputError(KvprobeError, TypeError):
    """The caller passed something the contract does not allow (caller's fault).

    Subclasses ``TypeError`` so that ``except TypeError`` keeps working.
    Nothing in the manager changed when this is raised.
    """


class InvalidValueError(KvprobeError, ValueError):
    """An argument has the right type but a value the contract does not allow."""


class InvariantViolation(AssertionError):
    """An invariant of docs/properties.md does not hold (a bug in kvprobe).

    Defined here rather than in the core so that the core compiles with
    mypyc, which cannot compile a subclass of a built-in exception.
    """


class ManagerClosedError(KvprobeError, RuntimeError):
    """The manager was shut down; every later call except ``shutdown`` raises this."""


class WrongThreadError(KvprobeError, RuntimeError):
    """A scheduler-only method was called from a thread other than the owner.

    ``flush``, ``drain_results``, ``cleanup``, ``mark_miss`` and ``phase``
    always check (one ``threading.get_ident()`` comparison); ``lookup`` and
    ``shutdown`` only in checked mode.

    Nothing in the manager changed when this is raised.
    """


class FailureKind(enum.Enum):
    """Why a request group's probe failed; every kind resolves its keys as MISS."""

    RAISED = "raised"  # batch_lookup raised when called
    RAISED_WHILE_ITERATING = "raised_while_iterating"
    SHORT_RESULT = "short_result"
    LONG_RESULT = "long_result"
    BAD_VERDICT = "bad_verdict"  # an element that is not a bool
    TIMEOUT = "timeout"  # exceeded lookup_timeout_s
    SATURATED = "saturated"  # too many calls already stuck past their timeout
    WORKER_DIED = "worker_died"
    WORKER_ERROR = "worker_error"  # the worker's own machinery failed (e.g. submit raised): no call made


# C-level getters: the worker builds a large group's key list with the GIL held.
_KEY_OF = attrgetter("key")
_GENERATION_OF = attrgetter("generation")


@dataclass(frozen=True, slots=True, eq=False)
class ProbeGroup:
    """The keys of one request submitted together: one ``batch_lookup`` call.

    ``states[i]`` is the probe state (one generation) of ``keys[i]``; a result
    is applied only to that state, and only while it is still IN_FLIGHT.
    """

    group_id: int
    batch_id: int
    req_id: str
    req_context: object
    states: tuple[ProbeState, ...]

    @property
    def keys(self) -> tuple[Key, ...]:
        """The keys to probe, in order (built on each access: read it once)."""
        return tuple(map(_KEY_OF, self.states))

    @property
    def generations(self) -> tuple[int, ...]:
        """``generations[i]`` is the generation of ``keys[i]``."""
        return tuple(map(_GENERATION_OF, self.states))


#: The group of a death marker: no keys, never submitted (group ids start at 1).
_DEATH_GROUP = ProbeGroup(0, 0, "", None, ())


def death_marker(detail: str) -> GroupOutcome:
    """The outcome a worker publishes when its dispatcher ends unexpectedly.

    Draining it fails every group still open with ``WORKER_DIED`` (see
    ``docs/worker.md``): a ``lookup`` notices the death through the inbox it
    already checks, so waiting requests get their verdict without a flush.
    """
    return GroupOutcome(_DEATH_GROUP, None, FailureKind.WORKER_DIED, detail)


def is_death_marker(outcome: GroupOutcome) -> bool:
    """Whether ``outcome`` is a :func:`death_marker` rather than a group's outcome."""
    return outcome.group is _DEATH_GROUP


@dataclass(frozen=True, slots=True)
class Batch:
    """Everything one flush submitted, partitioned by request."""

    batch_id: int
    groups: tuple[ProbeGroup, ...]


@dataclass(frozen=True, slots=True)
class GroupOutcome:
    """What the worker learned about one group.

    Exactly one of ``verdicts`` (one bool per key, in order) and ``failure`` is
    set.  ``late`` marks the real answer of a call that had already been
    reported as timed out; the core drops it unless a state of that
    generation is still waiting (it never is: the timeout resolved it).
    ``call_s`` is how long the backend call took, from its own start (for a
    timeout: until it was given up on); None when no call was timed (no
    call was made, or a worker of its own did not say).  It is an
    observation, not part of the outcome: equality ignores it.
    ``unanswered``: indices of ``verdicts`` whose ``False`` the backend
    marked as no answer (:class:`kvprobe.backends.base.Verdicts`): MISS, but
    never remembered by the verdict cache.
    """

    group: ProbeGroup
    verdicts: tuple[bool, ...] | None
    failure: FailureKind | None = None
    detail: str = ""
    late: bool = False
    call_s: float | None = field(default=None, compare=False)
    unanswered: frozenset[int] = frozenset()


@dataclass(slots=True)
class Stats:
    """Counters of what the manager did (a snapshot when read from ``m.stats``)."""

    probes_created: int = 0  # new generations (ABSENT -> PENDING)
    probes_submitted: int = 0  # PENDING -> IN_FLIGHT at flush
    joins: int = 0  # a second request joined a PENDING probe
    in_flight_reuses: int = 0  # a request joined an IN_FLIGHT probe
    never_probed: int = 0  # PENDING states reclaimed before any flush
    orphans_reclaimed: int = 0  # results (or misses) for states nobody waited on
    stale_results_dropped: int = 0  # per key: older generation, or already resolved
    forced_misses: int = 0  # mark_miss applied to a live state
    hits: int = 0  # verdicts applied: True
    misses: int = 0  # verdicts applied: False (including failures)
    batches: int = 0
    backend_calls: int = 0
    backend_errors: int = 0  # raised, raised while iterating, short, long, bad verdict
    timeouts: int = 0
    saturated: int = 0
    worker_deaths: int = 0
    late_results: int = 0
    unknown_cleanups: int = 0
    unknown_mark_miss: int = 0
    failures: dict[str, int] = field(default_factory=dict)  # by FailureKind value
