"""Model-based testing: the reference model (kvprobe.spec.model) takes every step TLC explored.

Three graphs: ``default_graph`` (tla/default.cfg with one key, without
symmetry: every state concrete), ``two_key_graph`` (two keys, one request,
no timeout or death) and, under the ``deep_replay`` marker (minutes; run
with ``pytest tests/tla/test_model_replay.py -m deep_replay``),
``full_default_graph``: default.cfg itself, with its symmetry, where a
successor matches TLC's up to a renaming of keys and requests.  Every edge
is replayed through the Python action of the same name
(tests/tla/model_replay.py) and the successor is compared with TLC's in the
common projection; every state satisfies every Python invariant (TLC
checked that the TLA+ ones hold there).  The other
direction of "same verdicts" is checked on violating states: the last state
of each mutant's counterexample on default.cfg (two keys) breaks the Python
invariant of the name TLC reported.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from model_replay import View, differences, replay_edge, to_model, view_of_model, view_of_tla
from model_replay_graph import Permutation, symmetry_group
from mutant_runs import mutant_run

from kvprobe.check import reach_config
from kvprobe.spec import actions as spec_actions, model
from kvprobe.spec.model_cache import CACHE_INVARIANTS
from kvprobe.tlc import parse_value, run_tlc, tla_dir

Graph = tuple[dict[str, dict[str, object]], list[tuple[str, str, str]]]

#: Seconds a full-graph test may take: TLC's dump (1.5 min), reading it, the replay (2 min), under load.
DEEP_TIMEOUT = 1200

#: Every action of KVProbe's Next; each must be replayed at least once.
ACTIONS = set(spec_actions.ACTIONS)


_PREPARED: dict[int, tuple[dict[str, View], dict[str, model.State]]] = {}


def _prepared(graph: Graph, *, cache: bool = False) -> tuple[dict[str, View], dict[str, model.State]]:
    """Each state's projection and reference state, once per graph (neither reads what the slips patch)."""
    if id(graph) not in _PREPARED:
        states = graph[0]
        views = {sid: view_of_tla(state) for sid, state in states.items()}
        _PREPARED[id(graph)] = views, {sid: to_model(state, cache=cache) for sid, state in states.items()}
    return _PREPARED[id(graph)]


def _model_checks(sid: str, state_view: View, state_model: model.State) -> list[str]:
    """A state's mapping (a TLA+ state and its reference state project alike) and its invariants.

    With the verdict cache on, the cache's invariants too.
    """
    got = view_of_model(state_model, state_view["keys"])  # type: ignore[arg-type]
    invariants = {**model.INVARIANTS, **(CACHE_INVARIANTS if state_model.cache is not None else {})}
    return [f"state {sid}: {line}" for line in differences(state_view, got)] + [
        f"state {sid}: {name} fails in the reference model"
        for name, holds in invariants.items()
        if not holds(state_model)
    ]


def _step_differences(
    action: str,
    source_model: model.State,
    source: Mapping[str, object],
    dest: Mapping[str, object],
    want: View,
    flavour: str = "native",
    chain: Sequence[bytes] = (),
) -> list[str]:
    """How the reference step the edge names misses ``dest`` (empty: it reaches it)."""
    try:
        after = replay_edge(action, source_model, source, dest, flavour=flavour, chain=chain)
    except model.ModelError as error:
        return [f"the reference model refused: {error}"]
    return differences(want, view_of_model(after, want["keys"]))  # type: ignore[arg-type]


def replay(
    graph: Graph,
    *,
    stop_at_first: bool = False,
    flavour: str = "native",
    cache: bool = False,
    chain: Sequence[bytes] = (),
) -> tuple[Counter[str], list[str]]:
    """Replay ``graph`` (no symmetry): (edges replayed per action, one line per divergence).

    ``flavour`` is the MarkMissFlavour of the config TLC explored, ``cache``
    whether it turns the verdict cache on, ``chain`` the chain of a
    Positioned config (its Lookups are positioned).
    """
    states, edges = graph
    views, models = _prepared(graph, cache=cache)
    failures: list[str] = []
    for sid in states:
        failures += _model_checks(sid, views[sid], models[sid])
    if failures:
        return Counter(), failures
    replayed: Counter[str] = Counter()
    for source, action, dest in edges:
        lines = _step_differences(action, models[source], states[source], states[dest], views[dest], flavour, chain)
        failures += [f"edge {source} -[{action}]-> {dest}: {line}" for line in lines]
        replayed[action] += 1
        if failures and stop_at_first:
            break
    return replayed, failures


def _first_divergence(graph: Graph, action: str, *, cache: bool = False, chain: Sequence[bytes] = ()) -> str:
    """The first divergence of a slipped reference model on ``graph``, asserted to be at an ``action`` step."""
    _, failures = replay(graph, stop_at_first=True, cache=cache, chain=chain)
    assert failures, f"the replay saw no divergence; the slip should show at a {action} step"
    assert f"-[{action}]->" in failures[0], failures[0]
    return failures[0]


def _reached(
    group: Sequence[Permutation],
    action: str,
    source_model: model.State,
    source: Mapping[str, object],
    dest: Mapping[str, object],
    dest_view: View,
) -> tuple[Permutation | None, list[str]]:
    """The renaming of ``dest`` the reference step reaches, else (None, the closest miss's lines).

    ``group[0]`` is the identity (its projection is ``dest_view``, already computed).
    """
    closest: tuple[Permutation, list[str]] | None = None
    for perm in group:
        renamed = dest if perm is group[0] else perm.state(dest)
        want = dest_view if perm is group[0] else view_of_tla(renamed)
        try:
            lines = _step_differences(action, source_model, source, renamed, want)
        except (ValueError, KeyError, StopIteration) as error:
            # The step's arguments are read off the successor: a wrong renaming can make that fail.
            lines = [f"the step's arguments cannot be read ({error!r})"]
        if not lines:
            return perm, []
        if closest is None or len(lines) < len(closest[1]):
            closest = perm, lines
    # Worded only here: most misses are followed by a renaming that matches.
    return None, [f"under {closest[0]}: {line}" for line in closest[1]] if closest else []


def replay_under_symmetry(graph: Graph, *, stop_at_first: bool = False) -> tuple[Counter[str], Counter[str], list[str]]:
    """Replay a graph TLC explored under a SYMMETRY (see model_replay's docstring).

    Each state is checked (mapping and invariants) when its edges are
    replayed, its reference state computed once (TLC writes a state's edges
    together, so one source is kept at a time: the whole graph's reference
    states would not fit comfortably).  Returns (edges replayed per action,
    edges per renaming that matched, one line per divergence).
    """
    states, edges = graph
    group = symmetry_group(next(iter(states.values())))
    views: dict[str, View] = {}

    def view(sid: str) -> View:
        # On first need: a replay that stops at its first divergence needs few.
        if sid not in views:
            views[sid] = view_of_tla(states[sid])
        return views[sid]

    failures: list[str] = []
    replayed: Counter[str] = Counter()
    matched: Counter[Permutation | None] = Counter()
    checked: set[str] = set()
    last, source_model = "", model.State()
    for source, action, dest in edges:
        if source != last:
            last, source_model = source, to_model(states[source])
            if source not in checked:
                checked.add(source)
                failures += _model_checks(source, view(source), source_model)
        perm, lines = _reached(group, action, source_model, states[source], states[dest], view(dest))
        failures += [f"edge {source} -[{action}]-> {dest}: {line}" for line in lines]
        replayed[action] += 1
        matched[perm] += 1
        if failures and stop_at_first:
            break
    else:
        for sid in states.keys() - checked:
            failures += _model_checks(sid, view(sid), to_model(states[sid]))
    # Named once per renaming rather than once per edge.
    return replayed, Counter({repr(perm): n for perm, n in matched.items()}), failures


@pytest.mark.tlc
@pytest.mark.long
def test_every_edge_of_the_default_graph_is_a_step_of_the_reference_model(default_graph: Graph) -> None:
    replayed, failures = replay(default_graph)
    assert not failures, f"{len(failures)} divergences; first: " + "\n".join(failures[:5])
    _, edges = default_graph
    assert sum(replayed.values()) == len(edges) > 100_000
    assert set(replayed) == ACTIONS, f"actions never replayed: {ACTIONS - set(replayed)}"


#: Actions whose guard the two models state alike, with how the reference model tries them.
GUARDED: dict[str, Callable[[model.State], object]] = {
    "TakeBatch": model.take_batch,
    "Drain": model.drain,
    "Die": lambda s: model.worker_dies(s, marker=True),
}


@pytest.mark.tlc
def test_the_reference_model_refuses_the_steps_tlc_never_takes(default_graph: Graph) -> None:
    # The replay shows every TLC step is a reference step; this shows the
    # converse for the actions without arguments: where TLC has no such
    # edge, the reference model raises (Die: also bounded by MaxDeaths = 1).
    states, edges = default_graph
    _, models = _prepared(default_graph)
    taken: dict[str, set[str]] = {sid: set() for sid in states}
    for source, action, _ in edges:
        taken[source].add(action)
    wrong: list[str] = []
    for sid, state in states.items():
        for action, attempt in GUARDED.items():
            try:
                attempt(models[sid])
                accepted = action != "Die" or state["deaths"] == 0
            except model.ModelError:
                accepted = False
            if accepted != (action in taken[sid]):
                wrong.append(f"state {sid}: {action} TLC {action in taken[sid]}, reference {accepted}")
    assert not wrong, f"{len(wrong)} states; first: " + "\n".join(wrong[:3])
    assert all(any(action in acts for acts in taken.values()) for action in GUARDED)


@pytest.mark.tlc
def test_a_guard_slipped_out_of_the_reference_model_is_seen(
    default_graph: Graph, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The slip: Drain does not know the death marker (it refuses to apply it).
    def drain_without_marker(s: model.State) -> model.State:
        if s.inbox and model.is_death_marker(s.inbox[0]):
            raise model.ModelError("Drain: not a group's outcome")
        return model.drain(s)

    monkeypatch.setitem(GUARDED, "Drain", drain_without_marker)
    with pytest.raises(AssertionError, match="Drain TLC True, reference False"):
        test_the_reference_model_refuses_the_steps_tlc_never_takes(default_graph)


@pytest.mark.tlc
@pytest.mark.deep_replay
@pytest.mark.timeout(DEEP_TIMEOUT)
def test_every_edge_of_the_full_default_graph_is_a_step_of_the_reference_model(full_default_graph: Graph) -> None:
    # default.cfg as CI checks it: 2 keys, 2 requests, 2 generations, MaxStuck 1,
    # MaxDeaths 1, with its symmetry; each TLC successor matched up to a renaming.
    replayed, renamings, failures = replay_under_symmetry(full_default_graph)
    assert not failures, f"{len(failures)} divergences; first: " + "\n".join(failures[:5])
    _, edges = full_default_graph
    assert sum(replayed.values()) == len(edges) > 1_000_000
    assert set(replayed) == ACTIONS, f"actions never replayed: {ACTIONS - set(replayed)}"
    # The symmetry is exercised: each of the 4 renamings (keys, requests, both) matched some edge.
    assert len(renamings) == 4, renamings


@pytest.mark.tlc
@pytest.mark.deep_replay
@pytest.mark.timeout(DEEP_TIMEOUT)
def test_a_stale_result_slipped_into_the_reference_model_is_the_first_divergence_of_the_full_graph(
    full_default_graph: Graph, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The one-line slip of the one-key test: no renaming of the successor hides it.
    correct = model.probe_drain
    monkeypatch.setattr(model, "probe_drain", lambda probe, gen, verdict: correct(probe, probe.gen, verdict))
    _, _, failures = replay_under_symmetry(full_default_graph, stop_at_first=True)
    assert failures, "the replay did not see a stale result applied"
    first = failures[0]
    assert "-[Drain]->" in first, first
    assert any(var in first for var in ("phase:", "verdict:", "gen:", "applied:", "stale:")), first


#: What the two-key graph adds: a group of two keys, a MarkMiss of two keys.
TWO_KEY_ACTIONS = ACTIONS - {"Die", "Revive", "TimeOut", "Saturate", "LateAnswer"}


@pytest.mark.tlc
def test_every_edge_of_a_two_key_graph_is_a_step_of_the_reference_model(two_key_graph: Graph) -> None:
    replayed, failures = replay(two_key_graph)
    assert not failures, f"{len(failures)} divergences; first: " + "\n".join(failures[:5])
    states, edges = two_key_graph
    assert sum(replayed.values()) == len(edges)
    assert set(replayed) == TWO_KEY_ACTIONS, f"actions never replayed: {TWO_KEY_ACTIONS - set(replayed)}"
    pairs = [(states[s], states[d]) for s, a, d in edges if a == "Flush"]
    assert any(len(g["probes"]) == 2 for _, d in pairs for b in d["subq"] for g in b), "no group of two keys"  # type: ignore[attr-defined, index]
    forced = [(states[s], states[d]) for s, a, d in edges if a == "MarkMiss"]
    assert any(sum(not s["forced"][k] and d["forced"][k] for k in s["forced"]) == 2 for s, d in forced), (
        "no MarkMiss of two keys"
    )  # type: ignore[attr-defined, index]


@pytest.mark.tlc
def test_a_stale_result_slipped_into_the_reference_model_is_the_first_divergence(
    default_graph: Graph, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The one-line slip: the outcome's generation is not compared (probe_drain
    # is told the state's own generation), so a stale result is applied.
    correct = model.probe_drain
    monkeypatch.setattr(model, "probe_drain", lambda probe, gen, verdict: correct(probe, probe.gen, verdict))
    first = _first_divergence(default_graph, "Drain")
    assert any(var in first for var in ("phase:", "verdict:", "gen:", "applied:", "stale:")), first


@pytest.mark.tlc
def test_a_slip_in_a_python_invariant_is_seen_on_the_explored_states(
    default_graph: Graph, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A slip in a Python invariant: NothingLeaks asking for waiters on every
    # state, IN_FLIGHT included (an orphan in flight is a reachable, correct state).
    monkeypatch.setitem(model.INVARIANTS, "NothingLeaks", lambda s: all(p.waiters for p in s.probes.values()))
    _, failures = replay(default_graph, stop_at_first=True)
    assert failures and "NothingLeaks fails in the reference model" in failures[0], failures[:1]


#: For each invariant, a mutant TLC catches with it on default.cfg (tests/tla/test_tla_check.py).
VIOLATED_BY = {
    "EnqueueOnce": "lookup-rejoins-batch",
    "NoDuplicateProbe": "cleanup-drops-in-flight",
    "StaleGenerationDropped": "stale-reclaims-newer",
    "VerdictIffResolved": "mark-miss-in-flight-unguarded",
    "ForcedMissSticks": "double-result",
    "VerdictProvenance": "verdict-from-other-key",
    "LookupAnswers": "lookup-skips-drain",
    "ReverseIndexConsistent": "cleanup-keeps-reverse-index",
    "NothingLeaks": "death-forgets-open",
    "AfterShutdownEmpty": "lookup-after-shutdown",
    "LookupReturnsVerdict": "lookup-answers-pending-miss",
    "VerdictFromBackend": "saturate-answers-stored",
}


def _states(values: Sequence[Mapping[str, str]]) -> list[dict[str, object]]:
    return [{name: parse_value(text) for name, text in step.items()} for step in values]


@pytest.mark.tlc
@pytest.mark.parametrize("invariant", sorted(VIOLATED_BY))
def test_the_reference_invariant_breaks_where_tlc_reports_its_namesake(invariant: str) -> None:
    result = mutant_run(VIOLATED_BY[invariant], invariant)
    assert (result.outcome, result.property) == ("invariant", invariant), result.errors
    *before, last = _states([step.values for step in result.trace])
    for state in before:
        assert model.broken_invariants(to_model(state)) == [], state
    assert invariant in model.broken_invariants(to_model(last)), last


def test_invariant_names_are_those_of_the_tla_model() -> None:
    text = (tla_dir() / "KVProbe.tla").read_text()
    for name in model.INVARIANTS:
        assert f"\n{name} ==" in text, name


def test_the_symmetry_group_renames_keys_and_requests_inside_every_value() -> None:
    state = {
        "phase": parse_value('(k1 :> "PENDING" @@ k2 :> "ABSENT")'),
        "requests": parse_value("(r1 :> {k1} @@ r2 :> {})"),
        "told": parse_value('(<<k1, 1>> :> "hit" @@ <<k2, 1>> :> "none")'),
        "out": parse_value('[key |-> k1, req |-> r1, ans |-> "none"]'),
    }
    group = symmetry_group(state)
    assert repr(group[0]) == "Permutation(identity)"
    renamed = [p.state(state) for p in group]
    assert renamed[0] == state
    assert len({repr(sorted(map(repr, r.values()))) for r in renamed}) == 4, "the 4 renamings differ"
    both = renamed[3]
    assert both["phase"] == parse_value('(k2 :> "PENDING" @@ k1 :> "ABSENT")')
    assert both["requests"] == parse_value("(r2 :> {k2} @@ r1 :> {})")
    assert both["told"] == parse_value('(<<k2, 1>> :> "hit" @@ <<k1, 1>> :> "none")')
    assert both["out"] == parse_value('[key |-> k2, req |-> r2, ans |-> "none"]'), "field names are kept"


# --- the vLLM drop-in's MarkMiss (tla/vllm.cfg) -----------------------------------------------


@pytest.mark.tlc
def test_every_edge_of_the_vllm_flavour_graph_is_a_step_of_the_reference_model(vllm_graph: Graph) -> None:
    # MarkMiss forces RESOLVED keys only: model.mark_miss(..., skip_unresolved=True) takes the same steps.
    replayed, failures = replay(vllm_graph, flavour="vllm")
    assert not failures, f"{len(failures)} divergences; first: " + "\n".join(failures[:5])
    states, edges = vllm_graph
    assert sum(replayed.values()) == len(edges) and replayed["MarkMiss"] > 0
    # The flavour is exercised: a MarkMiss leaves a PENDING and an IN_FLIGHT probe as they were.
    left = {
        states[s]["phase"][k]  # type: ignore[index]
        for s, a, d in edges
        if a == "MarkMiss"
        for k in states[s]["phase"]  # type: ignore[attr-defined]
        if states[s]["phase"][k] == states[d]["phase"][k] != "RESOLVED"  # type: ignore[index]
    }
    assert left == {"PENDING", "IN_FLIGHT"}, left
    # (A step does not show which keys it was given: the replay passes the keys it changed,
    # so the native flavour would replay these edges too; the test below tells them apart.)


@pytest.mark.parametrize("skip_unresolved", [False, True])
def test_mark_miss_on_an_in_flight_probe_in_each_flavour(skip_unresolved: bool) -> None:
    # Native: the forced MISS sticks and the probe's own answer is dropped.  vLLM 0.33's
    # (the drop-in's): the IN_FLIGHT probe is skipped and its own verdict lands; a
    # RESOLVED key named then is forced in both flavours, and answers MISS until reclaimed.
    s, _ = model.lookup(model.initial(), b"k", "r")
    s, (group,) = model.flush(s)
    s, _ = model.take_batch(s)
    s = model.mark_miss(s, [b"k"], skip_unresolved=skip_unresolved)
    s = model.complete_group(s, group.group_id, [True])
    s, verdict = model.lookup(s, b"k", "r")
    assert verdict is skip_unresolved
    assert model.broken_invariants(s) == []
    s = model.mark_miss(s, [b"k"], skip_unresolved=skip_unresolved)
    s, verdict = model.lookup(s, b"k", "r")
    assert verdict is False and model.broken_invariants(s) == []


# --- issue 29: an outcome does not wait for the rest of its batch ------------------------------


@pytest.mark.tlc
def test_the_reference_model_applies_an_outcome_beside_a_running_group_of_its_batch(tmp_path: Path) -> None:
    # reach.cfg's witness of NeverAppliedBesideRunning (without its symmetry, so every state is
    # one TLC reached): a group's outcome is applied while a group of the same batch still runs.
    text = reach_config((tla_dir() / "reach.cfg").read_text(), "NeverAppliedBesideRunning")
    cfg = tmp_path / "witness.cfg"
    cfg.write_text("\n".join(line for line in text.splitlines() if not line.startswith("SYMMETRY")) + "\n")
    result = run_tlc(tla_dir() / "MC.tla", cfg)
    assert (result.outcome, result.property) == ("invariant", "NeverAppliedBesideRunning"), result.errors
    states: list[dict[str, Any]] = _states([step.values for step in result.trace])
    actions = [step.action.split()[0] for step in result.trace]
    assert actions[-1] == "Drain"
    applied = states[-2]["resq"][0]["grp"]
    running = [g for g in states[-2]["taken"] if g != applied]
    batches = [set(d["taken"]) - set(s["taken"]) for s, d in itertools.pairwise(states)]
    assert any(applied in b and any(g in b for g in running) for b in batches), "not taken in one batch"
    # The reference model takes every step of the witness, to the same states.
    keys: frozenset[bytes] = view_of_tla(states[0])["keys"]  # type: ignore[assignment]
    for i, (source, dest) in enumerate(itertools.pairwise(states), start=1):
        after = replay_edge(actions[i], to_model(source), source, dest)
        assert differences(view_of_tla(dest), view_of_model(after, keys)) == [], actions[i]
    # ... and a lookup then sees the verdict while the other group's call still runs.
    key = next(iter(applied["probes"]))[0]
    after, verdict = model.lookup(to_model(states[-1]), str(key).encode(), str(applied["req"]))
    assert verdict is not None and after.taken, (verdict, after.taken)


# --- each walk with the verdict cache (tla/chain-cache.cfg, tla/inferred-cache.cfg) ----------------


@pytest.mark.tlc
@pytest.mark.parametrize("fixture", ["chain_cache_graph", "inferred_cache_graph"])
def test_every_edge_of_a_walk_with_the_cache_is_a_step_of_the_reference_model(
    fixture: str, request: pytest.FixtureRequest
) -> None:
    # Walks meet keys served from memory: each TLC step, a recall and a MarkMiss
    # that forgets a key without a state among them, is the reference model's
    # step, with the same memory and history; every state keeps the cache's
    # invariants in the reference model too.
    graph: Graph = request.getfixturevalue(fixture)
    replayed, failures = replay(graph, cache=True)
    assert not failures, f"{len(failures)} divergences; first: " + "\n".join(failures[:5])
    states, edges = graph
    assert sum(replayed.values()) == len(edges)
    recalls = [
        (s, d)
        for s, a, d in edges
        if a == "Lookup"
        and any(
            states[s]["phase"][k] == "ABSENT" and states[d]["phase"][k] == "RESOLVED"
            for k in states[s]["phase"]  # type: ignore[index]
        )
    ]
    assert recalls, "no lookup served from memory"
    assert any(states[d]["chainUntoldHit"] is False and states[d]["asked"] != states[s]["asked"] for s, d in recalls), (  # type: ignore[index]
        "no walk's lookup served from memory"
    )


@pytest.mark.tlc
def test_a_recall_slipped_out_of_the_reference_model_is_seen(
    chain_cache_graph: Graph, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The slip: the reference model serves a remembered answer under the new
    # generation's name, not the one it was recalled from (recalled keeps the new one).
    correct = model._recalled
    monkeypatch.setattr(
        model, "_recalled", lambda s, key, req, verdict, source: correct(s, key, req, verdict, s.next_gen)
    )
    _PREPARED.pop(id(chain_cache_graph), None)
    first = _first_divergence(chain_cache_graph, "Lookup", cache=True)
    _PREPARED.pop(id(chain_cache_graph), None)
    assert "recalled:" in first, first


# --- positioned lookups (tla/positions.cfg) -----------------------------------------------------


def _chain_of(graph: Graph) -> list[bytes]:
    """positions.cfg's chain: its first key is the one a Lookup from the start probes (the other is deferred)."""
    states, edges = graph
    start = next(sid for sid, st in states.items() if st["nextGen"] == 1 and not any(st["requests"].values()))  # type: ignore[attr-defined]
    keys = sorted(states[start]["phase"], key=str)  # type: ignore[call-overload]
    probed = {
        str(k)
        for s, a, d in edges
        if s == start and a == "Lookup"
        for k in keys
        if states[d]["phase"][k] == "PENDING"  # type: ignore[index]
    }
    assert len(probed) == 1, probed
    return sorted((str(k).encode() for k in keys), key=lambda k: k.decode() not in probed)


@pytest.mark.tlc
def test_every_edge_of_the_positions_graph_is_a_step_of_the_reference_model(positions_graph: Graph) -> None:
    # Positioned lookups (issue 38): each TLC Lookup, probed, deferred or answered
    # NOT stored past a known miss, is the reference model's positioned_lookup for
    # some key and request, with the same table and the same history (posPastMiss,
    # deferred); every state keeps the reference invariants.
    chain = _chain_of(positions_graph)
    replayed, failures = replay(positions_graph, chain=chain)
    assert not failures, f"{len(failures)} divergences; first: " + "\n".join(failures[:5])
    states, edges = positions_graph
    assert sum(replayed.values()) == len(edges)
    assert any(st["deferred"] != states[s]["deferred"] for s, a, d in edges if a == "Lookup" for st in [states[d]]), (
        "no lookup deferred"
    )


@pytest.mark.tlc
def test_a_rule_that_probes_past_a_miss_is_seen_by_the_positions_replay(
    positions_graph: Graph, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The slip: the reference rule ignores a known miss before the key.
    from kvprobe.spec import model_positions

    correct = model_positions.position_rule

    def slipped(verdicts: Sequence[bool | None], rank: int, *rest: object) -> str:
        decided = correct(verdicts, rank, *rest)  # type: ignore[arg-type]
        return "probe" if decided == "past_miss" else decided

    monkeypatch.setattr(model_positions, "position_rule", slipped)
    _first_divergence(positions_graph, "Lookup", chain=_chain_of(positions_graph))
