"""Trace validation: replay a recorded NDJSON trace against the reference model.

A trace (schema in :mod:`kvprobe.statemachine.trace`) records the scheduler's
actions with what the implementation observed: the verdict and phase a
lookup returned, the groups a flush submitted, every outcome drained, and the
number of states held after each action.  :func:`replay` performs the same
actions on :mod:`kvprobe.spec.model` and compares after each event.

Worker actions are not in the trace; they are implied by the outcomes
drained, and replay re-enacts them on the model just before each Drain: the
worker takes batches oldest first, a first outcome is the group's answer
(verdicts, a failure, or a timeout), and only a group that timed out may
later deliver one more outcome, marked *late*.  A Drain that cannot be
explained that way (a group never submitted, a second answer without a
timeout, keys or generations that do not match the submitted group) is a
divergence too.

A chain walk's Lookup events (those with an ``index``) are replayed through
the walk's rule (:func:`kvprobe.spec.model_chain.chain_step`): the events of
one walk are consecutive, indices 0, 1, ..., of one request, and each key
must be one the walk was allowed to look up (none after a key known NOT
stored, none of a window while a key before it is not known stored).

The first divergence is reported as :class:`TraceDivergence`, naming the
event's ``seq``, its action and what the model expected.  Run
``python -m kvprobe.spec.replay TRACE.ndjson`` to check a file (exit 0 when
it replays cleanly, 1 at a divergence, 2 for an unreadable file).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from types import MappingProxyType

from kvprobe.spec import model
from kvprobe.spec.actions import CALL_RETURNED, WORKER_EVENTS
from kvprobe.spec.lifecycle import Event
from kvprobe.spec.model import Group, ModelError, State
from kvprobe.spec.model_cache import recall
from kvprobe.spec.model_chain import MAX_CHAIN_WINDOW_GROWTH, chain_step

__all__ = ["ReplayReport", "TraceChecker", "TraceDivergence", "check_trace", "main", "replay"]

WORKER_DIED = "worker_died"


class TraceDivergence(AssertionError):
    """The implementation did something the reference model does not allow.

    Attributes:
        seq: the ``seq`` of the first diverging event (or its index).
        action: its action name.
        detail: what the model expected and what the trace shows.
    """

    def __init__(self, seq: int, action: str, detail: str) -> None:
        super().__init__(f"trace diverges from the reference model at event seq={seq} ({action}): {detail}")
        self.seq = seq
        self.action = action
        self.detail = detail


@dataclass(frozen=True)
class ReplayReport:
    """What a clean replay covered."""

    events: int
    by_action: Mapping[str, int]
    final: State


def _hex(key: bytes) -> str:
    return key.hex()


def _group_json(group: Group) -> dict[str, object]:
    return {"group": group.group_id, "req": group.req, "keys": [_hex(k) for k in group.keys], "gens": list(group.gens)}


class TraceChecker:
    """Replays a trace event by event (:meth:`feed`); :func:`replay` uses it."""

    def __init__(self) -> None:
        self.s = model.initial()
        self.known: dict[int, Group] = {}
        self.count = 0
        self.by_action: dict[str, int] = {}
        #: The chain walk whose Lookup events are being replayed: (request, keys so far).
        self.walk: tuple[str, list[bytes]] | None = None

    def feed(self, event: Mapping[str, object]) -> None:
        """Check the next event of the trace.

        Raises:
            TraceDivergence: the event is not what the model allows next.
        """
        if event.get("seq") != self.count:
            raise self.fail(event, f"seq {event.get('seq')!r} where {self.count} was expected (an event is missing)")
        if "index" not in event:
            self.walk = None  # a walk's events are consecutive: any other event ends it
        self.step(event)
        self.count += 1
        name = str(event.get("action"))
        self.by_action[name] = self.by_action.get(name, 0) + 1

    @property
    def state(self) -> State:
        """The model state after the events fed so far."""
        return self.s

    def fail(self, event: Mapping[str, object], detail: str) -> TraceDivergence:
        seq = event.get("seq")
        return TraceDivergence(seq if isinstance(seq, int) else -1, str(event.get("action")), detail)

    def step(self, event: Mapping[str, object]) -> None:
        action = event.get("action")
        if action in WORKER_EVENTS or action == CALL_RETURNED:
            # The worker's own events are checked by TLC (tla/Trace.tla); this
            # replay infers the worker's steps from the outcomes drained.
            return
        try:
            kind = Event(action)
        except ValueError:
            raise self.fail(event, f"unknown action {action!r}") from None
        try:
            if kind is Event.LOOKUP:
                self.lookup(event)
            elif kind is Event.FLUSH:
                self.flush(event)
            elif kind is Event.DRAIN:
                self.drain(event)
            elif kind is Event.CLEANUP:
                self.s = model.cleanup(self.s, _str(event, "req"))
            elif kind is Event.MARK_MISS:
                self.s = model.mark_miss(self.s, [_key(k) for k in _list(event, "keys")])
            elif kind is Event.SHUTDOWN:
                self.s = model.shutdown(self.s)
            else:  # an event added to the lifecycle without a replay here
                raise self.fail(event, f"the replay has no step for {action!r}")
        except ModelError as exc:
            raise self.fail(event, f"the model has no such step: {exc}") from exc
        except (KeyError, TypeError, ValueError) as exc:
            raise self.fail(event, f"malformed event {dict(event)!r}: {exc}") from exc
        size = event.get("size")
        if size != len(self.s.probes):
            raise self.fail(event, f"size: the model holds {len(self.s.probes)} states, the trace says {size}")

    def lookup(self, event: Mapping[str, object]) -> None:
        key, req = _key(_str(event, "key")), _str(event, "req")
        if "index" in event:
            self.s, verdict = self.chain_lookup(event, key, req)
        else:
            # With a verdict cache, a new state RESOLVED at once was served from memory.
            fresh = event.get("phase") == "RESOLVED" if self.s.cache is not None else None
            self.s, verdict = model.lookup(self.s, key, req, fresh=fresh)
        if event.get("verdict") != verdict or type(event.get("verdict")) is not type(verdict):
            raise self.fail(event, f"lookup({key.hex()}, {req}) returned {event.get('verdict')!r}, model: {verdict!r}")
        probe = self.s.probes.get(key)
        phase = None if probe is None else probe.phase.value
        if event.get("phase") != phase:
            raise self.fail(event, f"phase of {key.hex()} is {event.get('phase')!r}, model: {phase!r}")

    # --- the chain walk ------------------------------------------------------------------

    def chain_lookup(self, event: Mapping[str, object], key: bytes, req: str) -> tuple[State, bool | None]:
        """The Lookup of a walk's key at the event's ``index``, through the walk's rule."""
        index, window = event["index"], event.get("window")
        if index == 0:
            self.walk = (req, [])
        if self.walk is None or self.walk[0] != req or not isinstance(index, int) or index != len(self.walk[1]):
            raise self.fail(
                event, f"chain index {index!r} of {req}: not the next key of a walk (its events are consecutive)"
            )
        if window == "all":
            first = None
        elif type(window) is int and window >= 1:
            first = window
        else:
            raise self.fail(event, f"chain window {window!r}: neither 'all' nor a positive int")
        growth = event.get("growth", 2.0)
        if (
            not isinstance(growth, (int, float))
            or isinstance(growth, bool)
            or not 1.0 < growth <= MAX_CHAIN_WINDOW_GROWTH
        ):
            raise self.fail(event, f"chain window growth {growth!r}: not a number in (1, {MAX_CHAIN_WINDOW_GROWTH:g}]")
        walked = self.walk[1]
        before = [probe.verdict if (probe := self.s.probes.get(k)) else None for k in walked]
        walked.append(key)
        s = model.drain_all(self.s)
        if s.cache is not None and key not in s.probes and event.get("phase") != "RESOLVED":
            # The walk probed a key it has an entry for: the entry had expired (as lookup's fresh=False).
            s, _ = recall(s, key, fresh=False)
        return chain_step(s, req, key, before, first, growth)

    def flush(self, event: Mapping[str, object]) -> None:
        self.s, groups = model.flush(self.s)
        expected = [_group_json(g) for g in groups]
        if event.get("groups") != expected:
            raise self.fail(event, f"flush submitted {event.get('groups')!r}, model: {expected!r}")
        for group in groups:
            self.known[group.group_id] = group

    def drain(self, event: Mapping[str, object]) -> None:
        gid = event["group"]
        if gid == 0 and event.get("failure") == WORKER_DIED:
            # The Drain of a dead worker (its death marker, or the manager
            # noticing): every open group fails, in submission order.
            for open_gid in sorted(self.s.outstanding):
                self.drain({**event, "group": open_gid, **_group_json(self.known[open_gid])})
            return
        if not isinstance(gid, int) or gid not in self.known:
            raise self.fail(event, f"outcome for group {gid!r}, which no flush submitted")
        group = self.known[gid]
        keys = [_key(k) for k in _list(event, "keys")]
        if tuple(keys) != group.keys or tuple(_list(event, "gens")) != group.gens:
            raise self.fail(event, f"outcome keys/generations differ from submitted group {_group_json(group)!r}")
        failure, verdicts, late = event.get("failure"), event.get("verdicts"), event.get("late")
        if (failure is None) == (verdicts is None):
            raise self.fail(event, "an outcome has exactly one of verdicts and failure")
        s = self.s
        if failure == WORKER_DIED:
            # The manager failed every open group of a dead worker itself.
            if gid not in s.outstanding:
                raise self.fail(event, f"worker-died failure for group {gid}, which is not open")
            taken = {g: grp for g, grp in s.taken.items() if g != gid}
            queue = tuple(b for b in (tuple(g for g in batch if g.group_id != gid) for batch in s.queue) if b)
            s = replace(s, taken=MappingProxyType(taken), queue=queue, timed_out=s.timed_out - {gid})
            self.s = model.apply_outcome(s, model.Outcome(group, None, WORKER_DIED, bool(late)))
            return
        while gid not in s.taken and any(g.group_id == gid for batch in s.queue for g in batch):
            s, _ = model.take_batch(s)
        if gid not in s.taken:
            raise self.fail(event, f"a second outcome for group {gid}, which did not time out")
        if failure == model.TIMEOUT and not late:
            if gid in s.timed_out:
                raise self.fail(event, f"group {gid} timed out twice")
            s = model.time_out(s, gid)
        elif verdicts is not None:
            s = model.complete_group(s, gid, [_bool(v) for v in _list(event, "verdicts")])
        else:
            s = model.fail_group(s, gid, str(failure))
        if s.inbox[-1].late != late:
            raise self.fail(event, f"late={late!r}, but the model's outcome has late={s.inbox[-1].late}")
        self.s = model.drain(s)


def _str(event: Mapping[str, object], name: str) -> str:
    value = event[name]
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a string")
    return value


def _list(event: Mapping[str, object], name: str) -> Sequence[object]:
    value = event[name]
    if not isinstance(value, list):
        raise TypeError(f"{name} must be a list")
    return value


def _key(value: object) -> bytes:
    if not isinstance(value, str):
        raise TypeError("keys are hex strings")
    return bytes.fromhex(value)


def _bool(value: object) -> bool:
    if not isinstance(value, bool):
        raise TypeError("verdicts are booleans")
    return value


def replay(events: Iterable[Mapping[str, object]]) -> ReplayReport:
    """Replay ``events`` against the reference model.

    Raises:
        TraceDivergence: at the first event the model does not reproduce
            (including a malformed event or a ``seq`` out of order).
    """
    checker = TraceChecker()
    for event in events:
        checker.feed(event)
    return ReplayReport(checker.count, dict(checker.by_action), checker.s)


def check_trace(events: Iterable[Mapping[str, object]]) -> TraceDivergence | None:
    """The first divergence of ``events`` from the model, or None if it replays cleanly."""
    try:
        replay(events)
    except TraceDivergence as divergence:
        return divergence
    return None


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m kvprobe.spec.replay TRACE.ndjson...``: 0 clean, 1 divergence, 2 unreadable."""
    paths = list(sys.argv[1:] if argv is None else argv)
    if not paths:
        print("usage: python -m kvprobe.spec.replay TRACE.ndjson [...]", file=sys.stderr)
        return 2
    code = 0
    for path in paths:
        try:
            with open(path, encoding="utf-8") as stream:
                events = [json.loads(line) for line in stream if line.strip()]
        except (OSError, ValueError) as exc:
            print(f"{path}: cannot read trace: {exc}", file=sys.stderr)
            return 2
        try:
            report = replay(events)
        except TraceDivergence as divergence:
            print(f"{path}: {divergence}")
            code = 1
            continue
        print(f"{path}: {report.events} events replay cleanly {dict(sorted(report.by_action.items()))}")
    return code


if __name__ == "__main__":
    sys.exit(main())
