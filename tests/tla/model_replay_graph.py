"""TLC's explored state graph as the model replay reads it: the dump, shared values, the symmetry.

:func:`read_graph` reads a ``-dump dot,actionlabels`` file, parsing each
distinct value text once, so equal values of different states are one
object; :func:`by_identity` memoizes a conversion on that identity.  Under
a SYMMETRY, TLC keeps one state per class: :func:`symmetry_group` lists the
renamings (:class:`Permutation`) that map a state onto the others of its
class.  Nothing here knows the reference model (``model_replay.py`` maps
the states onto it).
"""

from __future__ import annotations

import functools
import itertools
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from kvprobe.tlc import FrozenDict, ModelValue, parse_value

__all__ = ["Permutation", "TlaState", "by_identity", "read_graph", "symmetry_group"]

#: A TLA+ state as the dump gives it: variable -> parsed value.
TlaState = Mapping[str, object]

_DOT_NODE = re.compile(r'^(-?\d+) \[label="(.*)"(?:,style = filled)?\];?$')
_DOT_EDGE = re.compile(r'^(-?\d+) -> (-?\d+) \[label="([^"]*)"')


@functools.cache
def _value(text: str) -> object:
    # Most values repeat across thousands of states: parse each text once.
    return parse_value(text)


def read_graph(path: Path) -> tuple[dict[str, dict[str, object]], list[tuple[str, str, str]]]:
    """Read a ``-dump dot,actionlabels`` file: (states by id, edges (source, action, dest)).

    The same result as ``kvprobe.tlc.read_state_graph``, with each distinct
    value text parsed once (the whole default graph in seconds, not minutes).

    Raises:
        ValueError: a value cannot be parsed.
    """
    states: dict[str, dict[str, object]] = {}
    edges: list[tuple[str, str, str]] = []
    with path.open() as stream:
        for line in stream:
            edge = _DOT_EDGE.match(line)
            if edge:
                edges.append((edge.group(1), edge.group(3), edge.group(2)))
                continue
            node = _DOT_NODE.match(line.rstrip("\n"))
            if node:
                label = node.group(2).replace("\\n", "\n").replace('\\"', '"').replace("\\\\", "\\")
                state: dict[str, object] = {}
                for chunk in label.split("\n/\\ "):
                    name, _, text = chunk.removeprefix("/\\ ").partition(" = ")
                    state[name.strip()] = _value(text)
                states[node.group(1)] = state
    return states, edges


_T = TypeVar("_T")


def by_identity(fn: Callable[[Any], _T]) -> Callable[[Any], _T]:
    """Memoize ``fn`` on its argument's identity.

    :func:`read_graph` parses each distinct value text once, so equal values
    of different states are one object: converting each object once makes
    the whole graph cheap.  The memo keeps the argument alive (its id stays
    unique).
    """
    memo: dict[int, tuple[object, _T]] = {}

    def cached(value: Any) -> _T:
        hit = memo.get(id(value))
        if hit is None:
            hit = memo[id(value)] = (value, fn(value))
        return hit[1]

    return cached


# --- symmetry ----------------------------------------------------------------------------------


class Permutation:
    """A renaming of model values (keys and requests), applied to whole TLA+ values.

    Values are renamed once per object (see :func:`by_identity`): equal
    values of different states stay one object after renaming, so the
    memoized projections stay cheap.
    """

    def __init__(self, mapping: Mapping[ModelValue, ModelValue]) -> None:
        self.mapping = dict(mapping)
        self._memo: dict[int, tuple[object, object]] = {}

    def __repr__(self) -> str:
        moved = {str(a): str(b) for a, b in self.mapping.items() if a != b}
        return f"Permutation({moved or 'identity'})"

    def value(self, value: object) -> object:
        """``value`` with every model value renamed (records' field names are strings: kept)."""
        hit = self._memo.get(id(value))
        if hit is None:
            hit = self._memo[id(value)] = (value, self._rename(value))
        return hit[1]

    def _rename(self, value: object) -> object:
        if isinstance(value, ModelValue):
            return self.mapping.get(value, value)
        if isinstance(value, FrozenDict):
            return FrozenDict({self.value(k): self.value(v) for k, v in value.items()})
        if isinstance(value, frozenset):
            return frozenset(self.value(v) for v in value)
        if isinstance(value, tuple):
            return tuple(self.value(v) for v in value)
        return value

    def state(self, state: TlaState) -> dict[str, object]:
        """``state`` with every variable's value renamed."""
        return {name: self.value(v) for name, v in state.items()}


def symmetry_group(state: TlaState) -> list[Permutation]:
    """Every permutation of the keys combined with every permutation of the requests, identity first.

    The group MC.tla's ``Symmetry`` (``Permutations(Keys) \\cup
    Permutations(Reqs)``) generates: TLC closes the set under composition
    (on default.cfg's graph 192 edges need a renaming of both at once).  The
    keys are ``phase``'s domain, the requests ``requests``'s.
    """
    keys = sorted(state["phase"])  # type: ignore[call-overload]
    reqs = sorted(state["requests"])  # type: ignore[call-overload]
    return [
        Permutation({**dict(zip(keys, ks, strict=True)), **dict(zip(reqs, rs, strict=True))})
        for ks in itertools.permutations(keys)
        for rs in itertools.permutations(reqs)
    ]
