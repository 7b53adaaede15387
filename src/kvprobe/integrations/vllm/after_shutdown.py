"""What a drop-in answers once shut down: vLLM 0.33's table without a worker.

vLLM 0.33's ``shutdown`` stops its thread after the batches already handed
to it are done, applies their results, and keeps its table: lookups still
answer, ``cleanup`` and ``mark_miss`` still work, and a key no verdict was
known for answers None (nothing will probe it).  kvprobe's own manager
refuses every call after ``shutdown`` and empties its table, so the drop-in
copies the table at shutdown into an :class:`AfterShutdownTable` and answers
from it.

Differences from vLLM 0.33, by design: a ``flush`` submits nothing (vLLM
posts the keys to its stopped thread, where they wait for ever), and a key
whose last request is cleaned up is forgotten whatever its phase (vLLM keeps
the entries it posted to that thread).  Neither changes an answer.
"""

from __future__ import annotations

from collections.abc import Iterable

from kvprobe.integrations.vllm.compat import LookupPhase, LookupState, state_snapshot
from kvprobe.statemachine.core import LookupCore
from kvprobe.statemachine.inputs import key_list
from kvprobe.statemachine.types import HasReqId, InvalidInputError, Key

__all__ = ["AfterShutdownTable"]


class AfterShutdownTable:
    """The probe table as it was at shutdown, answering vLLM's calls with no worker.

    Built from a live core just before kvprobe's manager is shut down.  All
    methods run on the caller's thread; none blocks.
    """

    __slots__ = ("_next_generation", "_req_keys", "_states")

    def __init__(self, core: LookupCore) -> None:
        self._states: dict[Key, LookupState] = {key: state_snapshot(s) for key, s in core.states.items()}
        self._req_keys: dict[str, set[Key]] = {
            req_id: {s.key for s in request.states} for req_id, request in core.requests.items()
        }
        self._next_generation = 1 + max((s.generation for s in self._states.values()), default=0)

    def lookup(self, key: Key, req_context: HasReqId) -> bool | None:
        """The verdict known at shutdown (or forced since), else None.

        Raises:
            InvalidInputError: ``key`` is not bytes or ``req_context.req_id``
                is not a string (nothing changed).
        """
        req_id = getattr(req_context, "req_id", None)
        if type(key) is not bytes or not isinstance(req_id, str):
            raise InvalidInputError(
                f"lookup() takes bytes and a context with a str req_id, got {type(key).__name__} "
                f"and a req_id of type {type(req_id).__name__}"
            )
        state = self._states.get(key)
        if state is None:
            state = self._states[key] = LookupState(self._next_generation)
            self._next_generation += 1
        state.request_ids.add(req_id)
        self._req_keys.setdefault(req_id, set()).add(key)
        return state.result

    def cleanup(self, req_id: str) -> None:
        """Release the request; a key nobody waits on any more is forgotten.

        Raises:
            InvalidInputError: ``req_id`` is not a string.
        """
        if not isinstance(req_id, str):
            raise InvalidInputError(f"cleanup() takes a str req_id, got {type(req_id).__name__}")
        for key in self._req_keys.pop(req_id, ()):
            state = self._states[key]
            state.request_ids.discard(req_id)
            if not state.request_ids:
                del self._states[key]

    def mark_miss(self, keys: Iterable[Key]) -> None:
        """Keys with a verdict answer False from now on; the others are skipped.

        Raises:
            InvalidInputError: as the drop-in's ``mark_miss`` (nothing changed).
        """
        for key in key_list(keys, "mark_miss"):
            state = self._states.get(key)
            if state is not None and state.phase is LookupPhase.RESOLVED:
                state.result = False

    def states(self) -> dict[Key, LookupState]:
        """A copy of every entry."""
        return {k: LookupState(s.generation, s.phase, s.result, set(s.request_ids)) for k, s in self._states.items()}

    def __len__(self) -> int:
        return len(self._states)
