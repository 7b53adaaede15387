"""The chain walk: the Lookup action of a request's keys in order, up to the first known MISS.

:meth:`LookupCore.lookup_chain <kvprobe.statemachine.core.LookupCore.lookup_chain>`
is :func:`walk_chain`.  It is exactly the sequence of single lookups of its
keys, in order, up to and including the first known MISS, and no further
than the window of the first key whose verdict is unknown
(:mod:`kvprobe.statemachine.windows`); it changes nothing those lookups
would not.  It is faster than they are because a request that asks again
mostly re-reads what it already holds.

How it is built (for both builds, see :data:`kvprobe.statemachine.rules.COMPILED`):

* A walk that repeats an earlier one first reads the request's own list of
  states (:func:`_walk_held`), in the order it first asked for them: no table
  lookup and no waiter-set test (a request waits on every state it lists,
  and a listed state is the table's state of its key: ReverseIndexConsistent).
  The objects are read in the order they were made, which memory favours.
  The first key that is not the listed state's own key (by identity, else
  equal and exactly ``bytes``) hands over to the general walk
  (:func:`_walk_table`).
* Both walks index their sequences with a counter: a compiled build turns that
  into a C loop, while ``enumerate(zip(...))`` stays generic Python iteration
  (tuples built and unpacked per key).
* New keys go through the core's one state-creation path
  (``LookupCore._new_probe``), as a single lookup's do.  The counters of
  joins are added once at the end.
* The window costs one integer comparison per key: ``limit`` is the end of
  the keys the walk may look up, the chain's length until the first unknown
  key is met, then the end of that key's window.

In inferred mode (``chain_mode="inferred"``) a chain none of whose keys was
refuted is searched instead (:mod:`kvprobe.statemachine.inferred`).

The start rule (``core.start_backlog``, off by default): while groups
submitted at earlier steps are still unanswered, a request that holds no
probe yet does not start its walk unless :func:`starts_walk` allows it; the
call then looks nothing up and answers pending.  A store that cannot keep
up then serves the walks already under way first, rather than sharing its
rate among ever more walks until none is decided by its deadline.  A held
call is no Lookup at all (the scheduler may always not ask), so it changes
nothing the model checks; every submitted group ends by the lookup timeout,
so a held walk starts once the backlog falls.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from kvprobe.statemachine.inferred import INFERRED, searches, walk_inferred
from kvprobe.statemachine.inputs import chain_keys, chain_req_id, check_chain_keys
from kvprobe.statemachine.records import ProbeState, WaitingRequest
from kvprobe.statemachine.rules import IN_FLIGHT, PENDING
from kvprobe.statemachine.types import ChainAnswer, HasReqId, InvalidInputError, KvprobeError
from kvprobe.statemachine.windows import ALL, window_end

if TYPE_CHECKING:
    from kvprobe.statemachine.core import LookupCore

__all__ = ["starts_walk", "walk_chain"]


def starts_walk(outstanding: int, started_this_step: int, start_backlog: int) -> bool:
    """Whether a request that holds no probe yet may start its walk now.

    ``outstanding``: groups submitted at earlier steps and not answered yet;
    ``started_this_step``: walks this rule already let start since the last
    flush.  With nothing outstanding the store keeps up and every walk
    starts; otherwise only while the groups outstanding and the walks just
    started stay below ``start_backlog``.
    """
    return outstanding == 0 or outstanding + started_this_step < start_backlog


def walk_chain(core: LookupCore, keys: Sequence[Any], req_context: HasReqId) -> ChainAnswer:
    """``core.lookup(key, req_context)`` for each key in order, up to and including the first MISS,
    and no further than the window of the first key whose verdict is unknown.

    Published results are applied once, before the first key.  See
    :meth:`LookupCore.lookup_chain <kvprobe.statemachine.core.LookupCore.lookup_chain>`
    for the contract.

    Raises:
        InvalidInputError: bad ``keys`` or ``req_context``; nothing changed.
        ManagerClosedError: after the core's shutdown.
    """
    ready = bool(core.inbox)  # raises ManagerClosedError after shutdown
    req_id = chain_req_id(req_context)
    # A list, whatever the caller passed (a tuple is copied, in C): the
    # walks index it, which a compiled build does in C only on a list.
    asked = keys if type(keys) is list else chain_keys(keys)
    # Keys are type-checked one by one while the walk only reads (the
    # request already waits on each of them: nothing changes); at the first
    # key that would change something, all the remaining keys are checked at
    # once, in C, so an invalid key anywhere leaves the table untouched.
    verified = False
    if ready and asked:  # an empty chain is no Lookup at all: nothing is applied
        check_chain_keys(asked, 0)  # applying results is a change: every key is checked first
        verified = True
        core.drain()
    backlog = core.start_backlog
    if backlog is not None and asked and req_id not in core.requests:
        if not starts_walk(len(core.outstanding), core.walks_started, backlog):
            if not verified:
                check_chain_keys(asked, 0)  # a bad key is named now, not when the walk starts
            core.walks_held += 1
            return ChainAnswer(0, False, True, 0)
        core.walks_started += 1
    if core.chain_mode == INFERRED and asked:
        if not verified:
            check_chain_keys(asked, 0)
        # A chain holding a key whose load failed (refuted: the store is
        # not prefix-closed there) is walked exactly, below.
        if searches(core, asked):
            return walk_inferred(core, asked, req_context)
    first_window = core.chain_window
    growth = core.chain_window_growth
    start = 0
    first_unknown = stopped_at = -1
    registered = core.requests.get(req_id)
    if registered is not None:
        start, first_unknown, stopped_at = _walk_held(registered.states, asked, first_window, growth)
    limit = len(asked)
    if first_unknown >= 0 and first_window != ALL:
        limit = min(limit, window_end(first_window, first_unknown, growth))
    if stopped_at < 0 and start < limit:
        try:
            first_unknown, stopped_at, limit = _walk_table(
                core, asked, start, limit, first_unknown, verified, req_id, req_context
            )
        except KvprobeError:
            raise
        except Exception:
            # A key's own hash or comparison raised while the walk only read
            # (every key is checked before the first change): name the first
            # key that is not bytes.  All bytes: not the caller's fault.
            check_chain_keys(asked, 0)
            raise
    if stopped_at >= 0:
        # The stopping key was looked up too.
        hits = stopped_at if first_unknown < 0 else first_unknown
        return ChainAnswer(hits, True, first_unknown >= 0, stopped_at + 1)
    # Not stopped: every key up to the limit was looked up, no further.
    return ChainAnswer(limit if first_unknown < 0 else first_unknown, False, first_unknown >= 0, limit)


def _walk_held(
    held_states: list[ProbeState], asked: list[Any], first_window: int, growth: float
) -> tuple[int, int, int]:
    """Read the keys the request already holds, in order: ``(end, first_unknown, stopped_at)``.

    ``end`` is where the general walk takes over (the first key that is not
    the listed state's, the end of the shorter list, or the end of the first
    unknown key's window); ``first_unknown`` the first key without a verdict
    (-1: none); ``stopped_at`` the index of a MISS (-1: none).  Changes
    nothing.
    """
    first_unknown = -1
    shorter = limit = min(len(held_states), len(asked))
    for end in range(shorter):
        if end >= limit:
            return end, first_unknown, -1
        held = held_states[end]
        key = asked[end]
        if held.key is not key and (type(key) is not bytes or held.key != key):
            return end, first_unknown, -1
        verdict = held.verdict
        if verdict is None:
            if first_unknown < 0:
                first_unknown = end
                if first_window != ALL:
                    limit = window_end(first_window, end, growth)
        elif not verdict:
            return end, first_unknown, end
    return shorter, first_unknown, -1


def _walk_table(
    core: LookupCore,
    asked: list[Any],
    start: int,
    limit: int,
    first_unknown: int,
    verified: bool,
    req_id: str,
    req_context: HasReqId,
) -> tuple[int, int, int]:
    """Look up ``asked[start:limit]`` in the table, one Lookup each: ``(first_unknown, stopped_at, limit)``.

    The returned ``limit`` is where the walk ended if it met no MISS: the
    given one, or the end of the window of the first unknown key met here.

    Raises:
        InvalidInputError: a key is not exactly ``bytes`` (checked before the
            first change, for every remaining key, unless ``verified``).
    """
    request: WaitingRequest | None = None
    stopped_at = -1
    joins = reuses = 0
    pending = PENDING
    first_window = core.chain_window
    growth = core.chain_window_growth
    # Tables and lists are called through their methods, not bound methods
    # held in locals: Python 3.11 specialises ``list.append`` and
    # ``dict.get`` calls, and a compiled build calls them in C directly.
    states = core.states
    for looked in range(start, len(asked)):
        if looked >= limit:
            break  # past the window: not looked up
        key = asked[looked]
        state = states.get(key)
        if state is not None and req_id in state.waiters:
            if not verified and type(key) is not bytes:
                raise InvalidInputError(f"lookup_chain() keys must be bytes, got {type(key).__name__}")
            verdict = state.verdict
        else:
            if request is None:
                if not verified:
                    check_chain_keys(asked, looked)
                    verified = True
                request = core.requests.get(req_id)
                if request is None:
                    request = core.requests[req_id] = WaitingRequest(req_id, req_context)
                registered_states = request.states
            if state is None:
                # A new state; RESOLVED at once when the verdict cache remembers the key.
                verdict = core._new_probe(key, request)
            else:
                # Another request joins the probe (its phase does not change).
                state.waiters.add(req_id)
                phase = state.phase
                if phase is pending:
                    joins += 1
                elif phase is IN_FLIGHT:
                    reuses += 1
                registered_states.append(state)
                verdict = state.verdict
        if verdict is None:
            if first_unknown < 0:
                first_unknown = looked
                if first_window != ALL:
                    limit = min(limit, window_end(first_window, looked, growth))
        elif not verdict:
            stopped_at = looked
            break
    if joins or reuses:
        stats = core._stats
        stats.joins += joins
        stats.in_flight_reuses += reuses
    return first_unknown, stopped_at, limit
