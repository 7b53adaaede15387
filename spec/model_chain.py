"""The chain walk (``lookup_chain``) in the reference model: Lookups a window rule allows, and its invariants.

A walk of a request's chain ``keys`` is a sequence of the model's Lookup
actions (:func:`kvprobe.spec.model.lookup`), one per key, in order.  Which
keys it may look up is stated here as a rule over what the walk has seen,
not as the implementation's loop: the key at position ``i`` may be looked
up only if

* no earlier key of the walk was answered False (the walk stops at the
  first known miss), and
* every key before ``i``'s window was answered True (a window's keys are
  probed only once every key before the window is known stored).

The windows of a first window ``first`` and a growth ``growth``
(``chain_window_growth``) hold ``ceil(first * growth**k)`` keys, window
``k = 0, 1, 2, ...`` (the ceiling of the floating-point product): for the
default growth 2, ``first``, ``2 first``, ``4 first``, ...; ``first`` None
is one window holding every key (``chain_window="all"``).  The walk ends at
the first key the rule refuses.  The model takes any growth the manager
accepts (above 1, at most :data:`MAX_CHAIN_WINDOW_GROWTH`); its invariants
do not depend on the schedule, only on where each looked-up key's window
starts.

History (read only by the invariants below): each Lookup a walk makes is
recorded as a :class:`~kvprobe.spec.model_state.ChainAsk` with the verdicts
its earlier keys had at that moment, and each key a walk counts as stored is
recorded with its generation and whether a forced miss had hit it.  The
invariants are written over that history, never with :func:`refusal`, the
rule the walk decides by:

* :func:`ChainStopsAtMiss`: no walk looked a key up after a key of its chain
  was known NOT stored;
* :func:`ChainWindowWaits`: no walk looked a key up while a key before that
  key's window was not known stored;
* :func:`ChainHitsAnswered`: every key a walk counted as stored was answered
  stored by a backend call for that generation (``backend_hits``, the
  backend's own history) and not forced to MISS.

The correct model never breaks them; a state abstracted from a buggy
implementation (:mod:`kvprobe.testing.stateful`) can.

The inferred walk (``chain_mode="inferred"``, :func:`lookup_chain_inferred`)
is a search, stated here by its rule: the next position is a function of
the last position known stored (``lo``) and the first known NOT stored
(``hi``) among the positions the search probed (:func:`search_position`:
``0, 1, 3, 7, ...`` while no miss is known, then the midpoint), and the
search ends when ``hi == lo + 1``; the keys before ``lo`` it did not probe
are counted stored by inference.  Its Lookups are recorded as asks whose
``before`` holds the verdicts the search knew (None at positions it did not
probe) and whose window starts at 0, so :func:`ChainStopsAtMiss` says no
position after a known miss was probed.  A chain holding a refuted key
(one given to MarkMiss in inferred mode) is walked exactly; a walk that
inferred nothing un-refutes the keys it counted stored (the backend
answered them stored).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Final

from kvprobe.spec.model import lookup
from kvprobe.spec.model_state import ChainAsk, Key, ModelError, State, begin

__all__ = [
    "CHAIN_INVARIANTS",
    "MAX_CHAIN_WINDOW_GROWTH",
    "ChainHitsAnswered",
    "ChainStopsAtMiss",
    "ChainWindowWaits",
    "chain_step",
    "lookup_chain",
    "lookup_chain_inferred",
    "refusal",
    "search_position",
    "window_start",
]

#: The largest growth a walk may have; a trace claiming more is refused
#: (:mod:`kvprobe.spec.replay`).  It mirrors the library's bound
#: (``kvprobe.statemachine.windows.MAX_CHAIN_WINDOW_GROWTH``), restated here
#: because the spec is the bottom layer and imports nothing above it; a test
#: (``tests/core/test_chain_window_growth.py``) keeps the two equal.
MAX_CHAIN_WINDOW_GROWTH: Final = 16.0

#: What a walk answers: (leading hits, stopped at a miss, pending, keys looked up), as ``ChainAnswer``.
Answer = tuple[int, bool, bool, int]


def window_start(first: int | None, index: int, growth: float = 2.0) -> int:
    """Where the window holding position ``index`` starts (0 for every key when ``first`` is None).

    Window ``k`` holds ``ceil(first * growth**k)`` keys.
    """
    if first is None:
        return 0
    start, k = 0, 0
    while start + math.ceil(first * growth**k) <= index:
        start += math.ceil(first * growth**k)
        k += 1
    return start


def refusal(before: Sequence[bool | None], first: int | None, growth: float = 2.0) -> str | None:
    """Why a walk may not look up its next key, after earlier keys answered ``before``; None if it may."""
    if False in before:
        return f"key {before.index(False)} of the walk is known NOT stored"
    start = window_start(first, len(before), growth)
    unknown = [i for i, verdict in enumerate(before[:start]) if verdict is not True]
    if unknown:
        return f"key {unknown[0]} is not known stored, and it is before the window starting at key {start}"
    return None


def chain_step(
    s: State, req: str, key: Key, before: Sequence[bool | None], first: int | None, growth: float = 2.0
) -> tuple[State, bool | None]:
    """One Lookup of a walk: ``key`` at position ``len(before)``, after earlier keys answered ``before``.

    Raises:
        ModelError: the rule refuses the key (the model has no such step).
        ModelClosedError: after shutdown.
    """
    why = refusal(before, first, growth)
    if why is not None:
        raise ModelError(f"a chain walk of {req!r} may not look up position {len(before)}: {why}")
    ask = ChainAsk(req, key, len(before), window_start(first, len(before), growth), tuple(before))
    s, verdict = lookup(s, key, req)
    return replace(s, chain_asks=(*s.chain_asks, ask)), verdict


def lookup_chain(
    s: State, keys: Sequence[Key], req: str, first: int | None, growth: float = 2.0
) -> tuple[State, Answer]:
    """A walk of ``keys`` by ``req``: every key the rule allows, in order, up to the first it refuses.

    Returns the state and the answer ``(leading hits, stopped at a miss,
    pending, keys looked up)``; the leading hits are recorded as counted.
    Raises :class:`ModelClosedError` after shutdown (an empty chain too).
    """
    begin(s)  # an empty walk looks nothing up, but is refused after shutdown like any action
    verdicts: list[bool | None] = []
    for key in keys:
        if refusal(verdicts, first, growth) is not None:
            break
        s, verdict = chain_step(s, req, key, verdicts, first, growth)
        verdicts.append(verdict)
    leading = 0
    while leading < len(verdicts) and verdicts[leading] is True:
        leading += 1
    counted = set(s.chain_counted)
    for key in keys[:leading]:
        counted.add((key, s.probes[key].gen, (key, s.probes[key].gen) in s.forced))
    stopped = False in verdicts
    pending = None in verdicts[: verdicts.index(False) if stopped else len(verdicts)]
    return replace(s, chain_counted=frozenset(counted)), (leading, stopped, pending, len(verdicts))


#: What an inferred walk answers: :data:`Answer` and how many hits were inferred.
InferredAnswer = tuple[int, bool, bool, int, int]


def search_position(lo: int, hi: int, length: int) -> int:
    """The position the search probes next, ``lo`` known stored and ``hi`` known NOT stored.

    ``lo`` -1: none known stored; ``hi`` ``length``: none known NOT stored.
    Positions ``0, 1, 3, 7, ...`` (at most the last) while ``hi`` is the
    chain's end; after a miss, the midpoint of ``lo`` and ``hi``.
    """
    if hi < length:
        return (lo + hi) // 2
    return min(length - 1, 2 * lo + 1) if lo >= 0 else 0


def lookup_chain_inferred(
    s: State, keys: Sequence[Key], req: str, first: int | None, refuted: frozenset[Key]
) -> tuple[State, InferredAnswer, frozenset[Key]]:
    """The inferred walk of ``keys`` by ``req``: the search, or the exact walk if a key is ``refuted``.

    Returns the state, the answer ``(leading hits, stopped at a miss,
    pending, keys looked up, hits inferred)`` and the refuted keys after the
    walk (an answer that inferred nothing un-refutes its hits); the hits the
    search verified are recorded as counted, the inferred ones are not.
    Raises :class:`ModelClosedError` after shutdown (an empty chain too).
    """
    if refuted & set(keys) or not keys:
        s, exact = lookup_chain(s, keys, req, first)
        return s, (*exact, 0), refuted - set(keys[: exact[0]])
    begin(s)
    known: dict[int, bool] = {}
    lo, hi, looked, pending = -1, len(keys), 0, False
    while hi > lo + 1:
        position = search_position(lo, hi, len(keys))
        before = tuple(known.get(i) for i in range(position))
        ask = ChainAsk(req, keys[position], position, 0, before)
        s, verdict = lookup(s, keys[position], req)
        s = replace(s, chain_asks=(*s.chain_asks, ask))
        looked += 1
        if verdict is None:
            pending = True
            break
        known[position] = verdict
        lo, hi = (position, hi) if verdict else (lo, position)
    verified = [i for i, v in known.items() if v]
    counted = set(s.chain_counted)
    for i in verified:
        key = keys[i]
        counted.add((key, s.probes[key].gen, (key, s.probes[key].gen) in s.forced))
    answer = (lo + 1, hi < len(keys), pending, looked, lo + 1 - len(verified))
    if answer[4] == 0:
        refuted = refuted - set(keys[: lo + 1])
    return replace(s, chain_counted=frozenset(counted)), answer, refuted


def ChainStopsAtMiss(s: State) -> bool:
    """No walk looked up a key after a key of its chain was known NOT stored."""
    return all(False not in ask.before for ask in s.chain_asks)


def ChainWindowWaits(s: State) -> bool:
    """No walk looked up a key while a key before that key's window was not known stored."""
    return all(all(v is True for v in ask.before[: ask.window_start]) for ask in s.chain_asks)


def ChainHitsAnswered(s: State) -> bool:
    """Every key a walk counted as stored: a backend call answered its generation stored, and it was not forced.

    A state served from the verdict cache is judged by the generation whose answer it recalled.
    """
    return all(
        (key, s.recalled.get((key, gen), gen)) in s.backend_hits and not forced for key, gen, forced in s.chain_counted
    )


#: The chain walk's invariants by name (tla/KVProbe.tla's block "The chain walk", tla/chain.cfg).
CHAIN_INVARIANTS: dict[str, Callable[[State], bool]] = {
    "ChainStopsAtMiss": ChainStopsAtMiss,
    "ChainWindowWaits": ChainWindowWaits,
    "ChainHitsAnswered": ChainHitsAnswered,
}
