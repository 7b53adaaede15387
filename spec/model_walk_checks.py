"""Mirrors of two of KVProbe.tla's inferred-walk invariants, written from facts the search does not decide by.

The inferred walk (:func:`kvprobe.spec.model_chain.lookup_chain_inferred`)
searches for the end of the stored prefix by :func:`search_position` over
what its request knows; a chain holding a refuted key is walked exactly.
These predicates check a state of the walk (:class:`WalkFacts`) against
what the search may answer:

* :func:`InferredAnswerNoKnownMiss`: no key the decided search counts stored
  is one its request knows NOT stored (read on the table: the request waits
  on the key and its verdict is MISS);
* :func:`RefutedWalkedExactly`: no request's walk infers a key stored while
  a key of its chain has had a failed load (``failed_loads``, the history
  that never shrinks, not ``refuted``, the state the walk decides by); a
  walk infers when its request's first known miss follows a known hit
  (:func:`knowledge_boundary`) and some key before that hit is not known
  stored.

Each has the meaning of the TLA+ invariant of the same name;
``tests/tla/test_model_walk_checks.py`` evaluates them on the states TLC
explores for ``tla/inferred-cache.cfg``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from kvprobe.spec import model_chain
from kvprobe.spec.model_state import Key

__all__ = [
    "WALK_INVARIANTS",
    "InferredAnswerNoKnownMiss",
    "RefutedWalkedExactly",
    "WalkFacts",
    "knowledge_boundary",
    "search_boundary",
]


@dataclass(frozen=True)
class WalkFacts:
    """What the inferred walk's invariants read of a state.

    ``verdicts`` maps a key to its verdict (None: none), ``waiters`` to the
    requests waiting on it; ``refuted`` is the state the walk decides by,
    ``failed_loads`` the history of every key whose load failed.
    """

    chain: tuple[Key, ...]
    requests: frozenset[str]
    inferred: bool
    waiters: Mapping[Key, frozenset[str]]
    verdicts: Mapping[Key, bool | None]
    refuted: frozenset[Key]
    failed_loads: frozenset[Key]

    def known(self, req: str, position: int) -> bool | None:
        """What ``req``'s own lookups told it of the key at ``position`` (None: nothing)."""
        key = self.chain[position]
        return self.verdicts.get(key) if req in self.waiters.get(key, frozenset()) else None

    def searching(self) -> bool:
        """The walk searches: inferred mode, and no key of the chain refuted."""
        return self.inferred and not (self.refuted & set(self.chain))


def search_boundary(facts: WalkFacts, req: str) -> tuple[int, int] | None:
    """Where ``req``'s search ends, ``(lo, hi)`` with ``hi == lo + 1``, by the model's rule; None if undecided.

    Replays :func:`kvprobe.spec.model_chain.search_position` over what
    ``req`` knows: the search probes nothing it already knows again.
    """
    length = len(facts.chain)
    lo, hi = -1, length
    while hi > lo + 1:
        position = model_chain.search_position(lo, hi, length)
        verdict = facts.known(req, position)
        if verdict is None:
            return None
        lo, hi = (position, hi) if verdict else (lo, position)
    return lo, hi


def knowledge_boundary(facts: WalkFacts, req: str) -> tuple[int, int] | None:
    """``(lo, hi)``: ``req``'s first known miss and its last known hit before it, if adjacent; else None.

    Read from the table whatever order the keys were looked up in, as
    KVProbe.tla's SearchLo and SearchHi are (a request's own lookups of
    single keys count too).
    """
    length = len(facts.chain)
    hi = next((i for i in range(length) if facts.known(req, i) is False), length)
    lo = max((i for i in range(hi) if facts.known(req, i) is True), default=-1)
    return (lo, hi) if hi == lo + 1 else None


def InferredAnswerNoKnownMiss(facts: WalkFacts) -> bool:
    """No key a decided search counts stored (positions before its boundary) is one its request knows NOT stored."""
    for req in facts.requests:
        boundary = search_boundary(facts, req) if facts.searching() else None
        if boundary is not None and any(facts.known(req, i) is False for i in range(boundary[1])):
            return False
    return True


def RefutedWalkedExactly(facts: WalkFacts) -> bool:
    """No walk infers a key stored (counts one it did not find stored) once a key of its chain had a failed load."""
    if not facts.failed_loads & set(facts.chain) or not facts.searching():
        return True
    for req in facts.requests:
        boundary = knowledge_boundary(facts, req)
        if boundary is not None and any(facts.known(req, i) is not True for i in range(boundary[0])):
            return False
    return True


#: The mirrors by TLA+ name.
WALK_INVARIANTS: dict[str, Callable[[WalkFacts], bool]] = {
    "InferredAnswerNoKnownMiss": InferredAnswerNoKnownMiss,
    "RefutedWalkedExactly": RefutedWalkedExactly,
}
