"""vLLM 0.33's names around its lookup manager, and read-only views for vLLM-style tests.

vLLM 0.33's ``async_lookup`` module defines ``LookupPhase`` and
``LookupState`` beside ``AsyncLookupManager``; a tier that switches its
import imports all three from ``kvprobe.integrations.vllm``.  ``LookupPhase``
is kvprobe's own phase enum (the same three names).

vLLM's tier tests poll private fields of vLLM's class
(``_pending_results.empty()``, ``_lookup_batch``, ``_lookup_state``).  The
drop-in keeps no such fields; it offers **read-only views for test
compatibility** with the same reading surface, computed from kvprobe's
probe table (see :class:`PublishedResults` and :func:`state_snapshot`).
Changing them changes nothing, and nothing in kvprobe reads them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kvprobe.spec.lifecycle import LookupPhase
from kvprobe.statemachine.core import LookupCore
from kvprobe.statemachine.records import ProbeState

__all__ = ["LookupPhase", "LookupState", "PublishedResults", "state_snapshot"]


@dataclass(slots=True)
class LookupState:
    """One key's probe, in the fields of vLLM 0.33's ``LookupState``.

    ``result`` is None while the probe is PENDING or IN_FLIGHT, then the
    verdict; ``request_ids`` are the requests waiting on it.  Read from the
    drop-in's ``_lookup_state`` view it is a copy: changing it changes nothing.
    """

    generation: int
    phase: LookupPhase = LookupPhase.PENDING
    result: bool | None = None
    request_ids: set[str] = field(default_factory=set)


def state_snapshot(state: ProbeState) -> LookupState:
    """A kvprobe probe state as a :class:`LookupState` copy."""
    phase = state.phase if state.phase is not None else LookupPhase.RESOLVED  # not in a table: never shown
    return LookupState(state.generation, phase, state.verdict, set(state.waiters))


class PublishedResults:
    """Test compatibility: what vLLM's tests ask of vLLM's ``_pending_results`` queue.

    ``empty()`` is False while the worker has published outcomes the
    scheduler has not applied yet (kvprobe publishes one per request group;
    vLLM one per step).  Read from any thread.  After shutdown it is empty
    (the core's inbox is then a closed, empty one).
    """

    __slots__ = ("_core",)

    def __init__(self, core: LookupCore) -> None:
        self._core = core

    def empty(self) -> bool:
        """True when no published outcome awaits the scheduler."""
        return self.qsize() == 0

    def qsize(self) -> int:
        """Published outcomes not applied yet (request groups, not steps)."""
        return len(self._core.inbox)
