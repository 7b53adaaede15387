"""What the core keeps: one :class:`ProbeState` per key, one :class:`WaitingRequest` per request.

Both are mutable records owned by the scheduler thread.  They are plain
classes with ``__slots__`` rather than dataclasses because one of each is
created on the hot path (a new key, a new request).

Identity carries meaning here.  A :class:`ProbeState` object *is* one
generation of its key: a key that is reclaimed and asked again gets a new
object, so anything that must refer to "this generation" (the step batch,
a request's list of states, a submitted group) holds the object, and a state
dropped from the table is marked ABSENT so those holders can tell.  A
:class:`WaitingRequest` object is one registration of a request id, from its
first lookup to its cleanup; a request id used again after its cleanup gets a
new one.
"""

from __future__ import annotations

from kvprobe.spec.lifecycle import Phase

__all__ = ["ProbeState", "WaitingRequest"]


class WaitingRequest:
    """A request the manager has seen and not cleaned up yet.

    ``states`` lists each probe state the request waits on, once.  ``waiting``
    turns False at its cleanup, which is how a probe it created learns, at
    flush, that it must be grouped under another waiting request.
    """

    __slots__ = ("context", "req_id", "states", "waiting")

    def __init__(self, req_id: str, context: object) -> None:
        self.req_id = req_id
        self.context = context
        self.states: list[ProbeState] = []
        self.waiting = True

    def __repr__(self) -> str:
        status = "waiting" if self.waiting else "cleaned up"
        return f"WaitingRequest({self.req_id!r}, {len(self.states)} states, {status})"


class ProbeState:
    """The one probe state of a key: phase, generation, waiters, verdict.

    Made only by the core's Lookup of a key that has no state
    (``LookupCore._new_probe``, the one place that sets these fields): a new
    generation, PENDING, with its creator as the one waiter and no verdict.
    ``owner`` is the request whose lookup created it: the group it is
    submitted in if that request still waits at flush.  ``phase`` is None
    (ABSENT) once the core dropped the state from its table.

    There is no ``__init__``: in pure Python a class call with a Python
    ``__init__`` costs about a quarter of a new key's lookup, so the core
    allocates the object (``ProbeState()``, in C) and sets the fields itself.
    """

    __slots__ = ("generation", "key", "owner", "phase", "verdict", "waiters")

    phase: Phase
    generation: int
    waiters: set[str]
    verdict: bool | None
    key: bytes
    owner: WaitingRequest

    def __repr__(self) -> str:
        phase = "ABSENT" if self.phase is None else self.phase.name
        waiters = sorted(self.waiters)
        return f"ProbeState({phase}, gen={self.generation}, waiters={waiters}, verdict={self.verdict})"
