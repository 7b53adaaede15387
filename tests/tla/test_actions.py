"""kvprobe.spec.actions declares the model's actions once: tla/*.tla and every user agree with it.

Next's actions are read off KVProbe.tla itself (the disjuncts of Next,
expanded through the operators that are disjunctions of others), and off
TLC's coverage report (the steps TLC names); the event names Trace.tla
matches, the plain-words account and the trace encoder use the same
declaration.
"""

from __future__ import annotations

import re
import shutil

import pytest

from kvprobe.explain import ACTIONS as EXPLAINED
from kvprobe.spec import actions
from kvprobe.spec.lifecycle import Event
from kvprobe.statemachine.trace import WORKER_ACTIONS as TRACED_WORKER_ACTIONS
from kvprobe.tlc import run_tlc, tla_dir, trace_coverage

_DEFINITION = re.compile(r"^(\w+)(?:\([^)]*\))? ==(.*?)(?=^\S|\Z)", re.MULTILINE | re.DOTALL)
_QUANTIFIER = re.compile(r"^(?:\\[EA] [^:]+ :\s*)+")


def definitions(module: str) -> dict[str, str]:
    """Operator name -> its definition's body (up to the next unindented line), comments removed."""
    text = re.sub(r"\\\*[^\n]*", "", (tla_dir() / module).read_text())
    return {m.group(1): m.group(2).strip() for m in _DEFINITION.finditer(text)}


def disjuncts(body: str) -> list[str] | None:
    """The operator each disjunct of ``body`` applies (after its quantifiers), or None if it is no disjunction."""
    parts = [p.strip() for p in re.split(r"\\/", body)]
    if parts[0] == "":
        parts = parts[1:]
    if len(parts) < 2:
        return None
    names = []
    for part in parts:
        applied = re.fullmatch(r"(\w+)(?:\([^()]*\))?", _QUANTIFIER.sub("", part))
        if applied is None:
            return None
        names.append(applied.group(1))
    return names


def next_actions(defs: dict[str, str], name: str = "Next") -> list[str]:
    """The actions of ``name``: its disjuncts, each expanded if it is itself such a disjunction."""
    found: list[str] = []
    for part in disjuncts(defs[name]) or [name]:
        found += next_actions(defs, part) if part != name and disjuncts(defs[part]) else [part]
    return found


def test_next_is_the_declared_actions() -> None:
    found = next_actions(definitions("KVProbe.tla"))
    assert sorted(found) == sorted(actions.ACTIONS)
    assert len(found) == len(set(found)) == 15


def test_the_kinds_of_actions() -> None:
    assert actions.CORE_EVENTS == tuple(event.value for event in Event)
    assert set(actions.SCHEDULER_ACTIONS) | set(actions.WORKER_ACTIONS) | {actions.TERMINATED} == set(actions.ACTIONS)
    assert set(actions.TRACE_EVENTS) == set(actions.ACTIONS) - {actions.TERMINATED}
    assert TRACED_WORKER_ACTIONS == set(actions.WORKER_EVENTS)


def test_the_trace_spec_matches_the_declared_events() -> None:
    defs = definitions("Trace.tla")
    core = set(re.findall(r'"(\w+)"', defs["CoreEvents"]))
    assert core == set(actions.CORE_EVENTS)
    matched = set(re.findall(r'e\.action = "(\w+)"', defs["Matches"] + defs["WorkerMatches"]))
    assert matched == set(actions.TRACE_EVENTS)


def test_every_action_is_explained_and_counted() -> None:
    assert set(EXPLAINED) == set(actions.ACTIONS)
    assert set(trace_coverage([])) == set(actions.TRACE_EVENTS)


def test_the_reader_of_next_sees_a_changed_model() -> None:
    # The parser is the test's own: it must see an action added to, or missing from, Next.
    defs = definitions("KVProbe.tla")
    defs["WorkerSteps"] += r" \/ Rest"
    defs["Rest"] = "/\\ UNCHANGED vars"
    assert "Rest" in next_actions(defs)
    defs["SchedulerSteps"] = defs["SchedulerSteps"].replace(r"\/ Revive", "")
    assert "Revive" not in next_actions(defs)


@pytest.mark.tlc
@pytest.mark.skipif(shutil.which("java") is None, reason="TLC needs Java")
def test_tlc_names_its_steps_by_the_declared_actions() -> None:
    # liveness.cfg: the smallest model; TLC's coverage report lists every action of Next, fired or not.
    result = run_tlc(tla_dir() / "MC.tla", tla_dir() / "liveness.cfg")
    assert result.outcome == "ok", result.errors
    assert set(result.coverage) - {"Init"} == set(actions.ACTIONS)
