"""How a TLC counterexample's values and steps read: the variable and action tables.

:data:`VARIABLES` says how each model variable is shown (or that it is left
out of the steps: bookkeeping and history the reader does not need per
step); :data:`ACTIONS` says what an action did, with its arguments, worked
out from the state before and after (TLC names the action, never its
arguments).  A change of ``tla/KVProbe.tla`` is an edit of these tables;
:mod:`kvprobe.explain` falls back to a plain form for whatever they do not
know, so a function here may raise on a state it cannot read.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from kvprobe.tlc import TlaValue

__all__ = ["ACTIONS", "VARIABLES", "State", "changed_keys", "plain"]

#: A parsed TLC state: variable -> value (any shape: the model may change).
State = Mapping[str, Any]


# --- how values read ---------------------------------------------------------


def plain(value: Any) -> str:
    """A model value, string, number or tuple as a reader writes it."""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, tuple):
        return "(" + ", ".join(plain(v) for v in value) + ")"
    if isinstance(value, frozenset):
        return "{" + ", ".join(sorted(plain(v) for v in value)) + "}" if value else "nobody"
    if isinstance(value, dict):
        return ", ".join(f"{plain(k)}: {plain(v)}" for k, v in sorted(value.items(), key=lambda kv: str(kv[0])))
    return str(value)


def _per_key(value: Any) -> str:
    """A function of keys (or requests), shown as ``k1: v`` pairs."""
    if isinstance(value, dict):
        return ", ".join(f"{k}: {plain(v)}" for k, v in sorted(value.items(), key=lambda kv: str(kv[0])))
    return plain(value)


def _group(group: Any) -> str:
    """``group of r1 [k1 gen 1]``."""
    if not isinstance(group, dict):
        return plain(group)
    probes = sorted(group.get("probes", ()), key=str)
    listed = ", ".join(f"{k} gen {g}" for k, g in probes)
    return f"group of {group.get('req')} [{listed}]"


def _groups(value: Any) -> str:
    if isinstance(value, frozenset):
        # A set's iteration order follows string hashing, which differs per
        # process: sort, or the same counterexample reads differently each run.
        value = sorted(value, key=str)
    if isinstance(value, frozenset | tuple | list):
        return "; ".join(_group(g) for g in value) or "none"
    return plain(value)


def _queue(value: Any) -> str:
    """The submission queue: a sequence of batches (sets of groups)."""
    if isinstance(value, tuple):
        return " | ".join(f"batch {i}: {_groups(b)}" for i, b in enumerate(value, 1)) or "empty"
    return plain(value)


def _outcome(outcome: Any) -> str:
    if not isinstance(outcome, dict):
        return plain(outcome)
    kind = outcome.get("kind")
    if kind == "died":
        return "the worker's death marker"
    late = " (late)" if outcome.get("late") else ""
    if kind == "ok":
        answers = outcome.get("ans", {})
        said = ", ".join(f"{k} = {v} (generation {g})" for (k, g), v in sorted(answers.items(), key=str))
        return f"{_group(outcome.get('grp'))} answers {said}{late}"
    return f"{_group(outcome.get('grp'))}: {kind}{late}"


def _results(value: Any) -> str:
    if isinstance(value, tuple):
        return "; ".join(_outcome(o) for o in value) or "empty"
    return plain(value)


def _batch(value: Any) -> str:
    if isinstance(value, frozenset):
        return ", ".join(f"{k} gen {g} for {r}" for k, g, r in sorted(value, key=str)) or "empty"
    return plain(value)


#: Variable -> (label, how to show the value), or None to leave it out of the steps.
VARIABLES: dict[str, tuple[str, Callable[[TlaValue], str]] | None] = {
    "phase": ("phase", _per_key),
    "gen": ("generation", _per_key),
    "waiters": ("waiting", _per_key),
    "verdict": ("verdict", _per_key),
    "requests": ("requests", _per_key),
    "batch": ("step batch", _batch),
    "subq": ("submitted", _queue),
    "taken": ("with the worker", _groups),
    "timedOut": ("timed out", _groups),
    "stuck": ("stuck calls", _groups),
    "resq": ("results", _results),
    "open": ("open groups", _groups),
    "wstate": ("worker", plain),
    "down": ("shut down", plain),
    # The Lookup's answer is part of its step's line.
    "out": None,
    # Bookkeeping and history: the last line uses them; per step they are noise.
    "nextGen": None,
    "forced": None,
    "told": None,
    "applied": None,
    "sent": None,
    "sentIn": None,
    "stale": None,
    "moot": None,
    "deaths": None,
    "backendHit": None,
    # The chain walk's history (tla/chain.cfg): booleans its invariants read.
    "chainAhead": None,
    "chainPastMiss": None,
    "chainUntoldHit": None,
    # The store and the inferred walk (tla/chain-inferred.cfg): what the tier
    # holds and the refuted keys are shown; the store at each hit is history.
    "stored": ("stored", plain),
    "refuted": ("refuted", plain),
    "prefixAtHit": None,
    # The verdict cache (tla/cache.cfg): what is remembered per key; the rest is history.
    "mem": ("remembered", _per_key),
    "memGen": None,
    "recalled": None,
    "forgot": None,
    "backendMiss": None,
    # The walks' and the cache's facts the checked action cannot write: read
    # only by the violation sentences and the invariants.
    "chainSkipped": None,
    "asked": None,
    "failedLoads": None,
    # Positioned lookups (tla/positions.cfg): the deferred keys are shown.
    "posPastMiss": None,
    "deferred": ("deferred", _per_key),
}


# --- what each action did ----------------------------------------------------


def changed_keys(before: State, after: State, var: str) -> list[str]:
    old, new = before.get(var, {}), after.get(var, {})
    if not isinstance(old, dict) or not isinstance(new, dict):
        return []
    return sorted(str(k) for k in new if old.get(k) != new.get(k))


def _lookup(before: State, after: State) -> str:
    parts = []
    for key in changed_keys(before, after, "waiters"):
        joined = set(after["waiters"][key]) - set(before["waiters"][key])
        for req in sorted(joined, key=str):
            new = after["gen"][key] != before["gen"][key]
            how = f"new probe, generation {after['gen'][key]}" if new else f"joins the {after['phase'][key]} probe"
            parts.append(f"{req} asks for {key} ({how})")
    said = "; ".join(parts) or "a lookup answered from a resolved probe"
    out = after.get("out")
    if isinstance(out, dict) and out.get("req") != "none":
        answer = {"none": "not known yet", "hit": "hit", "miss": "miss"}.get(str(out.get("ans")), str(out.get("ans")))
        said += f"; {out.get('req')} is answered {answer} for {out.get('key')}"
    return said


def _flush(before: State, after: State) -> str:
    old, new = before["subq"], after["subq"]
    if isinstance(old, tuple) and isinstance(new, tuple) and len(new) > len(old):
        return f"submits {_groups(new[-1])}"
    return "nothing to submit"


def _take(before: State, after: State) -> str:
    got = frozenset(after["taken"]) - frozenset(before["taken"])
    return f"the worker takes {_groups(got)}"


def _published(before: State, after: State) -> str:
    old, new = before["resq"], after["resq"]
    if isinstance(old, tuple) and isinstance(new, tuple) and len(new) > len(old):
        return _outcome(new[-1])
    return "publishes nothing"


def _drain(before: State, after: State) -> str:
    head = before["resq"][0]
    if isinstance(head, dict) and head.get("kind") == "died":
        said = f"the worker's death marker: every open group fails ({_groups(before.get('open', frozenset()))})"
    else:
        said = _outcome(head)
    return f"{said}; " + (", ".join(_effects(before, after)) or "nothing applied")


def _effects(before: State, after: State) -> list[str]:
    effects = []
    for key in changed_keys(before, after, "phase") + changed_keys(before, after, "verdict"):
        line = f"{key} -> {after['phase'][key]}"
        if after["verdict"][key] != "none":
            line += f" {after['verdict'][key]} (state generation {after['gen'][key]})"
        if line not in effects:
            effects.append(line)
    return effects


def _cleanup(before: State, after: State) -> str:
    done = changed_keys(before, after, "requests")
    return (", ".join(f"{r} finished" for r in done) or "a request with nothing held finished") + _phases(before, after)


def _mark_miss(before: State, after: State) -> str:
    keys = sorted(set(changed_keys(before, after, "phase")) | set(changed_keys(before, after, "forced")))
    # A key with no state has nothing to force, but its remembered answer
    # (tla/cache.cfg) is forgotten: say so, or the step reads as a no-op.
    forgotten = [k for k in changed_keys(before, after, "mem") if k not in keys]
    said = "forced MISS on " + (", ".join(keys) or "a key with no state") + _phases(before, after)
    return said + (f"; forgot the remembered answer of {', '.join(forgotten)}" if forgotten else "")


def _phases(before: State, after: State) -> str:
    moved = [f"{k} {before['phase'][k]} -> {after['phase'][k]}" for k in changed_keys(before, after, "phase")]
    return f" ({', '.join(moved)})" if moved else ""


# --- positioned lookups (tla/positions.cfg) ---


def _deferred_change(before: State, after: State) -> tuple[str, str, bool] | None:
    """(request, key, deferred now) of a key whose deferral a step changed, or None."""
    old, new = before.get("deferred", {}), after.get("deferred", {})
    for req in sorted(new, key=str) if isinstance(new, dict) and isinstance(old, dict) else ():
        for key in sorted(set(new[req]) ^ set(old.get(req, ())), key=str):
            return str(req), str(key), key in new[req]
    return None


def _positioned_lookup(before: State, after: State) -> str:
    change = _deferred_change(before, after)
    if change is None or after.get("phase") != before.get("phase") or after.get("waiters") != before.get("waiters"):
        return _lookup(before, after)
    req, key, now = change
    if now:
        return f"{req}'s positioned lookup of {key} is deferred: no probe, answered not known yet"
    return f"{req}'s positioned lookup of {key} is answered without a probe (a key before it decides it)"


#: Action -> what it did, from the state before and after.
ACTIONS: dict[str, Callable[[State, State], str]] = {
    "Lookup": _positioned_lookup,
    "Flush": _flush,
    "Drain": _drain,
    "Cleanup": _cleanup,
    "MarkMiss": _mark_miss,
    "Shutdown": lambda b, a: "the manager shuts down; every state is reclaimed",
    "TakeBatch": _take,
    "CompleteGroup": _published,
    "FailGroup": _published,
    "TimeOut": _published,
    "Saturate": _published,
    "LateAnswer": _published,
    "Die": lambda b, a: "the worker dies: what it queued or held is lost; it publishes its death marker",
    "Revive": lambda b, a: "a fresh worker is started",
    "Terminated": lambda b, a: "nothing more happens after shutdown",
}
