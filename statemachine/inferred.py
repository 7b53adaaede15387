"""The inferred chain walk: find a stored prefix's end in O(log n) probes, for tiers written in chain order.

``AsyncLookupManager(backend, chain_mode="inferred")`` (a core's
:attr:`~kvprobe.statemachine.core.LookupCore.chain_mode`) makes
``lookup_chain`` rely on one assumption about the tier:

    **The store is prefix-closed**: a block is stored only if every block
    before it in its chain is, and eviction removes a chain's suffixes
    first.

Under it, "key ``i`` is stored" means keys ``0 .. i`` all are, and the
stored prefix's end is found by search instead of by a walk: the walk
probes positions ``0, 1, 3, 7, 15, ...`` (galloping) until a probe answers
not stored or the chain ends, then bisects between the last position known
stored (``lo``) and the first known NOT stored (``hi``).  It is decided when
``hi == lo + 1`` (``hi`` is the chain's length when no miss was met): key
``lo`` was answered stored by the backend and key ``lo + 1`` answered NOT
stored (or ``lo`` is the last key).  The keys before ``lo`` that were not
probed are answered stored **by inference**, with no backend check;
:attr:`ChainAnswer.inferred <kvprobe.statemachine.types.ChainAnswer.inferred>`
counts them.  A stored prefix of ``p`` keys costs at most
``2 ceil(log2(n)) + 2`` probes of an ``n``-key chain, one at a time (each
position depends on the verdict before it), and no key after a known miss
is ever probed.

Each probe is the core's own :meth:`~kvprobe.statemachine.core.LookupCore.lookup`
of that key for the request (a new probe, a join, or a read of the
request's own state), so every probe keeps the lifecycle; the walk holds no
state of its own: each call replays the search from the request's
verdicts, which the request's states hold, and goes on until a probe's
verdict is unknown.

**When the assumption is broken** (a hole in the middle of a chain, a
block evicted before its successors), an inferred key may not be stored.
The engine finds out when its load fails and calls ``mark_miss`` on it, the
contract's path for a failed load.  In inferred mode the core remembers
the keys forced that way (:func:`refute`); a chain that holds one is walked
exactly from then on (:func:`kvprobe.statemachine.chain.walk_chain`, every
key up to the first miss, window by window), by every request: the failed
load proved the store is not prefix-closed around that key, which is a
fact about the tier, not about one request.  The exact walk probes the
hole and answers the true prefix.  A refuted key is forgotten when a walk
that inferred nothing counts it stored (the backend answered it stored
again: the engine wrote the block back, :func:`forgive`), and the memory
keeps the latest :data:`REFUTED_MEMORY` keys; a key forgotten may be
inferred again, and the engine's failed load of it refutes it again (a
wasted load, never a block used that is not stored).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final

from kvprobe.statemachine.types import ChainAnswer, InvalidInputError, InvalidValueError

if TYPE_CHECKING:
    from kvprobe.statemachine.core import LookupCore
    from kvprobe.statemachine.types import HasReqId

__all__ = [
    "CHAIN_MODES",
    "EXACT",
    "INFERRED",
    "REFUTED_MEMORY",
    "chain_mode_name",
    "forgive",
    "next_position",
    "refute",
    "searches",
    "walk_inferred",
]

#: Every key up to the first known miss is probed (window by window): the default.
EXACT: Final = "exact"
#: The stored prefix's end is searched for; the keys before it are inferred stored.
INFERRED: Final = "inferred"
#: The values ``chain_mode`` accepts.
CHAIN_MODES: Final = (EXACT, INFERRED)
#: How many refuted keys (forced by ``mark_miss`` in inferred mode) the core remembers.
REFUTED_MEMORY: Final = 4096


def chain_mode_name(value: object) -> str:
    """The chain mode a ``chain_mode`` argument asks for: :data:`EXACT` or :data:`INFERRED`.

    Raises:
        InvalidInputError: ``value`` is not a ``str``.
        InvalidValueError: a string other than ``"exact"`` or ``"inferred"``.
    """
    if not isinstance(value, str):
        raise InvalidInputError(f"chain_mode must be 'exact' or 'inferred', got {type(value).__name__}")
    if value not in CHAIN_MODES:
        raise InvalidValueError(f"chain_mode must be 'exact' or 'inferred', got {value!r}")
    return EXACT if value == EXACT else INFERRED


def next_position(lo: int, hi: int, length: int) -> int:
    """The position the search probes next, knowing key ``lo`` stored and key ``hi`` NOT stored.

    ``lo`` is -1 when no key is known stored; ``hi`` is ``length`` when no
    key is known NOT stored.  Galloping (``0, 1, 3, 7, ...``, the last key
    at most) until a miss is known, then the midpoint.  Only for an
    undecided search (``hi > lo + 1``); the position is always strictly
    between ``lo`` and ``hi``.
    """
    if hi == length:
        return 0 if lo < 0 else min(2 * lo + 1, length - 1)
    return (lo + hi) // 2


def searches(core: LookupCore, asked: list[bytes]) -> bool:
    """Whether ``lookup_chain`` of ``asked`` (checked keys, not empty) is the inferred walk.

    True in inferred mode unless a key of the chain was refuted (:func:`refute`).
    """
    if core.chain_mode != INFERRED:
        return False
    refuted = core.refuted_keys
    return not refuted or refuted.keys().isdisjoint(asked)


def walk_inferred(core: LookupCore, asked: list[Any], req_context: HasReqId) -> ChainAnswer:
    """The inferred walk of ``asked`` (checked ``bytes`` keys, results applied) by one request.

    Replays the search from position 0: each position is looked up with
    ``core.lookup`` (for a position the request already holds, a read that
    changes nothing), until a verdict is unknown (the answer is pending:
    ask again next step) or the boundary is found.

    Raises:
        ManagerClosedError: after the core's shutdown.
    """
    length = len(asked)
    lo, hi = -1, length
    verified = looked = 0
    pending = False
    while hi > lo + 1:
        position = next_position(lo, hi, length)
        verdict = core.lookup(asked[position], req_context)
        looked += 1
        if verdict is None:
            pending = True
            break
        if verdict:
            lo = position
            verified += 1
        else:
            hi = position
    hits = lo + 1
    return ChainAnswer(hits, hi < length, pending, looked, hits - verified)


def forgive(core: LookupCore, keys: Sequence[bytes], answer: ChainAnswer) -> None:
    """Forget the refuted keys among ``keys``' hits when ``answer`` inferred none of them.

    Every hit of such an answer was answered stored by the backend for its
    current generation: the hole the refutation recorded is filled.
    """
    if answer.inferred or not answer.leading_hits:
        return
    refuted = core.refuted_keys
    for key in keys[: answer.leading_hits]:
        refuted.pop(key, None)


def refute(core: LookupCore, keys: list[bytes]) -> None:
    """Remember ``keys`` (loads that failed: ``mark_miss``) so that chains holding them are walked exactly.

    Keeps the latest :data:`REFUTED_MEMORY` keys (oldest forgotten first).
    """
    refuted = core.refuted_keys
    for key in keys:
        refuted.pop(key, None)
        refuted[key] = None
    while len(refuted) > REFUTED_MEMORY:
        del refuted[next(iter(refuted))]
