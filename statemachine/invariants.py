"""The invariants of docs/properties.md that a snapshot of the core's tables can show.

:meth:`LookupCore.violations <kvprobe.statemachine.core.LookupCore.violations>`
reads its tables through :func:`layout_violations`; checked mode calls it
after every action.  Each message starts with the invariant's name as in
``tla/KVProbe.tla`` and names the offending key or request.  The checks
read the data layout the hot path relies on (:mod:`kvprobe.statemachine.records`):
states held by identity, a dropped state marked ABSENT, a cleaned-up
registration marked so.  Nothing here changes anything.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping

from kvprobe.spec.lifecycle import ABSENT, LookupPhase
from kvprobe.statemachine.records import ProbeState, WaitingRequest
from kvprobe.statemachine.types import Key, ProbeGroup

__all__ = ["layout_violations"]

PENDING = LookupPhase.PENDING
IN_FLIGHT = LookupPhase.IN_FLIGHT
RESOLVED = LookupPhase.RESOLVED


def layout_violations(
    states: Mapping[Key, ProbeState],
    requests: Mapping[str, WaitingRequest],
    outstanding: Iterable[ProbeGroup],
    step_batch: Iterable[ProbeState],
) -> Iterator[str]:
    """Yield one message per broken invariant of the tables (nothing when all hold).

    ``states`` is the probe table, ``requests`` the reverse index,
    ``outstanding`` the groups submitted and not answered, ``step_batch``
    this step's new states.  Never raises.
    """
    yield from _state_violations(states, requests)
    yield from _request_violations(states, requests)
    yield from _generation_violations(states, outstanding, step_batch)


def _state_violations(states: Mapping[Key, ProbeState], requests: Mapping[str, WaitingRequest]) -> Iterator[str]:
    """Each held state: filed under its key, live, verdict iff RESOLVED, waited on, indexed."""
    for key, state in states.items():
        if state.key != key or state.phase is ABSENT:
            yield f"ReverseIndexConsistent: the table holds {state!r} under {key.hex()}"
        if (state.verdict is not None) != (state.phase is RESOLVED):
            yield f"VerdictIffResolved: {key.hex()} {state!r}"
        if not state.waiters and state.phase is not IN_FLIGHT:
            yield f"NothingLeaks: {key.hex()} {state!r} has no waiters"
        for req_id in state.waiters:
            request = requests.get(req_id)
            if request is None or all(held is not state for held in request.states):
                yield f"ReverseIndexConsistent: {req_id} waits on {key.hex()} but the index lacks it"
        owner = state.owner
        if owner.waiting and (requests.get(owner.req_id) is not owner or owner.req_id not in state.waiters):
            yield f"ReverseIndexConsistent: {key.hex()} was created by {owner!r}, which no longer waits on it"


def _request_violations(states: Mapping[Key, ProbeState], requests: Mapping[str, WaitingRequest]) -> Iterator[str]:
    """Each registration: under its own id, waiting, listing live states it waits on, each once."""
    for req_id, request in requests.items():
        if request.req_id != req_id or not request.waiting:
            yield f"ReverseIndexConsistent: {request!r} is registered as {req_id}"
        if len({id(state) for state in request.states}) != len(request.states):
            yield f"ReverseIndexConsistent: {req_id} lists a state twice"
        for state in request.states:
            if states.get(state.key) is not state or req_id not in state.waiters:
                yield f"ReverseIndexConsistent: ({req_id}, {state.key.hex()}) points at no live waiting state"


def _generation_violations(
    states: Mapping[Key, ProbeState], outstanding: Iterable[ProbeGroup], step_batch: Iterable[ProbeState]
) -> Iterator[str]:
    """Each held generation: submitted at most once, queued iff PENDING, answered if IN_FLIGHT."""
    # Counted by identity: a state object is one generation.
    submitted: dict[int, int] = {}
    for group in outstanding:
        for state in group.states:
            submitted[id(state)] = submitted.get(id(state), 0) + 1
    in_step_batch: dict[int, int] = {}
    for state in step_batch:
        in_step_batch[id(state)] = in_step_batch.get(id(state), 0) + 1
    for key, state in states.items():
        count = submitted.get(id(state), 0)
        if count > 1:
            yield f"EnqueueOnce: {key.hex()} generation {state.generation} is in {count} open groups"
        queued = in_step_batch.get(id(state), 0)
        if state.phase is PENDING and (count or queued != 1):
            yield f"NoDuplicateProbe: PENDING {key.hex()} is submitted, or not queued exactly once"
        if state.phase is IN_FLIGHT and not count:
            yield f"NothingLeaks: {key.hex()} IN_FLIGHT with no open group of its generation"
