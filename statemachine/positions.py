"""Windows from key positions: which of a request's keys a per-key lookup may probe.

vLLM 0.33's scheduler asks a tier for a request's keys one at a time, in
chain order, and keeps asking while any answer is "not known yet"; before
that it records where each key sits in the request (the end token of its
block, ``ReqContext.set_offload_key_position``).  With the position, a
per-key ``lookup`` can follow the window walk of ``lookup_chain``
(:mod:`kvprobe.statemachine.windows`) instead of probing every key the
scan reaches.

A request's positioned keys form one chain per *lane*: keys ending in the
same four bytes (vLLM's ``make_offload_key`` packs the KV-cache group
index there; each group is its own chain).  A :class:`PositionBook` keeps,
for one request, the keys it has asked for with a position, in position
order; a key's *rank* is its index there.  :func:`decide` says what the
lookup of a key not yet held by the request does, from the verdicts the
request holds for the keys before it:

* :data:`PAST_MISS`: a key before it is known NOT stored: the request's
  stored prefix ends there.  No probe; the key answers not stored.
* :data:`PROBE`: exact mode, every key before the window is known stored
  and the key lies within the window of the first key whose verdict is
  unknown (``window_end(first, first_unknown, growth)``); or every key
  before it is known stored.  Inferred mode: the key is the position the
  search (:func:`kvprobe.statemachine.inferred.next_position`) probes next.
* :data:`DEFER`: further on than that.  No probe, no state; the key answers
  "not known yet" and the scheduler asks again next step, when the keys
  before it may have resolved.  (A known miss between the window's end and
  the key is not looked for: the key is not probed either way.)
* :data:`INFERRED_HIT` (inferred mode only): the search knows a key at or
  after it stored, so in a prefix-closed store it is stored too.  No probe.

The rule reads verdicts only and changes nothing; the book is the caller's
(one per request, dropped when the request finishes).  Ranks are counted
among the keys asked so far: the scan asks in chain order, so when a key is
asked the keys before it have been asked too.  A scan that goes backwards
(vLLM's sliding-window lookup) finds no key before the one it asks, so
every key it reaches is probed, as without positions.
"""

from __future__ import annotations

import bisect
import enum
from collections.abc import Callable

from kvprobe.statemachine.inferred import next_position
from kvprobe.statemachine.types import Key
from kvprobe.statemachine.windows import ALL, window_end

__all__ = [
    "DEFER",
    "INFERRED_HIT",
    "PAST_MISS",
    "PROBE",
    "Decision",
    "PositionBook",
    "PositionRule",
    "decide",
    "lane_of",
]

#: The bytes at the end of a key that name its chain (vLLM: the group index).
LANE_BYTES = 4


class Decision(enum.Enum):
    """What the lookup of a positioned key does (see the module docstring)."""

    PROBE = "probe"
    DEFER = "defer"
    PAST_MISS = "past_miss"
    INFERRED_HIT = "inferred_hit"


PROBE = Decision.PROBE
DEFER = Decision.DEFER
PAST_MISS = Decision.PAST_MISS
INFERRED_HIT = Decision.INFERRED_HIT

#: A verdict reader: the request's verdict for a key (None: not known or not held).
Verdicts = Callable[[Key], "bool | None"]
#: The shape of :func:`decide`: (chain, rank, verdicts, first window, growth, search) -> decision.
PositionRule = Callable[[list[Key], int, Verdicts, int, float, bool], Decision]


def lane_of(key: Key) -> bytes:
    """The chain a key belongs to: its last four bytes (all keys of four bytes or fewer share one)."""
    return key[-LANE_BYTES:] if len(key) > LANE_BYTES else b""


class PositionBook:
    """One request's positioned keys, per lane, in position order.

    A key is placed once, at the position first given for it (vLLM records a
    key's position once per request).  Not thread-safe: the caller's lock.
    """

    __slots__ = ("_lanes", "_placed")

    def __init__(self) -> None:
        self._lanes: dict[bytes, tuple[list[int], list[Key]]] = {}
        self._placed: dict[Key, tuple[bytes, int]] = {}

    def place(self, key: Key, position: int) -> tuple[list[Key], int]:
        """Record ``key`` at ``position`` (once): its lane's keys in order, and its rank there."""
        placed = self._placed.get(key)
        if placed is None:
            lane = lane_of(key)
            positions, keys = self._lanes.setdefault(lane, ([], []))
            at = bisect.bisect_right(positions, position)
            positions.insert(at, position)
            keys.insert(at, key)
            self._placed[key] = (lane, position)
            return keys, at
        lane, position = placed
        positions, keys = self._lanes[lane]
        at = bisect.bisect_left(positions, position)
        while keys[at] != key:  # several keys at one position: find this one
            at += 1
        return keys, at

    def __len__(self) -> int:
        return len(self._placed)


def decide(chain: list[Key], rank: int, verdict: Verdicts, first: int, growth: float, search: bool) -> Decision:
    """What the lookup of ``chain[rank]``, not held by the request, does.

    ``verdict`` reads the request's verdicts; ``first`` and ``growth`` are
    the window schedule (``first`` may be :data:`~kvprobe.statemachine.windows.ALL`);
    ``search`` selects the inferred rule (the chain holds no refuted key).
    """
    if search:
        return _decide_inferred(chain, rank, verdict)
    # Reads the keys before it up to the end of the first unknown key's
    # window at most: a key past that end is deferred whatever lies between
    # (a miss there would also mean no probe), so a deferred key costs the
    # stored prefix plus one window, not its whole rank.
    window_ends = -1  # the end of the first unknown key's window, once met
    for before in range(rank):
        if 0 <= window_ends <= before:
            return DEFER
        known = verdict(chain[before])
        if known is False:
            return PAST_MISS
        if known is None and window_ends < 0 and first != ALL:
            window_ends = window_end(first, before, growth)
    return DEFER if 0 <= window_ends <= rank else PROBE


def _decide_inferred(chain: list[Key], rank: int, verdict: Verdicts) -> Decision:
    length = len(chain)
    lo, hi = -1, length
    while hi > lo + 1:
        position = next_position(lo, hi, length)
        known = verdict(chain[position])
        if known is None:
            return PROBE if rank == position else _beside_search(rank, lo, hi)
        if known:
            lo = position
        else:
            hi = position
    return _beside_search(rank, lo, hi)


def _beside_search(rank: int, lo: int, hi: int) -> Decision:
    if rank <= lo:
        return INFERRED_HIT
    if rank >= hi:
        return PAST_MISS
    return DEFER
