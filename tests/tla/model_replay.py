"""Model-based testing: replay TLC's explored state graph through ``kvprobe.spec.model``.

For every edge ``source -[Action]-> dest`` of the ``-dump dot,actionlabels``
graph, the source TLA+ state is turned into a reference-model state
(:func:`to_model`), the Python action of the same name is applied with the
arguments read off the step (:func:`replay_edge`), and the result is
compared with the TLA+ destination in a common projection
(:func:`view_of_model` against :func:`view_of_tla`): the probe table, the
reverse index, the step's batch, the generation counter, the open groups,
the worker's state, its queue, running and stuck calls, the published
outcomes, the lookup's output and the history both models keep (forced,
told, submissions, the phase at submission, applied outcomes, stale
effects, moot generations, the backend's in-time "stored" answers), and
the verdict cache's memory and history (constant unless the config turns
the cache on; then ``to_model(..., cache=True)``).  The TLA+ side of the comparison is read from
the dump directly, never through :func:`to_model`, so a mapping slip shows
up as a difference.

Under a SYMMETRY (tla/default.cfg's, permutations of keys and of
requests) TLC stores one state per class and an edge leads to the state
that stands for its successor's class, not to the successor itself: the
edge is a step of the reference model if the reference successor's
projection is that of some permutation of TLC's (``model_replay_graph.py``
reads the graph and lists the permutations).

What the models represent differently is projected away: group ids and
batch ids (a TLA+ group is its value), the order of a batch's groups and of
a group's keys, the code's counters, and the key of a history entry (TLA+
keeps some history per generation; a generation belongs to one key).
"""

from __future__ import annotations

import functools
import math
import operator
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from model_replay_graph import TlaState, by_identity

from kvprobe.spec import model
from kvprobe.spec.lifecycle import LookupPhase
from kvprobe.spec.model_positions import PositionsStopAtMiss, positioned_lookup
from kvprobe.spec.model_state import CacheSpec, ChainAsk, Remembered
from kvprobe.spec.model_walk_checks import WalkFacts

View = dict[str, object]

#: The model's bound on stuck calls in the configs replayed (MaxStuck).
MAX_STUCK = 1
#: The history key of a generation whose key no variable of the state names any more.
NO_KEY = b"?"
#: The failure name a TLA+ FailGroup maps to (any backend error: the model does not distinguish).
FAIL = "raised"

# --- values ----------------------------------------------------------------------


@functools.cache
def _key(k: object) -> bytes:
    return str(k).encode()


def _verdict(v: object) -> bool | None:
    return None if v == "none" else v == "hit"


@by_identity
def _gval(group: Mapping[str, object]) -> tuple[str, frozenset[tuple[bytes, int]]]:
    """A TLA+ group as a value: (request, probes)."""
    probes: Iterable[tuple[object, int]] = group["probes"]  # type: ignore[assignment]
    return str(group["req"]), frozenset((_key(k), g) for k, g in probes)


def _mgval(group: model.Group) -> tuple[str, frozenset[tuple[bytes, int]]]:
    return group.req, frozenset(zip(group.keys, group.gens, strict=True))


def _tla_groups(state: TlaState) -> set[tuple[str, frozenset[tuple[bytes, int]]]]:
    found = set()
    for var in ("open", "taken", "stuck"):
        found |= {_gval(g) for g in state[var]}  # type: ignore[attr-defined]
    for batch in state["subq"]:  # type: ignore[attr-defined]
        found |= {_gval(g) for g in batch}
    for outcome in state["resq"]:  # type: ignore[attr-defined]
        if outcome["kind"] != "died":
            found.add(_gval(outcome["grp"]))
    return found


# --- TLA+ state -> reference-model state -------------------------------------------------


def _memory(state: TlaState) -> dict[str, object]:
    """The verdict cache's part of the reference state (CacheOn): entries that never expire.

    The TLA+ model drops an entry at a Lookup instead of counting time, so
    each entry's end is infinity and the bound holds every key (no eviction).
    """
    mem: Mapping[object, str] = state["mem"]  # type: ignore[assignment]
    mem_gen: Mapping[object, int] = state["memGen"]  # type: ignore[assignment]
    recalled: Mapping[tuple[object, int], int] = state["recalled"]  # type: ignore[assignment]
    told: Mapping[tuple[object, int], str] = state["told"]  # type: ignore[assignment]
    return {
        # The reference model tells a state served from memory the answer it recalled:
        # the first outcome published for the generation it was recalled from.
        "told": {
            **{(_key(k), g): v == "hit" for (k, g), v in told.items() if v != "none"},
            **{(_key(k), g): told[(k, src)] == "hit" for (k, g), src in recalled.items() if src},
        },
        "cache": CacheSpec(max_entries=len(mem), hit_ttl=math.inf, miss_ttl=math.inf),
        "memory": tuple(
            Remembered(_key(k), v == "hit", mem_gen[k], math.inf)
            for k, v in sorted(mem.items(), key=str)
            if v != "none"
        ),
        "recalled": {(_key(k), g): src for (k, g), src in recalled.items() if src},
        "backend_misses": frozenset((_key(k), g) for k, g in state["backendMiss"]),  # type: ignore[attr-defined]
        "invalidated": frozenset((_key(k), g) for k, g in state["forgot"]),  # type: ignore[attr-defined]
    }


def to_model(state: TlaState, *, cache: bool = False) -> model.State:
    """The reference-model state that stands for a TLA+ state (group ids assigned by value).

    ``cache``: the config turns the verdict cache on (CacheOn).
    """
    values = sorted(_tla_groups(state), key=lambda g: (g[0], sorted(g[1])))
    groups: dict[tuple[str, frozenset[tuple[bytes, int]]], model.Group] = {}
    for gid, (req, probes) in enumerate(values, start=1):
        pairs = sorted(probes)
        groups[(req, probes)] = model.Group(gid, 0, req, tuple(k for k, _ in pairs), tuple(g for _, g in pairs))
    owner = {g: k for _, probes in values for k, g in probes}  # which key each generation is of

    def grp(value: object) -> model.Group:
        return groups[_gval(value)]

    def outcome(o: Mapping[str, object]) -> model.Outcome:
        if o["kind"] == "died":
            return model.DEATH_MARKER
        group = grp(o["grp"])
        ans: Mapping[tuple[object, int], str] = o["ans"]  # type: ignore[assignment]
        answers = {(_key(k), g): v == "hit" for (k, g), v in dict(ans).items()}
        kind = str(o["kind"])
        if kind == "ok":
            verdicts = tuple(answers[(k, g)] for k, g in zip(group.keys, group.gens, strict=True))
            return model.Outcome(group, verdicts, None, bool(o["late"]))
        failure = {"fail": FAIL, "timeout": model.TIMEOUT, "saturated": model.SATURATED}[kind]
        return model.Outcome(group, None, failure, bool(o["late"]))

    phase: Mapping[object, str] = state["phase"]  # type: ignore[assignment]
    gen: Mapping[object, int] = state["gen"]  # type: ignore[assignment]
    waiters: Mapping[object, frozenset[object]] = state["waiters"]  # type: ignore[assignment]
    verdict: Mapping[object, str] = state["verdict"]  # type: ignore[assignment]
    for k in phase:
        owner.setdefault(gen[k], _key(k))
    down = bool(state["down"])
    taken = {grp(g).group_id: grp(g) for g in state["taken"]}  # type: ignore[attr-defined]
    resq = tuple(outcome(o) for o in state["resq"])  # type: ignore[attr-defined]
    out: Mapping[str, object] = state["out"]  # type: ignore[assignment]
    told: Mapping[tuple[object, int], str] = state["told"]  # type: ignore[assignment]
    forced: Mapping[object, bool] = state["forced"]  # type: ignore[assignment]

    def per_gen(var: str) -> dict[tuple[bytes, int], int]:
        counts: tuple[int, ...] = state[var]  # type: ignore[assignment]
        return {(owner.get(g, NO_KEY), g): n for g, n in enumerate(counts, start=1) if n}

    sent_in: tuple[str, ...] = state["sentIn"]  # type: ignore[assignment]
    s = model.State(
        probes={
            _key(k): model.Probe(LookupPhase(p), gen[k], frozenset(str(r) for r in waiters[k]), _verdict(verdict[k]))
            for k, p in phase.items()
            if p != "ABSENT"
        },
        requests={str(r): frozenset(_key(k) for k in ks) for r, ks in state["requests"].items() if ks},  # type: ignore[attr-defined]
        step_batch=tuple(sorted((_key(k), g, str(r)) for k, g, r in state["batch"])),  # type: ignore[attr-defined]
        outstanding={grp(g).group_id: grp(g) for g in state["open"]},  # type: ignore[attr-defined]
        queue=tuple(tuple(sorted((grp(g) for g in b), key=lambda x: x.group_id)) for b in state["subq"]),  # type: ignore[attr-defined]
        taken={} if down else taken,
        stopped_taken=taken if down else {},
        stray={grp(g).group_id: grp(g) for g in state["stuck"]},  # type: ignore[attr-defined]
        inbox=() if down else resq,
        discarded=resq if down else (),
        next_gen=int(state["nextGen"]),  # type: ignore[call-overload]
        next_group=len(values) + 1,
        closed=down,
        worker=str(state["wstate"]),
        out=None if out["key"] == "none" else (_key(out["key"]), str(out["req"]), _verdict(out["ans"])),
        submitted=per_gen("sent"),
        submitted_not_pending=frozenset(
            (owner.get(g, NO_KEY), g) for g, p in enumerate(sent_in, start=1) if p not in ("never", "PENDING")
        ),
        applied=per_gen("applied"),
        stale_applied=1 if state["stale"] else 0,
        forced=frozenset((_key(k), gen[k]) for k, f in forced.items() if f),
        moot=frozenset((owner.get(g, NO_KEY), g) for g in state["moot"]),  # type: ignore[attr-defined]
        told={(_key(k), g): v == "hit" for (k, g), v in told.items() if v != "none"},
        backend_hits=frozenset((_key(k), g) for k, g in state["backendHit"]),  # type: ignore[attr-defined]
        # Positioned lookups' history: a probe past a known miss stands for the flag.
        position_probes=(ChainAsk("?", NO_KEY, 1, 0, (False,)),) if state["posPastMiss"] else (),
        deferred=frozenset((str(r), _key(k)) for r, ks in state["deferred"].items() for k in ks),  # type: ignore[attr-defined]
    )
    return replace(s, **_memory(state)) if cache else s  # type: ignore[arg-type]


# --- the common projection -----------------------------------------------------------------


def _oview(grp: object, kind: str, ans: Iterable[tuple[tuple[bytes, int], bool]], late: bool) -> tuple[object, ...]:
    return (grp, kind, frozenset(ans), late)


def _per_key(f: Callable[[Any], object] = lambda v: v) -> Callable[[Any], object]:
    return by_identity(lambda fn: {_key(k): f(v) for k, v in fn.items()})


def _tla_outcome(o: Mapping[str, Any]) -> tuple[object, ...]:
    pairs = [((_key(k), g), v == "hit") for (k, g), v in dict(o["ans"]).items()]
    grp = None if o["kind"] == "died" else _gval(o["grp"])
    return _oview(grp, str(o["kind"]), pairs, bool(o["late"]))


def _tla_out(out: Mapping[str, Any]) -> object:
    return None if out["key"] == "none" else (_key(out["key"]), str(out["req"]), _verdict(out["ans"]))


def _groups(gs: Iterable[Any]) -> frozenset[object]:
    return frozenset(_gval(g) for g in gs)


def _counts(counts: tuple[int, ...]) -> dict[int, int]:
    return {g: n for g, n in enumerate(counts, start=1) if n}


#: How each TLA+ variable reads in the common projection (memoized per value object).
_TLA_VIEW: dict[str, Callable[[Any], object]] = {
    "phase": _per_key(),
    "gen": _per_key(),
    "waiters": _per_key(lambda ws: frozenset(str(r) for r in ws)),
    "verdict": _per_key(_verdict),
    "requests": by_identity(lambda rs: {str(r): frozenset(_key(k) for k in ks) for r, ks in rs.items() if ks}),
    "batch": by_identity(lambda b: frozenset((_key(k), g, str(r)) for k, g, r in b)),
    "nextGen": lambda n: n,
    "open": by_identity(_groups),
    "down": lambda d: d,
    "out": by_identity(_tla_out),
    "wstate": lambda w: w,
    "subq": by_identity(lambda q: tuple(_groups(b) for b in q)),
    "taken": by_identity(_groups),
    "stuck": by_identity(_groups),
    "resq": by_identity(lambda q: tuple(_tla_outcome(o) for o in q)),
    "forced": _per_key(bool),
    "told": by_identity(
        lambda told: frozenset(((_key(k), g), v == "hit") for (k, g), v in told.items() if v != "none")
    ),
    "sent": by_identity(_counts),
    "sentIn": by_identity(
        lambda sent_in: frozenset(g for g, p in enumerate(sent_in, start=1) if p not in ("never", "PENDING"))
    ),
    "applied": by_identity(_counts),
    "stale": bool,
    "moot": lambda m: m,
    "backendHit": by_identity(lambda hits: frozenset((_key(k), g) for k, g in hits)),
    # The verdict cache (constant unless CacheOn).
    "mem": _per_key(_verdict),
    "memGen": _per_key(),
    "recalled": by_identity(lambda r: frozenset(((_key(k), g), src) for (k, g), src in r.items() if src)),
    "forgot": by_identity(lambda f: frozenset((_key(k), g) for k, g in f)),
    "backendMiss": by_identity(lambda m: frozenset((_key(k), g) for k, g in m)),
    # Positioned lookups (constant unless Positioned).
    "posPastMiss": bool,
    "deferred": by_identity(lambda d: frozenset((str(r), _key(k)) for r, ks in d.items() for k in ks)),
}


def view_of_tla(state: TlaState) -> View:
    """The common projection, read from a TLA+ state (``keys``: the model's Keys)."""
    view = {name: convert(state[name]) for name, convert in _TLA_VIEW.items()}
    phase: Mapping[bytes, object] = view["phase"]  # type: ignore[assignment]
    view["keys"] = frozenset(phase)
    return view


def _kind(o: model.Outcome) -> str:
    if model.is_death_marker(o):
        return "died"
    if o.failure is None:
        return "ok"
    return {model.TIMEOUT: "timeout", model.SATURATED: "saturated"}.get(o.failure, "fail")


def _model_oview(o: model.Outcome) -> tuple[object, ...]:
    if model.is_death_marker(o):
        return _oview(None, "died", (), o.late)
    said = o.verdicts if o.verdicts is not None else (False,) * len(o.group.keys)
    pairs = [((k, g), v) for k, g, v in zip(o.group.keys, o.group.gens, said, strict=True)]
    return _oview(_mgval(o.group), _kind(o), pairs, o.late)


def _per_gen(counts: Mapping[tuple[bytes, int], int]) -> dict[int, int]:
    total: dict[int, int] = {}
    for (_, g), n in counts.items():
        total[g] = total.get(g, 0) + n
    return {g: n for g, n in total.items() if n}


_gen_of = operator.itemgetter(1)


def view_of_model(s: model.State, keys: Iterable[bytes]) -> View:
    """The common projection, read from a reference-model state (``keys``: the model's Keys)."""
    # Run on every edge's successor (1.4 million on default.cfg): one pass over
    # the keys, and map() rather than generators that Python resumes per item.
    keys = frozenset(keys)
    phase: dict[bytes, object] = {}
    gen: dict[bytes, object] = {}
    waiters: dict[bytes, object] = {}
    verdict: dict[bytes, object] = {}
    forced: dict[bytes, object] = {}
    mem: dict[bytes, object] = {}
    mem_gen: dict[bytes, object] = {}
    remembered = {e.key: e for e in s.memory}
    for k in keys:
        p = s.probes.get(k)
        phase[k] = p.phase.value if p else "ABSENT"
        gen[k] = p.gen if p else 0
        waiters[k] = p.waiters if p else frozenset()
        verdict[k] = p.verdict if p else None
        forced[k] = p is not None and (k, p.gen) in s.forced
        e = remembered.get(k)
        mem[k] = e.verdict if e else None
        mem_gen[k] = e.gen if e else 0
    stuck = {**s.stray, **{gid: s.taken[gid] for gid in s.timed_out}}
    running = [g for gid, g in s.taken.items() if gid not in s.timed_out] + list(s.stopped_taken.values())
    return {
        "phase": phase,
        "gen": gen,
        "waiters": waiters,
        "verdict": verdict,
        "requests": {r: ks for r, ks in s.requests.items() if ks},
        "batch": frozenset(s.step_batch),
        "nextGen": s.next_gen,
        "open": frozenset(map(_mgval, s.outstanding.values())),
        "down": s.closed,
        "out": s.out,
        "wstate": s.worker,
        "subq": tuple(frozenset(map(_mgval, b)) for b in s.queue),
        "taken": frozenset(map(_mgval, running)),
        "stuck": frozenset(map(_mgval, stuck.values())),
        "resq": tuple(map(_model_oview, s.discarded if s.closed else s.inbox)),
        "forced": forced,
        # A state served from memory is told its recalled answer here; TLA+ keeps
        # told for probed generations only (VerdictProvenance reads the source's).
        "told": frozenset(item for item in s.told.items() if item[0] not in s.recalled),
        "sent": _per_gen(s.submitted),
        "sentIn": frozenset(map(_gen_of, s.submitted_not_pending)),
        "applied": _per_gen(s.applied),
        "stale": s.stale_applied > 0,
        "moot": frozenset(map(_gen_of, s.moot)),
        "backendHit": s.backend_hits,
        "mem": mem,
        "memGen": mem_gen,
        "recalled": frozenset(s.recalled.items()),
        "forgot": s.invalidated,
        # TLA+ records the backend's "not stored" answers only with the cache on.
        "backendMiss": s.backend_misses if s.cache is not None else frozenset(),
        "posPastMiss": not PositionsStopAtMiss(s),
        "deferred": s.deferred,
        "keys": keys,
    }


# --- one edge --------------------------------------------------------------------------------


def _new_outcome(dest: TlaState) -> Mapping[str, object]:
    resq: tuple[Mapping[str, object], ...] = dest["resq"]  # type: ignore[assignment]
    return resq[-1]


def _answer_of(s: model.State, o: Mapping[str, object]) -> tuple[int, list[bool]]:
    """The reference group id of a published outcome's group, and its verdicts in key order."""
    value = _gval(o["grp"])
    pools = (*s.taken.values(), *s.stopped_taken.values(), *s.stray.values())
    group = next(g for g in pools if _mgval(g) == value)
    ans: Mapping[tuple[object, int], str] = o["ans"]  # type: ignore[assignment]
    answers = {(_key(k), g): v == "hit" for (k, g), v in dict(ans).items()}
    return group.group_id, [answers[(k, g)] for k, g in zip(group.keys, group.gens, strict=True)]


def _mark_miss_keys(source: TlaState, dest: TlaState, *, fallback: bool = True) -> list[bytes]:
    """The keys a MarkMiss step forced: those whose state or moot generation changed.

    A step that changed nothing forced keys already forced (every live forced
    key), unless ``fallback`` is False (the step forgot a remembered answer).
    """
    phase: Mapping[object, str] = source["phase"]  # type: ignore[assignment]
    live = [k for k, p in phase.items() if p != "ABSENT"]
    moot_new: frozenset[int] = dest["moot"] - source["moot"]  # type: ignore[operator]
    changed = [
        k
        for k in live
        if any(source[v][k] != dest[v][k] for v in ("phase", "verdict", "forced", "gen"))  # type: ignore[index]
        or source["gen"][k] in moot_new  # type: ignore[index]
    ]
    if not fallback:
        return [_key(k) for k in changed]
    return [_key(k) for k in (changed or [k for k in live if source["forced"][k]])]  # type: ignore[index]


def _positioned(s: model.State, source: TlaState, dest: TlaState, chain: Sequence[bytes]) -> model.State:
    """A positioned Lookup (tla/positions.cfg: first window 1, growth 2): the (key, request) that reaches ``dest``.

    A lookup answered without a probe leaves no output naming its key, so
    every key of the chain and request that does not hold it is tried; the
    first whose reference step projects as ``dest`` is the step (else the
    first tried, whose differences are reported).
    """
    want = view_of_tla(dest)
    waiting = {_key(k): {str(r) for r in ws} for k, ws in source["waiters"].items()}  # type: ignore[attr-defined]
    tried: list[model.State] = []
    for rank, key in enumerate(chain):
        for req in sorted(map(str, source["requests"])):  # type: ignore[call-overload]
            if req in waiting[key]:
                continue
            after = positioned_lookup(s, chain, rank, req, 1, 2.0)[0]
            if not differences(want, view_of_model(after, want["keys"])):  # type: ignore[arg-type]
                return after
            tried.append(after)
    return tried[0] if tried else s


def replay_edge(
    action: str,
    s: model.State,
    source: TlaState,
    dest: TlaState,
    *,
    flavour: str = "native",
    chain: Sequence[bytes] = (),
) -> model.State:
    """Apply to ``s`` (``to_model(source)``) the reference-model action the edge names.

    ``flavour`` is the config's ``MarkMissFlavour`` ("vllm": MarkMiss forces
    RESOLVED keys only, ``model.mark_miss(..., skip_unresolved=True)``);
    ``chain``, with Positioned, the chain in order: a Lookup is positioned
    (:func:`kvprobe.spec.model_positions.positioned_lookup`).

    Raises:
        model.ModelError: the reference model has no such step.
        KeyError: the edge names an action the reference model does not have.
    """
    if action == "Lookup" and chain:
        return _positioned(s, source, dest, chain)
    if action == "Lookup":
        out: Mapping[str, object] = dest["out"]  # type: ignore[assignment]
        key = out["key"]
        # A key without a state: served from memory iff it is RESOLVED at once.
        new = source["phase"][key] == "ABSENT"  # type: ignore[index]
        fresh = dest["phase"][key] == "RESOLVED" if new else None  # type: ignore[index]
        return model.lookup(s, _key(key), str(out["req"]), fresh=fresh)[0]
    if action == "Flush":
        subq: tuple[frozenset[Mapping[str, object]], ...] = dest["subq"]  # type: ignore[assignment]
        owners = {}
        if len(subq) > len(source["subq"]):  # type: ignore[arg-type]
            owners = {k: req for req, probes in map(_gval, subq[-1]) for k, _ in probes}
        return model.flush(s, owners)[0]
    if action == "Cleanup":
        before: Mapping[object, frozenset[object]] = source["requests"]  # type: ignore[assignment]
        after: Mapping[object, frozenset[object]] = dest["requests"]  # type: ignore[assignment]
        (req,) = [r for r in before if before[r] and not after[r]]
        return model.cleanup(s, str(req))
    if action == "MarkMiss":
        # With the cache on, a key may be given for its remembered answer alone.
        mem: Mapping[object, str] = source["mem"]  # type: ignore[assignment]
        forgotten = [_key(k) for k, v in mem.items() if v != "none" and dest["mem"][k] == "none"]  # type: ignore[index]
        given = _mark_miss_keys(source, dest, fallback=not forgotten)
        return model.mark_miss(
            s, [*given, *(k for k in forgotten if k not in given)], skip_unresolved=flavour == "vllm"
        )
    if action in ("CompleteGroup", "LateAnswer", "FailGroup", "TimeOut", "Saturate"):
        gid, verdicts = _answer_of(s, _new_outcome(dest))
        if action == "CompleteGroup":
            return model.complete_group(s, gid, verdicts)
        if action == "LateAnswer":
            return model.late_answer(s, gid, verdicts)
        if action == "FailGroup":
            return model.fail_group(s, gid, FAIL)
        if action == "TimeOut":
            return model.time_out(s, gid, MAX_STUCK)
        return model.saturate(s, gid, MAX_STUCK)
    if action == "Terminated":
        return s
    simple: dict[str, Callable[[model.State], model.State]] = {
        "Drain": model.drain,
        "Revive": model.revive,
        "Shutdown": model.shutdown,
        "TakeBatch": lambda x: model.take_batch(x)[0],
        "Die": lambda x: model.worker_dies(x, marker=True),
    }
    return simple[action](s)


def differences(want: View, got: View) -> list[str]:
    """The projected variables that differ, one line each."""
    if want == got:
        # Most successors match: one comparison of the whole views rather than one per variable.
        return []
    return [f"{name}: TLA+ {want[name]!r}, reference {got.get(name)!r}" for name in want if want[name] != got.get(name)]


def walk_facts(state: TlaState, chain: Iterable[str], *, inferred: bool) -> WalkFacts:
    """What the inferred walk's mirrors (:mod:`kvprobe.spec.model_walk_checks`) read of a TLA+ state.

    ``chain`` is the config's ``Chain`` (model values, in order): TLC does not
    dump constants.
    """
    waiters: Any = state["waiters"]
    verdicts: Any = state["verdict"]
    return WalkFacts(
        chain=tuple(_key(k) for k in chain),
        requests=frozenset(str(r) for ws in waiters.values() for r in ws) | frozenset(str(r) for r in state["asked"]),  # type: ignore[attr-defined]
        inferred=inferred,
        waiters={_key(k): frozenset(str(r) for r in ws) for k, ws in waiters.items()},
        verdicts={_key(k): _verdict(v) for k, v in verdicts.items()},
        refuted=frozenset(_key(k) for k in state["refuted"]),  # type: ignore[attr-defined]
        failed_loads=frozenset(_key(k) for k in state["failedLoads"]),  # type: ignore[attr-defined]
    )
