"""TLC's counterexample in plain words: one line per step, then what went wrong.

``kvprobe check`` prints this for a counterexample (``--raw`` adds TLC's own form after it).
TLC names the action of each step but not its arguments, so each action's
line is worked out from what the step changed (the request whose waiters
grew is the one that looked up, the outcome that left the result queue is
the one drained, ...).

Theory of operation: everything that depends on the model's variables and
actions lives in three tables, so a change of ``tla/KVProbe.tla`` is a table
edit, and anything the tables do not know is shown plainly, never an error:

* :data:`VARIABLES`: variable -> how to show its value (or None: a
  bookkeeping or history variable the reader does not need per step);
* :data:`ACTIONS`: action -> a function of (state before, state after) that
  says what happened with its arguments; an unknown action, or one whose
  function cannot read the states, is shown as its name and the variables
  it changed;
* :data:`VIOLATIONS`: property -> a function of the last states that says
  what went wrong in words; an unknown property gets a generic sentence.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from kvprobe.tlc import Step, TlaValue, parse_value

__all__ = ["ACTIONS", "VARIABLES", "VIOLATIONS", "explain"]

#: A parsed TLC state: variable -> value (any shape: the model may change).
State = Mapping[str, Any]


# --- how values read ---------------------------------------------------------


def _name(value: Any) -> str:
    """A model value, string, number or tuple as a reader writes it."""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, tuple):
        return "(" + ", ".join(_name(v) for v in value) + ")"
    if isinstance(value, frozenset):
        return "{" + ", ".join(sorted(_name(v) for v in value)) + "}" if value else "nobody"
    if isinstance(value, dict):
        return ", ".join(f"{_name(k)}: {_name(v)}" for k, v in sorted(value.items(), key=lambda kv: str(kv[0])))
    return str(value)


def _per_key(value: Any) -> str:
    """A function of keys (or requests), shown as ``k1: v`` pairs."""
    if isinstance(value, dict):
        return ", ".join(f"{k}: {_name(v)}" for k, v in sorted(value.items(), key=lambda kv: str(kv[0])))
    return _name(value)


def _group(group: Any) -> str:
    """``group of r1 [k1 gen 1]``."""
    if not isinstance(group, dict):
        return _name(group)
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
    return _name(value)


def _queue(value: Any) -> str:
    """The submission queue: a sequence of batches (sets of groups)."""
    if isinstance(value, tuple):
        return " | ".join(f"batch {i}: {_groups(b)}" for i, b in enumerate(value, 1)) or "empty"
    return _name(value)


def _outcome(outcome: Any) -> str:
    if not isinstance(outcome, dict):
        return _name(outcome)
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
    return _name(value)


def _batch(value: Any) -> str:
    if isinstance(value, frozenset):
        return ", ".join(f"{k} gen {g} for {r}" for k, g, r in sorted(value, key=str)) or "empty"
    return _name(value)


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
    "wstate": ("worker", _name),
    "down": ("shut down", _name),
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
    "stored": ("stored", _name),
    "refuted": ("refuted", _name),
    "prefixAtHit": None,
    # The verdict cache (tla/cache.cfg): what is remembered per key; the rest is history.
    "mem": ("remembered", _per_key),
    "memGen": None,
    "recalled": None,
    "forgot": None,
    "backendMiss": None,
}


# --- what each action did ----------------------------------------------------


def _changed_keys(before: State, after: State, var: str) -> list[str]:
    old, new = before.get(var, {}), after.get(var, {})
    if not isinstance(old, dict) or not isinstance(new, dict):
        return []
    return sorted(str(k) for k in new if old.get(k) != new.get(k))


def _lookup(before: State, after: State) -> str:
    parts = []
    for key in _changed_keys(before, after, "waiters"):
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
    for key in _changed_keys(before, after, "phase") + _changed_keys(before, after, "verdict"):
        line = f"{key} -> {after['phase'][key]}"
        if after["verdict"][key] != "none":
            line += f" {after['verdict'][key]} (state generation {after['gen'][key]})"
        if line not in effects:
            effects.append(line)
    return effects


def _cleanup(before: State, after: State) -> str:
    done = _changed_keys(before, after, "requests")
    return (", ".join(f"{r} finished" for r in done) or "a request with nothing held finished") + _phases(before, after)


def _mark_miss(before: State, after: State) -> str:
    keys = sorted(set(_changed_keys(before, after, "phase")) | set(_changed_keys(before, after, "forced")))
    # A key with no state has nothing to force, but its remembered answer
    # (tla/cache.cfg) is forgotten: say so, or the step reads as a no-op.
    forgotten = [k for k in _changed_keys(before, after, "mem") if k not in keys]
    said = "forced MISS on " + (", ".join(keys) or "a key with no state") + _phases(before, after)
    return said + (f"; forgot the remembered answer of {', '.join(forgotten)}" if forgotten else "")


def _phases(before: State, after: State) -> str:
    moved = [f"{k} {before['phase'][k]} -> {after['phase'][k]}" for k in _changed_keys(before, after, "phase")]
    return f" ({', '.join(moved)})" if moved else ""


#: Action -> what it did, from the state before and after.
ACTIONS: dict[str, Callable[[State, State], str]] = {
    "Lookup": _lookup,
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


# --- what went wrong ---------------------------------------------------------


def _stale(states: Sequence[State]) -> str:
    # The step that set the history flag `stale`: the generations whose
    # applied count grew there, against the generation each key it changed had.
    for before, after in itertools.pairwise(states):
        if after.get("stale") is not True or before.get("stale") is True:
            continue
        grew = [
            g for g, (old, new) in enumerate(zip(before["applied"], after["applied"], strict=False), 1) if new > old
        ]
        head = before["resq"][0] if before.get("resq") else None
        how = (
            " (the failure the worker's death marker applies to every open group)"
            if isinstance(head, dict) and head.get("kind") == "died"
            else ""
        )
        for key in _changed_keys(before, after, "phase") + _changed_keys(before, after, "verdict"):
            current = before["gen"][key]  # the state the result fell on (a reclaim resets it to none)
            wrong = [g for g in grew if g != current]
            if wrong:
                return (
                    f"the generation-{wrong[0]} result{how} was applied to generation {current} of {key}: "
                    "an answer to an earlier probe was taken for the current one"
                )
    return "a result was applied to a state of another generation"


def _enqueue_once(states: Sequence[State]) -> str:
    last = states[-1]
    sent = last.get("sent")
    if isinstance(sent, tuple):
        twice = [i for i, n in enumerate(sent, 1) if isinstance(n, int) and n > 1]
        if twice:
            return f"generation {twice[0]} was submitted to the backend {sent[twice[0] - 1]} times"
    sent_in = last.get("sentIn")
    if isinstance(sent_in, tuple):
        late = [(g, phase) for g, phase in enumerate(sent_in, 1) if phase not in ("never", "PENDING")]
        if late:
            g, phase = late[0]
            said = "its key had no state" if phase == "ABSENT" else f"its state was {phase}"
            return (
                f"generation {g} was submitted to the backend when {said}: only a PENDING state is "
                "submitted (a key forced, resolved or reclaimed before the flush must not be probed)"
            )
    applied = last.get("applied")
    if isinstance(applied, tuple):
        twice = [i for i, n in enumerate(applied, 1) if isinstance(n, int) and n > 1]
        if twice:
            return f"generation {twice[0]} had {applied[twice[0] - 1]} results applied: at most one is"
    return "one generation was submitted twice, after its state left PENDING, or got two applied results"


def _forced(states: Sequence[State]) -> str:
    last = states[-1]
    for key, forced in sorted(last.get("forced", {}).items(), key=str):
        if forced and last["verdict"][key] != "miss":
            return f"after MarkMiss on {key} its verdict became {last['verdict'][key]}: the forced miss did not stick"
    return "a forced miss was overridden"


def _verdict_iff(states: Sequence[State]) -> str:
    last = states[-1]
    for key, verdict in sorted(last.get("verdict", {}).items(), key=str):
        phase = last["phase"][key]
        if (verdict != "none") != (phase == "RESOLVED"):
            return f"{key} is {phase} with verdict {verdict}: a verdict must be set exactly when RESOLVED"
    return "a verdict was set on a state that is not RESOLVED, or missing on one that is"


def _leak(states: Sequence[State]) -> str:
    last = states[-1]
    for key, phase in sorted(last.get("phase", {}).items(), key=str):
        if phase in ("PENDING", "RESOLVED") and not last["waiters"][key]:
            return f"{key} is {phase} with no request waiting on it: nobody will ever reclaim it"
        if phase == "IN_FLIGHT":
            return f"{key} is IN_FLIGHT but no open group will answer it: it stays in flight forever"
    return "a probe is held that nothing will ever answer or reclaim"


def _never_reclaimed(states: Sequence[State]) -> str:
    last = states[-1]
    for key, phase in sorted(last.get("phase", {}).items(), key=str):
        if phase in ("PENDING", "IN_FLIGHT"):
            return f"{key} stays {phase} forever: it is never resolved or reclaimed"
    return "the behaviour goes on forever without the table emptying, though no request waits any more"


def _lookup_returns(states: Sequence[State]) -> str:
    last = states[-1]
    out = last.get("out", {})
    key = out.get("key")
    answer = {"none": "not known yet"}.get(str(out.get("ans")), str(out.get("ans")))
    return (
        f"{out.get('req')} was answered {answer} for {key}, whose state is {last['phase'][key]} with verdict "
        f"{last['verdict'][key]}: a lookup returns the state's verdict, and none until an outcome of its "
        "generation was applied or the key was forced"
    )


def _from_backend(states: Sequence[State]) -> str:
    last = states[-1]
    stored = last.get("backendHit", frozenset())
    for key, phase in sorted(last.get("phase", {}).items(), key=str):
        if phase != "RESOLVED" or last["forced"][key]:
            continue
        said = (key, last["gen"][key]) in stored
        if (last["verdict"][key] == "hit") != said:
            told = "answered stored" if said else "never answered stored"
            return (
                f"{key} is RESOLVED {last['verdict'][key]}, but the backend {told} for generation "
                f"{last['gen'][key]} in time: a verdict must be the backend's answer (a saturated, failed, "
                "timed-out or dead group's keys are MISS)"
            )
    return "a verdict is not what the backend answered"


def _resolved_verdicts(last: State) -> list[tuple[str, Any, bool, int]]:
    """(key, verdict, forced, generation the verdict must come from) of each RESOLVED key."""
    recalled = last.get("recalled", {})
    out = []
    for key, phase in sorted(last.get("phase", {}).items(), key=str):
        if phase == "RESOLVED":
            gen = last["gen"][key]
            source = recalled.get((key, gen), 0) or gen  # KVProbe.tla's Source(k); 0 is NoGen
            out.append((key, last["verdict"][key], bool(last["forced"][key]), source))
    return out


def _provenance(states: Sequence[State]) -> str:
    last = states[-1]
    for key, verdict, forced, source in _resolved_verdicts(last):
        told = last["told"][(key, source)]
        if forced and verdict != "miss":
            return f"{key} is RESOLVED {verdict} though it was forced: a forced key's verdict is MISS"
        if not forced and verdict != told:
            said = "nothing was published" if told == "none" else f"the first outcome published said {told}"
            return (
                f"{key} is RESOLVED {verdict}, but for generation {source} {said}: a verdict is what was "
                "published first for its generation (MISS for a failure, timeout, saturation or death)"
            )
    return "a RESOLVED key's verdict is not what was first published for its generation"


def _lookup_answers(states: Sequence[State]) -> str:
    last = states[-1]
    out = last["out"]
    key, req, ans = out["key"], out["req"], out["ans"]
    answer = {"none": "not known yet"}.get(str(ans), str(ans))
    if last["forced"][key] and ans != "miss":
        return f"{req} was answered {answer} for {key}, which was forced: a forced key is answered MISS"
    told = last["told"][(key, last["gen"][key])]
    return (
        f"{req} was answered {answer} for {key}, though an outcome of its generation {last['gen'][key]} "
        f"was already published ({told}): a published answer is seen by the next lookup"
    )


def _chain_step(states: Sequence[State], flag: str) -> tuple[str, str]:
    """(request, key) of the Lookup that set the chain-walk history ``flag``."""
    for before, after in itertools.pairwise(states):
        if after.get(flag) is True and before.get(flag) is not True:
            out = after["out"]
            return str(out["req"]), str(out["key"])
    raise KeyError(flag)


def _chain_past_miss(states: Sequence[State]) -> str:
    req, key = _chain_step(states, "chainPastMiss")
    return f"{req}'s walk looked up {key} after a key before it in the chain was known NOT stored: a walk stops there"


def _chain_ahead(states: Sequence[State]) -> str:
    req, key = _chain_step(states, "chainAhead")
    return (
        f"{req}'s walk looked up {key} while a key of an earlier window was not yet known stored: "
        "a walk waits for its window's answers before the next window"
    )


def _chain_untold_hit(states: Sequence[State]) -> str:
    req, key = _chain_step(states, "chainUntoldHit")
    return (
        f"{req}'s walk found {key} stored, but no backend call for its generation answered it stored "
        "(or it was forced): a key is found stored only on the backend's word"
    )


def _inferred_stored(states: Sequence[State]) -> str:
    last = states[-1]
    return (
        f"a walk would infer keys stored that were not all in the store (it holds {_name(last['stored'])}) "
        "when the backend last answered its boundary key stored: inference holds only on a store without holes"
    )


def _refuted_walked(states: Sequence[State]) -> str:
    refuted = states[-1]["refuted"]
    return (
        f"a walk infers keys although {_name(refuted)} had a failed load (refuted): after a failed load "
        "the chain is walked exactly, key by key"
    )


def _cache_provenance(states: Sequence[State]) -> str:
    last = states[-1]
    said = {"hit": last.get("backendHit", frozenset()), "miss": last.get("backendMiss", frozenset())}
    for key, answer in sorted(last.get("mem", {}).items(), key=str):
        if answer == "none":
            continue
        gen = last["memGen"][key]
        if (key, gen) in last.get("forgot", frozenset()):
            return f"the verdict cache still remembers {answer} for {key} (generation {gen}) after a MarkMiss forgot it"
        if (key, gen) not in said.get(answer, frozenset()):
            return (
                f"the verdict cache remembers {answer} for {key} (generation {gen}), which no backend call "
                "answered: only a backend's own answer is remembered (never a failure's MISS)"
            )
    for key, verdict, forced, source in _resolved_verdicts(last):
        if not forced and source != last["gen"][key] and (key, source) not in said.get(verdict, frozenset()):
            return (
                f"{key} was served {verdict} from the verdict cache (recalled from generation {source}), "
                "which is not what the backend answered for that generation"
            )
    return "the verdict cache holds or served an answer the backend did not give"


#: Property -> what went wrong, from the states of the counterexample.
VIOLATIONS: dict[str, Callable[[Sequence[State]], str]] = {
    "StaleGenerationDropped": _stale,
    "EnqueueOnce": _enqueue_once,
    "ForcedMissSticks": _forced,
    "VerdictIffResolved": _verdict_iff,
    "NothingLeaks": _leak,
    "NoDuplicateProbe": lambda s: (
        "a second probe for a key was submitted while the first was still pending or in flight"
    ),
    "ReverseIndexConsistent": lambda s: "the reverse index and a state's waiters disagree about which request waits",
    "TypeOK": lambda s: "a variable took a value outside its type",
    "AfterShutdownEmpty": lambda s: "a state is still held after shutdown",
    "LookupReturnsVerdict": _lookup_returns,
    "VerdictFromBackend": _from_backend,
    "VerdictProvenance": _provenance,
    "LookupAnswers": _lookup_answers,
    "ChainTypeOK": lambda s: "the chain walk's history took a value outside its type",
    "ChainStopsAtMiss": _chain_past_miss,
    "ChainWindowWaits": _chain_ahead,
    "ChainHitsAnswered": _chain_untold_hit,
    "StoreTypeOK": lambda s: "the modelled store, the refuted keys or the store-at-hit history left their type",
    "InferredStored": _inferred_stored,
    "InferredBoundaryVerified": lambda s: (
        "a search answered at a boundary its request had not verified: the boundary key must be answered "
        "stored by a backend call (not forced) and the key after it known NOT stored, or be the chain's end"
    ),
    "RefutedWalkedExactly": _refuted_walked,
    "CacheProvenance": _cache_provenance,
    "EventuallyReclaimed": lambda s: _never_reclaimed(s),
    "deadlock": lambda s: "no action can happen any more, yet the manager was not shut down",
}


# --- issue 41: the walks' and the cache's facts the checked action cannot write ---


def _walk_out_of_order(states: Sequence[State]) -> str:
    # The Lookup that set chainSkipped: its request and key, and the chain keys
    # that request had not looked up (asked) when it made it.
    for before, after in itertools.pairwise(states):
        if after.get("chainSkipped") is True and before.get("chainSkipped") is not True:
            out = after["out"]
            req, key = out["req"], out["key"]
            had = sorted(map(str, before["asked"][req]))
            looked = f"only {', '.join(had)}" if had else "no key"
            return (
                f"{req}'s walk looked up {key} when {req} had looked up {looked} of the chain: "
                "a walk looks its keys up in chain order, so the leading hits it counts are keys it looked up"
            )
    return "a walk looked a key up before it had looked up every earlier key of its chain"


def _inferred_known_miss(states: Sequence[State]) -> str:
    last = states[-1]
    for req, keys in sorted(last["requests"].items(), key=str):
        missed = sorted(str(k) for k in keys if last["verdict"][k] == "miss")
        if missed:
            return (
                f"{req}'s inferred walk has decided its search and counts stored a key {req} itself knows "
                f"NOT stored ({', '.join(missed)} answered miss to {req}): an answer counts stored only keys "
                "before the first miss its request knows"
            )
    return "an inferred walk counts stored a key its request knows NOT stored"


def _cache_answer_applied(states: Sequence[State]) -> str:
    last = states[-1]
    for key, said in sorted(last["mem"].items(), key=str):
        if said == "none":
            continue
        gen = last["memGen"][key]
        if gen in last["moot"]:
            return (
                f"{key} remembers {said} from generation {gen}, whose in-flight probe a MarkMiss made moot: "
                "the cache may keep only an answer applied to its own generation's state"
            )
        first = last["told"][(key, gen)]
        if first != said:
            return (
                f"{key} remembers {said} from generation {gen}, but the first outcome published for that "
                f"probe was {first}: the cache keeps the answer Drain applied, never a late one"
            )
    return "the verdict cache keeps an answer that was never applied to its own generation"


def _refuted_inferred(states: Sequence[State]) -> str:
    last = states[-1]
    failed = sorted(map(str, last["failedLoads"]))
    dropped = sorted(set(failed) - set(map(str, last["refuted"])))
    lost = f" ({', '.join(dropped)} no longer refuted)" if dropped else ""
    return (
        f"a walk infers across a key whose load failed ({', '.join(failed)}){lost}: after a failed load "
        "the chain is walked exactly"
    )


VIOLATIONS.update(
    {
        "RefutedWalkedExactly": _refuted_inferred,
        "ChainWalksInOrder": _walk_out_of_order,
        "InferredAnswerNoKnownMiss": _inferred_known_miss,
        "CacheAnswerApplied": _cache_answer_applied,
    }
)
# History read only by those sentences and the invariants: not shown per step.
VARIABLES.update({"chainSkipped": None, "asked": None, "failedLoads": None})


# --- positioned lookups (tla/positions.cfg; issue 38) ---


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


def _position_past_miss(states: Sequence[State]) -> str:
    for before, after in itertools.pairwise(states):
        if after.get("posPastMiss") is True and before.get("posPastMiss") is not True:
            out = after["out"]
            req, key = out["req"], out["key"]
            missed = sorted(str(k) for k in before["requests"][req] if before["verdict"][k] == "miss")
            return (
                f"{req}'s positioned lookup probed {key} while {req} knew {', '.join(missed) or 'a key'} "
                "before it NOT stored: nothing past a known miss of the same request is probed"
            )
    return "a positioned lookup probed a key past a key its request knew NOT stored"


def _deferred_forever(states: Sequence[State]) -> str:
    last = states[-1]
    for req, keys in sorted(last.get("deferred", {}).items(), key=str):
        if keys:
            key = sorted(map(str, keys))[0]
            return (
                f"{req}'s lookup of {key} is deferred forever though {req} keeps asking: a deferred key is "
                "eventually probed, or answered by a known miss before it"
            )
    return "a deferred key is never probed nor passed by a known miss"


ACTIONS["Lookup"] = _positioned_lookup
VIOLATIONS.update({"PositionsStopAtMiss": _position_past_miss, "DeferredServed": _deferred_forever})
VARIABLES.update({"posPastMiss": None, "deferred": ("deferred", _per_key)})


# --- putting it together -----------------------------------------------------


def _parsed(step: Step) -> dict[str, TlaValue]:
    out: dict[str, TlaValue] = {}
    for name, text in step.values.items():
        try:
            out[name] = parse_value(text)
        except (ValueError, IndexError, KeyError):
            out[name] = text  # shown as TLC printed it
    return out


def _show(name: str, value: TlaValue) -> str:
    shown = VARIABLES.get(name, (name, _name))
    assert shown is not None
    label, how = shown
    try:
        return f"{label}: {how(value)}"
    except (TypeError, KeyError, IndexError, AttributeError, ValueError):
        return f"{label}: {value}"


def _action_line(action: str, before: State, after: State) -> str:
    name = action.split()[0] if action else action
    describe = ACTIONS.get(name)
    if describe is not None:
        try:
            return f"{name}: {describe(before, after)}"
        except (TypeError, KeyError, IndexError, AttributeError, ValueError):
            pass  # the model changed under the table: fall back to the plain form
    changed = sorted(k for k in after if before.get(k) != after.get(k))
    return f"{action} (changed: {', '.join(changed) or 'nothing'})"


def explain(steps: Sequence[Step], violated: str | None) -> str:
    """The counterexample ``steps`` as plain lines, ending with what went wrong.

    ``violated`` is the property TLC reported (an invariant name,
    ``EventuallyReclaimed``, ``"deadlock"``), or None if unknown.  Never
    raises for a step, variable or property it does not know: those are
    shown plainly.
    """
    lines = ["In plain words:"]
    states: list[dict[str, TlaValue]] = []
    before: dict[str, TlaValue] = {}
    for step in steps:
        if not step.values:  # the end of a lasso
            if step.action.startswith("Stuttering"):
                lines.append("  then: nothing happens any more, forever (stuttering)")
            else:
                lines.append(f"  then: {step.action}: the steps from there repeat forever")
            continue
        after = _parsed(step)
        states.append(after)
        if not before:
            lines.append(f"  [{step.number}] {step.action}: the start")
            shown = [n for n in after if VARIABLES.get(n, ()) is not None and _interesting(after[n])]
        else:
            lines.append(f"  [{step.number}] {_action_line(step.action, before, after)}")
            shown = [n for n in after if before.get(n) != after[n] and VARIABLES.get(n, ()) is not None]
        for name in sorted(shown, key=_order):
            lines.append(f"        {_show(name, after[name])}")
        before = after
    if violated is not None and states:
        sentence = VIOLATIONS.get(violated)
        try:
            said = sentence(states) if sentence is not None else f"the property {violated} does not hold"
        except (TypeError, KeyError, IndexError, AttributeError, ValueError):
            said = f"the property {violated} does not hold"
        lines.append(f"What went wrong ({violated}): {said}.")
    return "\n".join(lines)


def _order(name: str) -> tuple[int, str]:
    """Variables in the order of :data:`VARIABLES`; unknown ones after, by name."""
    known = list(VARIABLES)
    return (known.index(name), "") if name in known else (len(known), name)


def _interesting(value: TlaValue) -> bool:
    """Worth showing in the first state: not empty, not all-blank per key."""
    if isinstance(value, dict):
        return any(v not in ("ABSENT", "none", 0, frozenset(), ()) for v in value.values())
    return value not in (frozenset(), (), False, 0)
