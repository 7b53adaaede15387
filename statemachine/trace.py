"""Event traces of the core, named by TLA+ action, for trace validation.

Tracing costs nothing when off: the manager then uses a plain
:class:`~kvprobe.statemachine.core.LookupCore`.  With a sink it uses
:class:`TracingCore`, which emits one JSON-ready dict after each action:

=============  ===============================================================
``action``     other fields
=============  ===============================================================
``Lookup``     ``key`` (hex), ``req``, ``verdict`` (true/false/null), ``phase``
``Flush``      ``groups``: list of ``{group, req, keys, gens}``
``Drain``      ``group``, ``keys``, ``gens``, ``verdicts`` (list or null),
               ``failure`` (FailureKind value or null), ``late``
``Cleanup``    ``req``
``MarkMiss``   ``keys``
``Shutdown``   (none)
=============  ===============================================================

``lookup_chain`` emits one ``Lookup`` event per key it looked up (a chain is
a sequence of Lookup actions).  Every event also has ``seq`` (0, 1, ...), ``size`` (states held after the
action), ``after`` (for each key the action touched, its state afterwards:
``{key, phase, gen, verdict, waiters}``, phase ``ABSENT`` and gen 0 when no
state is held) and ``open`` (the groups submitted and not answered yet, as
``{req, keys, gens}``), so that the trace spec can pin the model's state
down after every event: a core that applies an outcome it should drop, or
keeps a state it should reclaim, records a trace no behaviour of the model
matches.  Worker actions are not recorded: they are implied by the
outcomes the scheduler drains.  :class:`NdjsonTrace` writes events one JSON object per
line.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from typing import IO

from kvprobe.statemachine.core import LookupCore
from kvprobe.statemachine.types import Batch, ChainAnswer, GroupOutcome, HasReqId, Key

__all__ = ["NdjsonTrace", "TraceSink", "TracingCore", "read_ndjson", "tracing"]

TraceSink = Callable[[dict[str, object]], None]


class TracingCore(LookupCore):
    """A core that reports each action to ``sink`` after performing it.

    Use :func:`tracing` to add the same reporting to a subclass of
    :class:`LookupCore` (the mutants of the test suite are such subclasses).
    """

    def __init__(self, sink: TraceSink) -> None:
        super().__init__()
        self._sink = sink
        self._seq = 0

    def _emit(self, action: str, touched: Iterable[Key] = (), size: int | None = None, **fields: object) -> None:
        event: dict[str, object] = {
            "seq": self._seq,
            "action": action,
            **fields,
            "size": len(self.states) if size is None else size,
            "after": [self._snapshot(key) for key in dict.fromkeys(touched)],
            "open": [
                {"req": g.req_id, "keys": [k.hex() for k in g.keys], "gens": list(g.generations)}
                for g in self.outstanding.values()
            ],
        }
        self._seq += 1
        self._sink(event)

    def _snapshot(self, key: Key) -> dict[str, object]:
        # dict.get: after shutdown the table refuses its own get().
        state = dict.get(self.states, key)
        if state is None:
            return {"key": key.hex(), "phase": "ABSENT", "gen": 0, "verdict": None, "waiters": []}
        phase = "ABSENT" if state.phase is None else state.phase.value
        return {
            "key": key.hex(),
            "phase": phase,
            "gen": state.generation,
            "verdict": state.verdict,
            "waiters": sorted(state.waiters),
        }

    def lookup(self, key: Key, req_context: HasReqId) -> bool | None:
        verdict = super().lookup(key, req_context)
        phase = self.phase(key)
        self._emit(
            "Lookup",
            (key,),
            key=key.hex(),
            req=req_context.req_id,
            verdict=verdict,
            phase=None if phase is None else phase.value,
        )
        return verdict

    def lookup_chain(self, keys: Sequence[Key], req_context: HasReqId) -> ChainAnswer:
        # A chain is a sequence of Lookup actions, so it is traced as one
        # Lookup event per key looked up, as the single lookups would be.
        # The core's own walk runs (a defect in it must show in the trace);
        # the events are rebuilt after it from what a lookup cannot change
        # afterwards: a later lookup of the walk never changes an earlier
        # key's state (a repeated key is the same request asking again) nor
        # the open groups, so each key's state now is its state after its own
        # Lookup, and only the size needs replaying (the new states are the
        # step batch's new entries, one per key asked first by this walk).
        mark = len(self.step_batch)
        answer = super().lookup_chain(keys, req_context)
        created = {id(state) for state in self.step_batch[mark:]}
        states = self.states
        size = len(states) - len(created)
        req = req_context.req_id
        for key in list(keys)[: answer.looked_up]:
            state = states[key]
            if id(state) in created:
                created.discard(id(state))
                size += 1
            phase = state.phase
            self._emit(
                "Lookup",
                (key,),
                size=size,
                key=key.hex(),
                req=req,
                verdict=state.verdict,
                phase=None if phase is None else phase.value,
            )
        return answer

    def flush(self) -> Batch | None:
        touched = [state.key for state in self.step_batch]
        batch = super().flush()
        groups = (
            []
            if batch is None
            else [
                {"group": g.group_id, "req": g.req_id, "keys": [k.hex() for k in g.keys], "gens": list(g.generations)}
                for g in batch.groups
            ]
        )
        self._emit("Flush", touched, groups=groups)
        return batch

    def apply(self, outcome: GroupOutcome) -> None:
        super().apply(outcome)
        group = outcome.group
        self._emit(
            "Drain",
            group.keys,
            group=group.group_id,
            keys=[k.hex() for k in group.keys],
            gens=list(group.generations),
            verdicts=None if outcome.verdicts is None else list(outcome.verdicts),
            failure=None if outcome.failure is None else outcome.failure.value,
            late=outcome.late,
        )

    def cleanup(self, req_id: str) -> None:
        request = self.requests.get(req_id)
        touched = [] if request is None else [state.key for state in request.states]
        super().cleanup(req_id)
        self._emit("Cleanup", touched, req=req_id)

    def mark_miss(self, keys: Iterable[Key]) -> None:
        keys = list(keys) if not isinstance(keys, (bytes, bytearray, memoryview, str)) else keys
        super().mark_miss(keys)
        self._emit("MarkMiss", keys, keys=[k.hex() for k in keys])

    def shutdown(self, message: str = "the lookup manager was shut down") -> None:
        touched = list(self.states)
        super().shutdown(message)
        self._emit("Shutdown", touched)


def tracing(core_class: type[LookupCore]) -> Callable[[TraceSink], LookupCore]:
    """A factory of cores of ``core_class`` that also report to a trace sink."""
    if issubclass(core_class, TracingCore):
        return core_class
    # TracingCore's overrides come first in the MRO and call core_class's actions.
    traced: type[TracingCore] = type(f"Tracing{core_class.__name__}", (TracingCore, core_class), {})
    return traced


class NdjsonTrace:
    """A trace sink writing one JSON object per line to a text stream."""

    def __init__(self, stream: IO[str]) -> None:
        self._stream = stream

    def __call__(self, event: dict[str, object]) -> None:
        self._stream.write(json.dumps(event, separators=(",", ":")) + "\n")


def read_ndjson(lines: Iterable[str]) -> list[dict[str, object]]:
    """Parse an NDJSON trace (blank lines are skipped)."""
    return [json.loads(line) for line in lines if line.strip()]
