"""The walks :mod:`bench.chains.run` compares, and the tier they walk.

A serving engine's scheduler asks, each step and for each waiting request,
"how many leading blocks of this prompt are in the tier?".  The walks that
answer it, each returning the same :data:`Answer`:

* :func:`walk_chain`: ``lookup_chain(keys, ctx)``, one call per request;
* :func:`walk_stop`: ``lookup`` in the loop an engine would write, which
  stops after the first False (:func:`chain_walk`, the walk ``lookup_chain``
  does); over :class:`bench.baseline.BaselineManager` it is the unverified
  design's honest chain (that design has no chain call);
* :func:`walk_every`: ``lookup`` of every key, the answer computed
  afterwards (what an engine written against single lookups does).

Every part of the benchmark (:mod:`bench.chains.cost`,
:mod:`bench.chains.saving`, :mod:`bench.chains.windows`) walks with these, so
they are stated once, here.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from bench.common import Impl, baseline_impl, manual_impl, verified_impl
from kvprobe.statemachine import AsyncLookupManager, ReqContext
from kvprobe.statemachine.windows import DEFAULT_CHAIN_WINDOW

__all__ = [
    "CONTENDERS",
    "ENGINES",
    "Answer",
    "SetTier",
    "Walk",
    "chain_walk",
    "walk_chain",
    "walk_every",
    "walk_stop",
    "whole_chain_impl",
]

Answer = tuple[int, bool, bool, int]  # leading hits, stopped at a miss, some verdict pending, keys looked up
Walk = Callable[[Any, Sequence[bytes], ReqContext], Answer]


class SetTier:
    """An in-memory tier holding an explicit set of keys (no call log)."""

    def __init__(self, stored: set[bytes]) -> None:
        self.stored = stored

    def batch_lookup(self, keys: Sequence[bytes], req_context: object) -> list[bool]:
        stored = self.stored
        return [k in stored for k in keys]


def chain_walk(lookup: Callable[[bytes, Any], bool | None], keys: Sequence[bytes], ctx: Any) -> Answer:
    """What an engine writes without ``lookup_chain``: (leading hits, stopped, pending, looked up)."""
    hits = 0
    pending = False
    looked = 0
    for key in keys:
        looked += 1
        verdict = lookup(key, ctx)
        if verdict is None:
            pending = True
        elif verdict:
            if not pending:
                hits += 1
        else:
            return hits, True, pending, looked
    return hits, False, pending, looked


def walk_chain(m: Any, keys: Sequence[bytes], ctx: ReqContext) -> Answer:
    a = m.lookup_chain(keys, ctx)
    return a.leading_hits, a.stopped_at_miss, a.pending, a.looked_up


def walk_stop(m: Any, keys: Sequence[bytes], ctx: ReqContext) -> Answer:
    return chain_walk(m.lookup, keys, ctx)


def walk_every(m: Any, keys: Sequence[bytes], ctx: ReqContext) -> Answer:
    """``lookup`` of every key first, the answer computed afterwards."""
    verdicts = [m.lookup(key, ctx) for key in keys]
    hits = 0
    for verdict in verdicts:
        if verdict is None:
            return hits, False, True, len(keys)
        if not verdict:
            return hits, True, False, len(keys)
        hits += 1
    return hits, False, False, len(keys)


def whole_chain_impl(tier: SetTier) -> Impl:
    """kvprobe's manager walking every key up to the first known miss (``chain_window="all"``)."""
    return manual_impl(AsyncLookupManager(tier, worker="manual", chain_window="all"))


#: The cost part's walks: (the manager it runs on, the walk).
CONTENDERS: dict[str, tuple[Callable[[SetTier], Impl], Walk]] = {
    "chain": (whole_chain_impl, walk_chain),
    "per-key": (verified_impl, walk_stop),
    "baseline": (baseline_impl, walk_stop),
}
#: The saving part's engines, each on a kvprobe manager.
ENGINES: dict[str, Walk] = {
    "lookup_chain": walk_chain,
    f"lookup_chain, windows of {DEFAULT_CHAIN_WINDOW}, 2x": walk_chain,
    "per-key, stop at miss": walk_stop,
    "per-key, every key": walk_every,
}
