"""What TLC prints, read: its ``-tool`` message protocol and the result of a run.

Run with ``-tool``, TLC frames every line it prints with ``@!@!@STARTMSG
code:class`` / ``@!@!@ENDMSG code``, so a run's outcome is read from message
codes (``tlc2.output.EC``) rather than from English sentences:
:func:`parse_messages` splits the output into :class:`Message` s,
:func:`parse_steps` reads a counterexample's states, :func:`read_result`
makes a :class:`TlcResult` of a whole run, and :func:`coverage_line` sums up
which actions fired.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

__all__ = [
    "CLASS_ERROR",
    "MSG_PROGRESS",
    "MSG_SIM_PROGRESS",
    "MSG_STATS",
    "Message",
    "Step",
    "TlcResult",
    "coverage_line",
    "parse_messages",
    "parse_steps",
    "read_result",
]

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


def read_result(messages: list[Message], exit_code: int, seconds: float) -> TlcResult:
    """The outcome of a run from its messages and exit code (``seconds`` is its wall time).

    Never raises: what cannot be read is left out (``TlcResult.errors`` holds
    TLC's own text when it could not check).
    """
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
