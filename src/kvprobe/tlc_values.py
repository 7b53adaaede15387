"""TLC's values, read back into Python, and the state graphs made of them.

:func:`parse_value` reads a value as TLC prints it (in a counterexample's
states or in a ``-dump dot`` state graph): strings, numbers, booleans, model
values, sets, sequences, records and ``a :> x @@ b :> y`` functions;
:func:`parse_state` reads a whole state and :func:`read_state_graph` a
``-dump dot,actionlabels`` file (the explored state graph, edges labelled by
action).
"""

from __future__ import annotations

import re
from pathlib import Path

__all__ = ["FrozenDict", "ModelValue", "TlaValue", "parse_state", "parse_value", "read_state_graph"]


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
