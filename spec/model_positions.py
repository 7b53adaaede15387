"""Positioned lookups in the reference model: vLLM's per-key scan with key positions, and its invariant.

vLLM's scheduler asks a tier for a request's keys one at a time, in chain
order, and asks again next step while an answer is "not known yet".  With
the key's position, the lookup of the key at position ``i`` of the
request's chain, not held by the request, is decided from the verdicts the
request holds (:func:`position_rule`), stated here as a rule over those
verdicts, not as the implementation's loop:

* ``"past_miss"``: a key the rule reads is known NOT stored.  The rule
  reads the keys before ``i`` up to the end of the window holding the first
  key whose verdict the request does not hold (all of them when there is
  none).  No probe; the answer is False.
* ``"defer"``: some key before ``i`` is unknown and ``i`` lies past the end
  of that key's window.  No probe, no state; the answer is None.
* ``"probe"``: otherwise; the key is looked up (:func:`kvprobe.spec.model.lookup`).

The inferred rule (``search``) follows the search of
:func:`kvprobe.spec.model_chain.search_position` over the verdicts the
request holds for the whole chain: the position it probes next is probed,
a position at or before the last it knows stored is inferred stored
(``"inferred_hit"``, answer True), one at or after the first it knows NOT
stored answers False, any other is deferred.

History (read only by the invariant and the liveness check below): each
positioned lookup that probes is recorded as a
:class:`~kvprobe.spec.model_state.ChainAsk` whose ``before`` holds the
verdicts the request held for the earlier keys *then*, read off the table,
not through :func:`position_rule`; ``deferred`` holds the (request, key)
pairs whose last positioned lookup was deferred (dropped when the key is
probed or answered, or when the request finishes).

* :func:`PositionsStopAtMiss`: no positioned lookup probed a key after a
  key of its request's chain known NOT stored (tla/KVProbe.tla's namesake).
* :func:`deferred_served`: the liveness of tla/KVProbe.tla's
  ``DeferredServed`` on a finite run: after the scan asked again once every
  answer was in (:func:`scan_until_settled`), a key still deferred is
  passed by a known miss.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

from kvprobe.spec.model import drain_all, flush, lookup
from kvprobe.spec.model_chain import search_position, window_start
from kvprobe.spec.model_state import ChainAsk, Key, State, begin
from kvprobe.spec.model_worker import complete_group, take_batch

__all__ = [
    "DECISIONS",
    "PositionsStopAtMiss",
    "Rule",
    "deferred_served",
    "held_verdicts",
    "position_rule",
    "positioned_lookup",
    "scan_until_settled",
    "window_end",
]

#: What a positioned lookup may do.
DECISIONS = ("probe", "defer", "past_miss", "inferred_hit")

#: The shape of :func:`position_rule`: (verdicts, rank, first window, growth, search) -> decision.
Rule = Callable[[Sequence["bool | None"], int, "int | None", float, bool], str]


def window_end(first: int | None, index: int, growth: float = 2.0) -> int | None:
    """The end (exclusive) of the window holding position ``index``; None for one window (``first`` None)."""
    if first is None:
        return None
    end = index + 1
    while window_start(first, end, growth) <= index:
        end += 1
    return end


def position_rule(
    verdicts: Sequence[bool | None], rank: int, first: int | None, growth: float = 2.0, search: bool = False
) -> str:
    """What the positioned lookup of position ``rank`` does, its request holding ``verdicts`` (one per chain key).

    ``verdicts[rank]`` is None (the request does not hold the key).  Returns one of :data:`DECISIONS`.
    """
    if search:
        return _search_rule(verdicts, rank)
    unknown = [i for i in range(rank) if verdicts[i] is None]
    end = window_end(first, unknown[0], growth) if unknown else None
    reads = rank if end is None else min(rank, end)
    if False in verdicts[:reads]:
        return "past_miss"
    if end is not None and end <= rank:
        return "defer"
    return "probe"


def _search_rule(verdicts: Sequence[bool | None], rank: int) -> str:
    lo, hi = -1, len(verdicts)
    while hi > lo + 1:
        position = search_position(lo, hi, len(verdicts))
        if verdicts[position] is None:
            if position == rank:
                return "probe"
            break
        lo, hi = (position, hi) if verdicts[position] else (lo, position)
    if rank <= lo:
        return "inferred_hit"
    return "past_miss" if rank >= hi else "defer"


def held_verdicts(s: State, chain: Sequence[Key], req: str) -> list[bool | None]:
    """The verdict ``req`` holds for each key of ``chain`` (None: not held, or not resolved)."""
    return [p.verdict if (p := s.probes.get(k)) is not None and req in p.waiters else None for k in chain]


def positioned_lookup(
    s: State,
    chain: Sequence[Key],
    rank: int,
    req: str,
    first: int | None,
    growth: float = 2.0,
    search: bool = False,
    *,
    fresh: bool | None = None,
    rule: Rule | None = None,
) -> tuple[State, bool | None, str]:
    """``req`` asks for ``chain[rank]`` with its position: (state, answer, decision).

    Published outcomes are applied first (as :func:`~kvprobe.spec.model.lookup`
    does).  A key ``req`` already holds is looked up as without a position.
    ``fresh`` is passed to the lookup of a probed key (the verdict cache);
    ``rule`` replaces :func:`position_rule` (a test's mutant).  Raises
    :class:`~kvprobe.spec.model_state.ModelClosedError` after shutdown.
    """
    s = drain_all(begin(s))
    key = chain[rank]
    held = held_verdicts(s, chain, req)
    probe = s.probes.get(key)
    if probe is not None and req in probe.waiters:
        s, verdict = lookup(s, key, req, fresh=fresh)
        return s, verdict, "probe"
    decision = (rule or position_rule)(held, rank, first, growth, search)
    pair = (req, key)
    if decision != "probe":
        deferred = s.deferred | {pair} if decision == "defer" else s.deferred - {pair}
        answer = {"defer": None, "past_miss": False, "inferred_hit": True}[decision]
        return replace(s, deferred=deferred, out=None), answer, decision
    ask = ChainAsk(req, key, rank, window_start(first, rank, growth), tuple(held[:rank]))
    s, verdict = lookup(s, key, req, fresh=fresh)
    return replace(s, position_probes=(*s.position_probes, ask), deferred=s.deferred - {pair}), verdict, "probe"


def PositionsStopAtMiss(s: State) -> bool:
    """No positioned lookup probed a key after a key of its request's chain was known NOT stored."""
    return all(False not in ask.before for ask in s.position_probes)


#: The backend's answer for a key in :func:`scan_until_settled` (the store).
Store = Callable[[Key], bool]


def scan_until_settled(
    s: State,
    chain: Sequence[Key],
    req: str,
    stored: Store,
    first: int | None,
    growth: float = 2.0,
    search: bool = False,
    *,
    rule: Rule | None = None,
    rounds: int = 100,
    stop_at_miss: bool = True,
) -> State:
    """vLLM's scan played out: ask for the keys of ``chain``, flush, answer every call from ``stored``, repeat.

    Each round asks for the keys in chain order, up to the first answer
    False when ``stop_at_miss`` (vLLM 0.33's scan; an answer None does not
    stop it), else every key (a caller that goes on past a miss), then the worker answers every submitted
    group and the answers are applied.  It ends when a round changes no
    probe state and no deferral, or after ``rounds`` rounds.  ``rule``
    replaces :func:`position_rule` (a test's mutant).
    """
    for _ in range(rounds):
        before = (s.probes, s.deferred)
        for rank in range(len(chain)):
            s, answer, _ = positioned_lookup(s, chain, rank, req, first, growth, search, rule=rule)
            if answer is False and stop_at_miss:
                break
        s, _ = flush(s, {})
        while s.queue:
            s, batch = take_batch(s)
            for group in batch:
                s = complete_group(s, group.group_id, [stored(k) for k in group.keys])
        s = drain_all(s)
        if (s.probes, s.deferred) == before:
            break
    return s


def deferred_served(s: State, chain: Sequence[Key]) -> bool:
    """After :func:`scan_until_settled`, each key still deferred is passed by a known miss.

    tla/KVProbe.tla's ``DeferredServed`` on a settled run: a deferred key
    was probed or answered since, or a key before it in ``chain`` is held
    NOT stored by its request (a scan stops there and asks no further).
    """
    for req, key in s.deferred:
        held = held_verdicts(s, chain, req)
        if False not in held[: chain.index(key)]:
            return False
    return True
