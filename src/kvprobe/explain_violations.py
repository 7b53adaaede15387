"""What went wrong in a TLC counterexample, in words: the table of violation sentences.

:data:`VIOLATIONS` maps a property of ``tla/KVProbe.tla`` to a function of
the counterexample's states that says, with the keys, requests and
generations involved, what broke it.  Each sentence reads the history
variables the property reads.  :mod:`kvprobe.explain` prints a generic
sentence for a property not in the table, and for one whose function
raises on a state it cannot read.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from kvprobe.explain_steps import State, changed_keys, plain

__all__ = ["VIOLATIONS"]


# --- what went wrong ---------------------------------------------------------


def _stale(states: Sequence[State]) -> str:
    # The step that set the history flag `stale`: the generations whose
    # applied count grew there, against the generation each key it changed had.
    for before, after in _steps_setting(states, "stale"):
        grew = [
            g for g, (old, new) in enumerate(zip(before["applied"], after["applied"], strict=False), 1) if new > old
        ]
        head = before["resq"][0] if before.get("resq") else None
        how = (
            " (the failure the worker's death marker applies to every open group)"
            if isinstance(head, dict) and head.get("kind") == "died"
            else ""
        )
        for key in changed_keys(before, after, "phase") + changed_keys(before, after, "verdict"):
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


def _steps_setting(states: Sequence[State], flag: str) -> Iterator[tuple[State, State]]:
    """(before, after) of each step that turned the boolean history variable ``flag`` on."""
    for before, after in itertools.pairwise(states):
        if after.get(flag) is True and before.get(flag) is not True:
            yield before, after


def _lookup_setting(states: Sequence[State], flag: str) -> tuple[State, str, str]:
    """(state before, request, key) of the Lookup that turned ``flag`` on.

    Raises:
        KeyError: no step turned it on (the caller says it without names).
    """
    for before, after in _steps_setting(states, flag):
        out = after["out"]
        return before, str(out["req"]), str(out["key"])
    raise KeyError(flag)


def _chain_past_miss(states: Sequence[State]) -> str:
    _, req, key = _lookup_setting(states, "chainPastMiss")
    return f"{req}'s walk looked up {key} after a key before it in the chain was known NOT stored: a walk stops there"


def _chain_ahead(states: Sequence[State]) -> str:
    _, req, key = _lookup_setting(states, "chainAhead")
    return (
        f"{req}'s walk looked up {key} while a key of an earlier window was not yet known stored: "
        "a walk waits for its window's answers before the next window"
    )


def _chain_untold_hit(states: Sequence[State]) -> str:
    _, req, key = _lookup_setting(states, "chainUntoldHit")
    return (
        f"{req}'s walk found {key} stored, but no backend call for its generation answered it stored "
        "(or it was forced): a key is found stored only on the backend's word"
    )


def _inferred_stored(states: Sequence[State]) -> str:
    last = states[-1]
    return (
        f"a walk would infer keys stored that were not all in the store (it holds {plain(last['stored'])}) "
        "when the backend last answered its boundary key stored: inference holds only on a store without holes"
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


# --- the walks' and the cache's facts the checked action cannot write ----


def _walk_out_of_order(states: Sequence[State]) -> str:
    # The Lookup that set chainSkipped: its request and key, and the chain keys
    # that request had not looked up (asked) when it made it.
    try:
        before, req, key = _lookup_setting(states, "chainSkipped")
    except KeyError:
        return "a walk looked a key up before it had looked up every earlier key of its chain"
    had = sorted(map(str, before["asked"][req]))
    looked = f"only {', '.join(had)}" if had else "no key"
    return (
        f"{req}'s walk looked up {key} when {req} had looked up {looked} of the chain: "
        "a walk looks its keys up in chain order, so the leading hits it counts are keys it looked up"
    )


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


# --- positioned lookups (tla/positions.cfg) ---


def _position_past_miss(states: Sequence[State]) -> str:
    try:
        before, req, key = _lookup_setting(states, "posPastMiss")
    except KeyError:
        return "a positioned lookup probed a key past a key its request knew NOT stored"
    missed = sorted(str(k) for k in before["requests"][req] if before["verdict"][k] == "miss")
    return (
        f"{req}'s positioned lookup probed {key} while {req} knew {', '.join(missed) or 'a key'} "
        "before it NOT stored: nothing past a known miss of the same request is probed"
    )


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
    "RefutedWalkedExactly": _refuted_inferred,
    "CacheProvenance": _cache_provenance,
    "EventuallyReclaimed": lambda s: _never_reclaimed(s),
    "deadlock": lambda s: "no action can happen any more, yet the manager was not shut down",
    "ChainWalksInOrder": _walk_out_of_order,
    "InferredAnswerNoKnownMiss": _inferred_known_miss,
    "CacheAnswerApplied": _cache_answer_applied,
    "PositionsStopAtMiss": _position_past_miss,
    "DeferredServed": _deferred_forever,
}
