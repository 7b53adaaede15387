"""Phase transitions that TLC's explored state graph takes, against the lifecycle table.

TLC's ``-dump dot,actionlabels`` graph has one node per distinct state (with
every variable) and one edge per transition, labelled with the action name.
For each edge this module derives the per-key phase transitions the action
made: ``(source phase, action, waiters after, cached, destination phase)``,
where "waiters after" is whether any request still waits on the key after
the action (by the state's waiters or by the reverse index), and "cached"
is whether the step served the key from the verdict cache's memory, read
off the history the model records for it (``recalled``: the generation a
new state was served from; tla/cache.cfg).

Which keys an action concerns is read off the two states: the keys whose
probe state (phase, generation, waiters, verdict, forced flag) changed;
for Drain also the keys whose state has the drained outcome's generation
(a dropped duplicate result changes nothing but is still a Drain of that
key's probe); for Shutdown every key that had a state.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import NamedTuple

from kvprobe.spec.actions import CORE_EVENTS, TERMINATED, WORKER_EVENTS
from kvprobe.spec.lifecycle import Event, LookupPhase, Phase, Rule

_PER_KEY = ("phase", "gen", "waiters", "verdict", "forced")

#: KVProbe.tla's NoGen: the ``recalled`` history's value for a state not served from memory.
NO_GEN = 0


class Transition(NamedTuple):
    """One key's phase change in one step of the graph, with the facts the rules' guards read."""

    source: Phase
    event: Event
    waiting: bool
    cached: bool
    dest: Phase


State = Mapping[str, object]


def _phase(name: object) -> Phase:
    return None if name == "ABSENT" else LookupPhase(str(name))


def _get(state: State, var: str, key: object) -> object:
    return state[var][key]  # type: ignore[index]


def _served_from_memory(action: str, source: State, dest: State, key: object) -> bool:
    """Whether the step made a new state of ``key`` that the model records as recalled from memory."""
    if action != "Lookup" or _get(source, "phase", key) != "ABSENT" or _get(dest, "phase", key) == "ABSENT":
        return False
    recalled: Mapping[object, object] = dest["recalled"]  # type: ignore[assignment]
    return recalled[(key, _get(dest, "gen", key))] != NO_GEN


def _waiting(state: State, key: object) -> bool:
    requests: Mapping[object, frozenset[object]] = state["requests"]  # type: ignore[assignment]
    return bool(_get(state, "waiters", key)) or any(key in keys for keys in requests.values())


def concerned_keys(action: str, source: State, dest: State) -> set[object]:
    """The keys whose probe state ``action`` acted on in the step ``source -> dest``."""
    keys = source["phase"].keys()  # type: ignore[attr-defined]
    changed = {k for k in keys if any(_get(source, v, k) != _get(dest, v, k) for v in _PER_KEY)}
    if action == "Drain":
        outcome = source["resq"][0]  # type: ignore[index]
        probes = outcome["grp"]["probes"]
        changed |= {k for k in keys if _get(source, "phase", k) != "ABSENT" and (k, _get(source, "gen", k)) in probes}
    elif action == "Shutdown":
        changed |= {k for k in keys if _get(source, "phase", k) != "ABSENT"}
    return changed


@dataclass
class Observed:
    """What the graph shows: transitions, and worker (or final stutter) steps that moved a phase (must be none)."""

    transitions: set[Transition]
    worker_phase_changes: list[tuple[str, str, str]]
    edges: int


def observed_transitions(states: Mapping[str, State], edges: Iterable[tuple[str, str, str]]) -> Observed:
    """Derive the per-key phase transitions from a state graph (see the module docstring).

    Raises:
        KeyError: an edge names a state the graph does not hold, or an
            action that is neither a scheduler nor a worker action.
    """
    found: set[Transition] = set()
    worker_moves: list[tuple[str, str, str]] = []
    count = 0
    for src_id, action, dst_id in edges:
        count += 1
        source, dest = states[src_id], states[dst_id]
        if action == TERMINATED:  # the intended final stutter after Shutdown
            if src_id != dst_id or source["down"] is not True:
                worker_moves.append((src_id, action, dst_id))
            continue
        if action in WORKER_EVENTS:  # the worker's steps and Revive never move a phase
            if source["phase"] != dest["phase"]:
                worker_moves.append((src_id, action, dst_id))
            continue
        if action not in CORE_EVENTS:
            raise KeyError(f"edge {src_id} -> {dst_id} has unknown action {action!r}")
        event = Event(action)
        for key in concerned_keys(action, source, dest):
            found.add(
                Transition(
                    _phase(_get(source, "phase", key)),
                    event,
                    _waiting(dest, key),
                    _served_from_memory(action, source, dest, key),
                    _phase(_get(dest, "phase", key)),
                )
            )
    return Observed(found, worker_moves, count)


def compare(observed: Iterable[Transition], rules: Iterable[Rule]) -> tuple[set[Transition], list[Rule]]:
    """(observed transitions no rule admits, rules no observed transition witnesses).

    A rule admits a transition with the same source, event and destination
    whose waiters and cached facts its guards allow.  Both results empty means the model
    takes exactly the declared transitions.
    """
    rules = list(rules)
    observed = set(observed)

    def admits(rule: Rule, t: Transition) -> bool:
        return (
            rule.source is t.source
            and rule.event is t.event
            and rule.dest is t.dest
            and rule.admits(t.waiting, t.cached)
        )

    unexplained = {t for t in observed if not any(admits(r, t) for r in rules)}
    unwitnessed = [r for r in rules if not any(admits(r, t) for t in observed)]
    return unexplained, unwitnessed
