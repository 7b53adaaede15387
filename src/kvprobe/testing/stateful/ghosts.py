"""The history of a real manager's run, recorded from its trace as it happens.

The reference model keeps history variables (what was submitted, applied,
forced to MISS, ...) that the manager does not; the invariants of
``docs/properties.md`` need them on both sides.  :class:`GhostRecorder` is
the manager's trace sink: it derives them from the core's table before and
after each event, and feeds every event to the trace replay, so each run's
whole trace is validated against the model as it grows.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from kvprobe.spec import LookupPhase
from kvprobe.spec.model_chain import window_start
from kvprobe.spec.model_state import CacheSpec, ChainAsk
from kvprobe.spec.replay import TraceChecker
from kvprobe.statemachine import LookupCore

__all__ = ["GhostRecorder", "held_phase"]

#: A key's state as the recorder compares it between events: phase, generation, verdict.
Snapshot = dict[bytes, tuple[LookupPhase, int, bool | None]]


def held_phase(phase: LookupPhase | None) -> LookupPhase:
    """The phase of a state the table holds (never ABSENT: that is a dropped state).

    Raises:
        AssertionError: the table holds a state marked ABSENT.
    """
    if phase is None:
        raise AssertionError("the probe table holds a state marked ABSENT (dropped)")
    return phase


class GhostRecorder:
    """Trace sink that derives the model's history variables from the real core.

    It is called synchronously inside each core action, so it can look at the
    core's table right after the action; comparing with the table after the
    previous event shows what the action changed.  Every event is also
    round-tripped through JSON and fed to a :class:`TraceChecker`.
    """

    def __init__(self) -> None:
        self.core: LookupCore | None = None
        self.events: list[dict[str, object]] = []
        self.checker = TraceChecker()
        self.submitted: dict[tuple[bytes, int], int] = {}
        self.submitted_not_pending: set[tuple[bytes, int]] = set()
        self.applied: dict[tuple[bytes, int], int] = {}
        self.stale_applied = 0
        self.forced: set[tuple[bytes, int]] = set()
        self.moot: set[tuple[bytes, int]] = set()
        #: Generations answered from the verdict cache -> the generation whose answer they got.
        self.recalled: dict[tuple[bytes, int], int] = {}
        self._before: Snapshot = {}
        #: The open groups after the latest scheduler event (``{req, keys, gens}`` each).
        self._open: list[dict[str, Any]] = []
        #: Whether events are still recorded and checked (off for the final teardown).
        self.checking = True
        #: The chain walks' Lookups as they happened (model_chain's ChainAsk each), and the
        #: walk being recorded: its request and the verdicts its events reported so far.
        self.chain_asks: list[ChainAsk] = []
        self._walk: tuple[str, list[bool | None]] | None = None

    def bind(self, core: LookupCore) -> None:
        """Watch ``core``'s table (the manager's, once it exists; events before are only recorded)."""
        self.core = core
        self._before = self._snapshot()
        memory = core.memory
        if memory is not None:
            # The replay's model remembers as the core does (it is told which lookups were served).
            config = memory.config
            spec = CacheSpec(config.max_entries, config.hit_ttl_s, config.miss_ttl_s)
            self.checker.s = replace(self.checker.s, cache=spec)

    def _snapshot(self) -> Snapshot:
        assert self.core is not None
        return {k: (held_phase(s.phase), s.generation, s.verdict) for k, s in self.core.states.items()}

    def __call__(self, event: dict[str, object]) -> None:
        """Record ``event``, update the history variables from what it changed, and check it.

        Raises:
            TraceDivergence: the trace so far is not one the model allows (from the checker).
        """
        if not self.checking:
            return
        event = json.loads(json.dumps(event))
        self.events.append(event)
        if self.core is None:
            return
        after = self._snapshot()
        before = self._before
        action = event["action"]
        if action == "Flush":
            for group in event["groups"]:  # type: ignore[attr-defined]
                for hexkey, gen in zip(group["keys"], group["gens"], strict=True):
                    pair = (bytes.fromhex(hexkey), gen)
                    self.submitted[pair] = self.submitted.get(pair, 0) + 1
                    was = before.get(pair[0])
                    if was is None or was[0] is not LookupPhase.PENDING or was[1] != gen:
                        self.submitted_not_pending.add(pair)
        elif action == "Drain" and event["group"] == 0:
            self._dead_worker_drain(event, before, after)
        elif action == "Drain":
            for hexkey, gen in zip(event["keys"], event["gens"], strict=True):  # type: ignore[call-overload]
                key = bytes.fromhex(hexkey)
                was, now = before.get(key), after.get(key)
                if was is None or was == now:
                    continue
                if was[1] != gen:
                    self.stale_applied += 1
                    continue
                self.applied[(key, gen)] = self.applied.get((key, gen), 0) + 1
        elif action == "Lookup":
            self._record_recall(event, before, after)
        elif action == "MarkMiss":
            for hexkey in event["keys"]:  # type: ignore[attr-defined]
                was = before.get(bytes.fromhex(hexkey))
                if was is not None:
                    self.forced.add((bytes.fromhex(hexkey), was[1]))
                    if was[0] is LookupPhase.IN_FLIGHT:
                        self.moot.add((bytes.fromhex(hexkey), was[1]))
        self._record_chain_walk(event)
        self._before = after
        if "open" in event:
            self._open = event["open"]  # type: ignore[assignment]
        # Validate the trace as it grows: the first divergence fails the step that caused it.
        self.checker.feed(event)

    def _record_recall(self, event: dict[str, object], before: Snapshot, after: Snapshot) -> None:
        """A Lookup that made a new state RESOLVED was served from memory: record whose answer it got."""
        key = bytes.fromhex(str(event["key"]))
        now = after.get(key)
        memory = self.core.memory if self.core is not None else None
        if memory is None or now is None or key in before or now[0] is not LookupPhase.RESOLVED:
            return
        source = next((gen for k, _, gen, _ in memory.entries() if k == key), -1)
        self.recalled[(key, now[1])] = source

    def _record_chain_walk(self, event: dict[str, object]) -> None:
        """A chain walk's Lookup: record what the walk's earlier keys were answered when it asked.

        The events of one walk are consecutive (indices 0, 1, ...); each
        reports the verdict the walk got for its key, which no later Lookup
        of the same walk changes (nothing is drained mid-walk).
        """
        index = event.get("index")
        if event["action"] != "Lookup" or not isinstance(index, int):
            self._walk = None
            return
        req = str(event["req"])
        if index == 0 or self._walk is None or self._walk[0] != req:
            self._walk = (req, [])
        before = self._walk[1]
        window = event.get("window")
        start = window_start(window if isinstance(window, int) else None, index)
        self.chain_asks.append(ChainAsk(req, bytes.fromhex(str(event["key"])), index, start, tuple(before)))
        verdict = event.get("verdict")
        before.append(verdict if isinstance(verdict, bool) else None)

    def _dead_worker_drain(
        self,
        event: dict[str, object],
        before: Snapshot,
        after: Snapshot,
    ) -> None:
        """The Drain of a dead worker fails every open group at once and names no
        group: a state it changed had a result applied, of its own generation if
        one of the groups open before it holds that generation, else a stale one."""
        pairs = {(bytes.fromhex(k), int(g)) for o in self._open for k, g in zip(o["keys"], o["gens"], strict=True)}
        for item in event["after"]:  # type: ignore[attr-defined]
            key = bytes.fromhex(item["key"])
            was = before.get(key)
            if was is None or was == after.get(key):
                continue
            if (key, was[1]) in pairs:
                self.applied[(key, was[1])] = self.applied.get((key, was[1]), 0) + 1
            else:
                self.stale_applied += 1
