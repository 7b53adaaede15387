"""Recorded traces as TLA+ modules, for trace validation by TLC (``tla/Trace.tla``).

The implementation records its actions as NDJSON events
(:mod:`kvprobe.statemachine.trace`; the event names are the model's actions,
:mod:`kvprobe.spec.actions`).  TLC 2.15 has no CommunityModules, so it cannot
read JSON itself: :func:`trace_to_tla` writes a trace as a generated module
that holds it as the sequence ``TraceLog`` and extends ``Trace``, and the
TLC config that checks it.  :func:`trace_coverage_line` says which actions an
accepted trace covered.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from kvprobe.spec.actions import CALL_RETURNED, RECORDED_EVENTS, TRACE_EVENTS, WORKER_EVENTS
from kvprobe.statemachine.windows import window_end
from kvprobe.tlc_output import TlcResult, coverage_line

__all__ = ["read_trace", "trace_coverage", "trace_coverage_line", "trace_to_tla"]

#: What an event's fields map a group id to: the ``{req, keys, gens}`` its Flush submitted.
GroupOf = Callable[[object], Mapping[str, object]]


def _tla_string(text: str) -> str:
    if not re.fullmatch(r"[\w.:\-]*", text):
        raise ValueError(f"trace value {text!r} cannot be written as a TLA+ string")
    return f'"{text}"'


def _tla_verdict(value: object) -> str:
    if value is None:
        return '"none"'
    if value is True:
        return '"hit"'
    if value is False:
        return '"miss"'
    raise ValueError(f"a verdict must be true, false or null, got {value!r}")


def _answers(keys: Sequence[str], gens: Sequence[str], verdicts: object, seq: object) -> str:
    """A TLA+ function probe -> "hit"/"miss": the verdicts, or MISS for every key if None."""
    if verdicts is None:
        answers = ['"miss"'] * len(keys)
    else:
        if not isinstance(verdicts, list) or len(verdicts) != len(keys):
            raise ValueError(f"event {seq}: one verdict per key expected")
        answers = [_tla_verdict(bool(v)) for v in verdicts]
    pairs = [f"<<{k}, {g}>> :> {a}" for k, g, a in zip(keys, gens, answers, strict=True)]
    return "(" + " @@ ".join(pairs) + ")" if pairs else "<<>>"


def _list(event: Mapping[str, object], name: str) -> list[Any]:
    value = event.get(name) or []
    if not isinstance(value, list):
        raise ValueError(f"event {event.get('seq')}: {name} must be a list")
    return value


def _tla_event(event: Mapping[str, object], groups: Mapping[int, Mapping[str, object]]) -> str:
    """One event as a TLA+ record; ``groups`` maps the group ids flushed so far to their ``{req, keys, gens}``."""
    action = event.get("action")
    seq = event.get("seq")

    def group_of(gid: object) -> Mapping[str, object]:
        if not isinstance(gid, int) or gid not in groups:
            raise ValueError(f"event {seq}: group {gid!r} was not submitted by an earlier Flush")
        return groups[gid]

    if action not in RECORDED_EVENTS:
        raise ValueError(f"event {seq}: unknown action {action!r}")
    fields = {"action": _tla_string(str(action))}
    if action in WORKER_EVENTS or action == CALL_RETURNED:
        fields.update(_worker_fields(event, group_of))
    else:
        fields.update(_scheduler_fields(event))
    return "[" + ", ".join(f"{name} |-> {value}" for name, value in fields.items()) + "]"


def _worker_fields(event: Mapping[str, object], group_of: GroupOf) -> dict[str, str]:
    """A worker event's fields: the group taken or answered, the answer per key, the worker's own state."""
    action, seq = event.get("action"), event.get("seq")
    fields: dict[str, str] = {}
    if action == "TakeBatch":
        ids = event.get("groups")
        if not isinstance(ids, list):
            raise ValueError(f"event {seq}: groups must be a list of group ids")
        fields["groups"] = _tla_groups([group_of(g) for g in ids], seq)
    elif action not in ("Die", "Revive"):
        found = group_of(event.get("group"))
        fields["grp"] = _tla_group(found)
        if action in ("CompleteGroup", "LateAnswer", CALL_RETURNED):
            keys = [_tla_string(str(k)) for k in found["keys"]]  # type: ignore[attr-defined]
            gens = [str(int(g)) for g in found["gens"]]  # type: ignore[attr-defined]
            if action == "CompleteGroup" and event.get("verdicts") is None:
                raise ValueError(f"event {seq}: CompleteGroup without verdicts")
            # A late call that failed answers nothing: MISS for each key (it is dropped anyway).
            fields["ans"] = _answers(keys, gens, event.get("verdicts"), seq)
        if action == CALL_RETURNED:
            fields["answered"] = "FALSE" if event.get("verdicts") is None else "TRUE"
    held = event.get("held")
    fields["heldKnown"] = "FALSE" if held is None else "TRUE"
    if held is not None and not isinstance(held, list):
        raise ValueError(f"event {seq}: held must be a list of group ids")
    fields["held"] = _tla_groups([group_of(g) for g in held or []], seq)
    stuck = event.get("stuck")
    fields["stuckKnown"] = "FALSE" if stuck is None else "TRUE"
    fields["stuck"] = "0" if stuck is None else str(int(str(stuck)))
    return fields


def _scheduler_fields(event: Mapping[str, object]) -> dict[str, str]:
    """A scheduler event's fields: its arguments and results, the touched keys' states, the open groups."""
    action, seq = event.get("action"), event.get("seq")
    fields = {"size": str(int(str(event.get("size", 0))))}
    if action == "Lookup":
        fields["key"] = _tla_string(str(event["key"]))
        fields["req"] = _tla_string(str(event["req"]))
        fields["verdict"] = _tla_verdict(event.get("verdict"))
        phase = event.get("phase")
        fields["phase"] = _tla_string("ABSENT" if phase is None else str(phase))
        fields.update(_walk_fields(event))
    elif action == "Flush":
        fields["groups"] = _tla_groups(event.get("groups") or [], seq)
    elif action == "Drain":
        fields.update(_drain_fields(event))
    elif action == "Cleanup":
        fields["req"] = _tla_string(str(event["req"]))
    elif action == "MarkMiss":
        fields["keys"] = "{" + ", ".join(_tla_string(str(k)) for k in _list(event, "keys")) + "}"
    fields["after"] = _tla_after(event)
    fields["open"] = _tla_groups(event.get("open"), seq)
    return fields


def _walk_fields(event: Mapping[str, object]) -> dict[str, str]:
    """A Lookup's place in an exact chain walk: ``walked``, its 0-based ``index`` and the window schedule.

    ``first`` is the first window's size (0: one window, ``"all"``).  The
    start of the window holding the key is computed by Trace.tla for the
    default growth 2; for another growth (a float, and TLC's integers are
    32 bits) it is computed here from the library's schedule and written as
    ``start`` (1-based; 0 when Trace.tla computes it).
    """
    seq, index = event.get("seq"), event.get("index")
    if index is None:
        return {"walked": "FALSE", "index": "0", "first": "0", "start": "0"}
    window, growth = event.get("window"), event.get("growth", 2.0)
    if type(index) is not int or index < 0:
        raise ValueError(f"event {seq}: a chain index must be an int of at least 0, got {index!r}")
    if window != "all" and (type(window) is not int or window < 1):
        raise ValueError(f"event {seq}: a chain window must be 'all' or a positive int, got {window!r}")
    if isinstance(growth, bool) or not isinstance(growth, (int, float)) or not growth > 1.0:
        raise ValueError(f"event {seq}: a chain window growth must be a number above 1, got {growth!r}")
    first = 0 if window == "all" else int(window)
    start = 0
    if first and growth != 2.0:
        begin = 0  # the 0-based start of the window holding the key
        while (end := window_end(first, begin, float(growth))) <= index:
            begin = end
        start = begin + 1
    return {"walked": "TRUE", "index": str(index), "first": str(first), "start": str(start)}


def _drain_fields(event: Mapping[str, object]) -> dict[str, str]:
    """The outcome a Drain applied: its probes, kind, answer per probe, and whether it came late."""
    keys = [_tla_string(str(k)) for k in _list(event, "keys")]
    gens = [str(int(g)) for g in _list(event, "gens")]
    verdicts = event.get("verdicts")
    failure = event.get("failure")
    late = bool(event.get("late"))
    if failure == "worker_died" and event.get("group") == 0:
        kind = "died"  # the death marker: no group of its own
    elif verdicts is not None or late:
        kind = "ok"  # a late answer is always "ok" in the model (it is dropped)
    else:
        kind = str(failure) if failure in ("timeout", "saturated") else "fail"
    return {
        "probes": "{" + ", ".join(f"<<{k}, {g}>>" for k, g in zip(keys, gens, strict=True)) + "}",
        "kind": _tla_string(kind),
        "ans": _answers(keys, gens, verdicts, event.get("seq")),
        "late": "TRUE" if late else "FALSE",
    }


def _tla_group(group: Mapping[str, object]) -> str:
    keys = [_tla_string(str(k)) for k in group["keys"]]  # type: ignore[attr-defined]
    gens = [str(int(g)) for g in group["gens"]]  # type: ignore[attr-defined]
    probes = "{" + ", ".join(f"<<{k}, {g}>>" for k, g in zip(keys, gens, strict=True)) + "}"
    return f"[req |-> {_tla_string(str(group['req']))}, probes |-> {probes}]"


def _tla_groups(groups: object, seq: object) -> str:
    if not isinstance(groups, list):
        raise ValueError(f"event {seq}: groups must be a list")
    return "{" + ", ".join(_tla_group(g) for g in groups) + "}"


def _tla_after(event: Mapping[str, object]) -> str:
    """The states of the keys an event touched, as a TLA+ function key -> record."""
    after = event.get("after")
    if not isinstance(after, list):
        raise ValueError(f"event {event.get('seq')}: after (the touched keys' states) must be a list")
    pairs = []
    for item in after:
        waiters = "{" + ", ".join(_tla_string(str(r)) for r in item["waiters"]) + "}"
        # The verdict cache's entry of the key ("none" and 0 without one, or with the cache off).
        record = (
            f"[phase |-> {_tla_string(str(item['phase']))}, gen |-> {int(item['gen'])}, "
            f"verdict |-> {_tla_verdict(item['verdict'])}, waiters |-> {waiters}, "
            f"mem |-> {_tla_verdict(item.get('remembered'))}, memGen |-> {int(item.get('remembered_gen') or 0)}]"
        )
        pairs.append(f"{_tla_string(str(item['key']))} :> {record}")
    return "(" + " @@ ".join(pairs) + ")" if pairs else "<<>>"


def trace_coverage(events: Sequence[Mapping[str, object]]) -> dict[str, int]:
    """How many events of each model action a trace holds (0 for actions it lacks).

    For an accepted trace these are the model's steps TLC matched, one per event.
    """
    counts = dict.fromkeys(TRACE_EVENTS, 0)
    for event in events:
        name = str(event.get("action"))
        counts[name] = counts.get(name, 0) + 1
    return counts


def trace_coverage_line(events: Sequence[Mapping[str, object]]) -> str:
    """:func:`coverage_line` for a trace: each action and how many events matched it, and the actions never matched."""
    counts = trace_coverage(events)
    return coverage_line(TlcResult("ok", 0, coverage={name: (n, n) for name, n in counts.items()}))


def trace_to_tla(events: Sequence[Mapping[str, object]], module: str = "TraceRun") -> tuple[str, str]:
    """Write a recorded trace as a TLA+ module and its TLC config.

    Returns ``(module text, config text)``: the module extends ``Trace``
    (``tla/Trace.tla``) and defines the trace as the sequence ``TraceLog``
    and the constants sized from it: the keys and requests it mentions, the
    highest generation, the worker's bound on stuck calls (as recorded by a
    threaded worker; unbounded otherwise), the number of worker deaths,
    whether the worker logged its actions, and whether the core had a
    verdict cache (its events record the touched keys' entries: then
    ``CacheOn`` is TRUE).  The config checks
    ``TraceUnfinished``, which TLC reports as violated exactly when the whole
    trace is a behaviour of KVProbe.

    Raises:
        ValueError: an event does not follow the schema of
            :mod:`kvprobe.statemachine.trace` (the message names its ``seq``).
    """
    keys: set[str] = set()
    reqs: set[str] = set()
    groups: dict[int, Mapping[str, object]] = {}
    max_gen = 1
    max_stuck: int | None = None
    deaths = 0
    cache_on = False
    rendered = []
    for event in events:
        if event.get("key") is not None:
            keys.add(str(event["key"]))
        keys.update(str(k) for k in (event.get("keys") or []))  # type: ignore[attr-defined]
        if event.get("req") is not None:
            reqs.add(str(event["req"]))
        for group in event.get("groups") or []:  # type: ignore[attr-defined]
            if isinstance(group, dict):  # a Flush's group (TakeBatch lists ids)
                keys.update(str(k) for k in group["keys"])
                reqs.add(str(group["req"]))
                max_gen = max([max_gen, *(int(g) for g in group["gens"])])
                groups[int(group["group"])] = group
        for item in event.get("after") or []:  # type: ignore[attr-defined]
            keys.add(str(item["key"]))
            reqs.update(str(r) for r in item["waiters"])
            max_gen = max(max_gen, int(item["gen"]))
            cache_on = cache_on or "remembered" in item  # recorded only by a core with a verdict cache
        max_gen = max([max_gen, *(int(g) for g in (event.get("gens") or []))])  # type: ignore[attr-defined]
        if event.get("max_stuck") is not None:
            max_stuck = int(str(event["max_stuck"]))
        deaths += event.get("action") == "Die"
        rendered.append(_tla_event(event, groups))
    worker_logged = any(event.get("action") in (*WORKER_EVENTS, CALL_RETURNED) for event in events)
    body = ",\n    ".join(rendered)
    # KVProbe's CacheOn is a definition (FALSE); the config overrides it for a cached core's trace.
    cache_line = "    CacheOn = TRUE\n" if cache_on else ""
    text = (
        f"---- MODULE {module} ----\n"
        "\\* Generated by kvprobe.tlc.trace_to_tla from a recorded NDJSON trace.\n"
        "EXTENDS Trace\n\n"
        f"TraceKeys == {{{', '.join(_tla_string(k) for k in sorted(keys))}}}\n"
        f"TraceReqs == {{{', '.join(_tla_string(r) for r in sorted(reqs))}}}\n"
        f"TraceMaxGen == {max_gen}\n"
        f"TraceLog == <<\n    {body}\n>>\n"
        "====\n"
    )
    config = (
        # One behaviour to follow: a small graph, so C1 alone (kvprobe.tlc.QUICK_JIT).
        "\\* kvprobe: jit c1\n"
        "CONSTANTS\n"
        "    Keys <- TraceKeys\n"
        "    Reqs <- TraceReqs\n"
        "    MaxGen <- TraceMaxGen\n"
        f"    MaxStuck = {len(events) + 1 if max_stuck is None else max_stuck}\n"
        f"    MaxDeaths = {deaths}\n"
        "    Log <- TraceLog\n"
        "    FlushOwners <- TraceFlushOwners\n"
        f"    WorkerLogged = {'TRUE' if worker_logged else 'FALSE'}\n"
        f"{cache_line}"
        "INIT TraceInit\n"
        "NEXT TraceNext\n"
        "INVARIANT TraceUnfinished\n"
    )
    return text, config


def read_trace(path: Path) -> list[dict[str, object]]:
    """Read an NDJSON trace file (blank lines skipped).

    Raises:
        OSError: the file cannot be read.
        ValueError: a line is not JSON.
    """
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
