"""The pure, scheduler-owned core of the lookup manager.

No I/O, no threads, no backends: :class:`LookupCore` is a data structure whose
public methods are the TLA+ model's scheduler actions (``tla/KVProbe.tla``)::

    lookup      Lookup      flush       Flush
    drain       Drain       cleanup     Cleanup
    mark_miss   MarkMiss    shutdown    Shutdown
    lookup_chain       Lookup of each key in order, up to the first MISS, window by window
    fail_outstanding   Drain of a WORKER_DIED failure for every open group

The worker actions (take a batch, complete a group, fail a group, time out)
belong to drivers (:mod:`kvprobe.statemachine.workers`); the only thing they
touch is :attr:`LookupCore.inbox`, a ``deque`` they append outcomes to
(``deque.append`` is atomic, so no lock is needed).  Everything else is owned
by the one thread that calls the methods.

The parts, one module each: the lifecycle rows the hot path reads and the
facts about them it relies on (:mod:`~kvprobe.statemachine.rules`, checked
at import), the checks of what callers pass
(:mod:`~kvprobe.statemachine.inputs`), the chain walk
(:mod:`~kvprobe.statemachine.chain`) and the snapshot invariants
(:mod:`~kvprobe.statemachine.invariants`).  A new probe state is made in one
place, :meth:`LookupCore._new_probe`, whether a single lookup or a chain
asked for it.

The class is built in three layers, one module each, so that each reads in
one sitting: the tables, the data layout they keep and the actions on all of
them at once (Shutdown, the observations:
:mod:`~kvprobe.statemachine.probe_table`), the worker handoff (Flush and
Drain: :mod:`~kvprobe.statemachine.handoff`), and here the actions a caller
takes per key or per request (Lookup, Cleanup, MarkMiss), with the hooks of
the inferred walk (:mod:`~kvprobe.statemachine.inferred`) and the verdict
cache (:mod:`~kvprobe.statemachine.verdict_cache`) they call.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from kvprobe.spec.lifecycle import ABSENT
from kvprobe.statemachine.chain import walk_chain
from kvprobe.statemachine.handoff import WorkerHandoff, as_applied
from kvprobe.statemachine.inferred import INFERRED, forgive, refute
from kvprobe.statemachine.inputs import bad_lookup, key_list
from kvprobe.statemachine.probe_table import mypyc_attr
from kvprobe.statemachine.records import ProbeState, WaitingRequest
from kvprobe.statemachine.rules import CLEANUP_LAST, COMPILED, IN_FLIGHT, MARK_MISS_NEXT, PENDING, RECALLED
from kvprobe.statemachine.types import ChainAnswer, HasReqId, InvalidInputError, InvariantViolation, KvprobeError

__all__ = ["COMPILED", "InvariantViolation", "LookupCore", "ProbeState", "WaitingRequest", "as_applied"]


# Interpreted subclasses: the tracing core, the test suite's mutant cores.
@mypyc_attr(allow_interpreted_subclasses=True)
class LookupCore(WorkerHandoff):
    """Scheduler-owned probe table, reverse index, generations and step batch.

    All methods must be called from one thread.  None of them performs I/O or
    blocks.  Errors: methods raise :class:`InvalidInputError` for bad
    arguments, before changing anything.  The tables and Shutdown are
    :class:`~kvprobe.statemachine.probe_table.ProbeTable`'s, Flush and Drain
    :class:`~kvprobe.statemachine.handoff.WorkerHandoff`'s.
    """

    # --- Lookup ------------------------------------------------------------

    # Arguments that come from the caller are annotated ``Any``/``object``, not
    # ``Key``/``str``: a compiled build (mypyc) checks annotated types itself
    # and would raise a plain TypeError before the InvalidInputError these
    # methods promise.  AsyncLookupManager's signatures carry the real types.

    def lookup(self, key: Any, req_context: HasReqId) -> bool | None:
        """Lookup action: the verdict if known, else None (ask again later).

        Applies any published results first, so a verdict is visible to the
        first lookup after the backend returned.

        Raises:
            InvalidInputError: ``key`` is not exactly ``bytes`` (a subclass, a
                memoryview or a bytearray is refused even when an equal key is
                held), or ``req_context`` has no ``req_id`` that is exactly a
                ``str`` (or reading it raises).  Nothing changed.  One
                exception, for speed: a request that already waits on the key
                asking again with an equal look-alike key or id gets the
                verdict, as it would with the exact ones (nothing changes).
            ManagerClosedError: after :meth:`shutdown` (also through a bound
                method taken before it).
        """
        if self.inbox:
            self.drain()
        try:
            state = self.states.get(key)
            req_id = req_context.req_id
            # The same request asking again changes nothing.  Its key and id
            # were type-checked when it first asked; an equal look-alike (a
            # memoryview, a str subclass) from a request already waiting gets
            # the same answer and changes nothing.  Testing the exact types
            # here too would cost about a fifth of this path (measured), so
            # look-alikes are refused on every path that changes something.
            if state is not None and req_id in state.waiters:
                return state.verdict
            # Inside the try: an unhashable req_id fails here, and must be
            # reported as bad input like any other bad req_id.
            request = self.requests.get(req_id)
        except KvprobeError:
            raise  # the closed tables of a shutdown racing this call
        except Exception as exc:
            # Whatever a bad key's hash or a req_id property raised: with an
            # exact bytes key and str id nothing here can raise.  Free when
            # nothing raises (CPython 3.11 and mypyc alike).
            raise bad_lookup(key, req_context) from exc
        # This path runs for every new (key, request) pair.  A join is written
        # inline (a method call would be a tenth of its cost); a new probe
        # pays that one call, to be made in the one place the chain walk uses.
        if type(key) is not bytes or type(req_id) is not str:
            raise bad_lookup(key, req_context)
        if request is None:
            request = self.requests[req_id] = WaitingRequest(req_id, req_context)
        if state is None:
            return self._new_probe(key, request)
        # Another request joins the probe (its phase does not change); the
        # early return above ruled out a request already waiting on it.
        state.waiters.add(req_id)
        phase = state.phase
        if phase is PENDING:
            self._stats.joins += 1
        elif phase is IN_FLIGHT:
            self._stats.in_flight_reuses += 1
        request.states.append(state)
        return state.verdict

    def _new_probe(self, key: bytes, request: WaitingRequest) -> bool | None:
        """The Lookup of a key without a state: a new generation for ``request``; its verdict.

        The one place a :class:`ProbeState` is made and its fields are set
        (:meth:`lookup` and the chain walk both come here): it joins the
        table and the request's list of states.  It is PENDING and joins this
        step's batch (the verdict is None), unless the verdict cache
        remembers a fresh backend answer for the key: then it is RESOLVED at
        once with that verdict and never probed (``lifecycle.RECALL_RULE``).
        """
        generation = self._last_generation = self._last_generation + 1
        state = ProbeState()
        state.generation = generation
        state.waiters = {request.req_id}
        state.key = key
        state.owner = request
        memory = self.memory
        verdict = None if memory is None else memory.recall(key)
        state.verdict = verdict
        self.states[key] = state
        if verdict is None:
            state.phase = PENDING
            self.step_batch.append(state)
        else:
            state.phase = RECALLED
        request.states.append(state)
        return verdict

    def lookup_chain(self, keys: Sequence[Any], req_context: HasReqId) -> ChainAnswer:
        """The Lookup action of each key in order, stopping at the first known MISS or the window's end.

        Exactly the sequence ``lookup(keys[0], req_context)``,
        ``lookup(keys[1], req_context)``, ... up to and including the first
        key whose verdict is False, and no further than the end of the
        window (:mod:`kvprobe.statemachine.windows`, first window
        :attr:`chain_window`, growth :attr:`chain_window_growth`) of the first key whose verdict is unknown:
        a window's keys are submitted only once every key before the window
        is known stored.  Keys not looked up get no state, no probe, no
        backend work.  Published results are applied once, before the first
        key (a result published while the walk runs is applied by the next
        call, as if it had arrived after the walk).

        In inferred mode (:attr:`chain_mode`) a chain holding no refuted key
        is searched instead: its keys are looked up one at a time at the
        positions a gallop-then-bisect search picks, and the keys before the
        boundary found are answered stored by inference
        (:mod:`kvprobe.statemachine.inferred`).

        Raises:
            InvalidInputError: ``keys`` is not a sequence of keys (a single
                ``bytes``/``str`` is refused) or reading it raises, some
                element is not exactly ``bytes`` (its hash may even raise),
                or ``req_context`` has no ``req_id`` that is exactly a
                ``str`` (or reading it raises).  Nothing changed: a walk that would change
                something checks every key first, the ones after its stop
                included; a walk that only reads checks the keys it reads
                (as the single lookups would: none after the stop).
            ManagerClosedError: after :meth:`shutdown`.
        """
        answer = walk_chain(self, keys, req_context)
        if self.refuted_keys:
            forgive(self, keys, answer)  # hits the backend answered fill the holes recorded
        return answer

    # --- Cleanup -------------------------------------------------------------

    def cleanup(self, req_id: Any) -> None:
        """Cleanup action: the request finished; release its interest in every key.

        A request id the manager does not know is counted and ignored.

        Raises:
            InvalidInputError: ``req_id`` is not a string.  Nothing changed.
        """
        if type(req_id) is not str:
            raise InvalidInputError(f"cleanup() takes a request id string, got {type(req_id).__name__}")
        request = self.requests.pop(req_id, None)
        if request is None:
            self._stats.unknown_cleanups += 1
            return
        request.waiting = False
        last_waiter_left = CLEANUP_LAST
        never_probed = 0
        for state in request.states:
            waiters = state.waiters
            waiters.discard(req_id)
            if waiters:
                continue  # others still wait: no phase changes (asserted at import)
            source = state.phase
            dest = last_waiter_left[source._value_]  # type: ignore[union-attr]  # listed states are live
            if dest is ABSENT:
                self._drop(state)
                if source is PENDING:
                    never_probed += 1
            else:
                state.phase = dest
        self._stats.never_probed += never_probed

    # --- MarkMiss ------------------------------------------------------------

    def mark_miss(self, keys: Iterable[Any]) -> None:
        """MarkMiss action: force MISS for keys whose load from the tier failed.

        Keys without a state are counted and ignored (the next lookup probes
        them afresh).  The verdict cache, if any, forgets every key given
        (a remembered "stored" whose load failed is served no more).  A later result of the probe that was in flight is
        dropped, so the MISS sticks until the state is reclaimed.

        Raises:
            InvalidInputError: ``keys`` is a single key (``bytes``/``str``)
                rather than an iterable of keys, or holds a non-``bytes``
                element.  Nothing changed.
        """
        keys = key_list(keys, "mark_miss")
        if self.chain_mode == INFERRED:
            refute(self, keys)  # chains holding these keys are walked exactly from now on
        states = self.states
        stats = self._stats
        memory = self.memory
        for key in keys:
            if memory is not None:
                memory.forget(key)
            state = states.get(key)
            if state is None:
                stats.unknown_mark_miss += 1
                continue
            source = state.phase
            dest = MARK_MISS_NEXT[not state.waiters][source._value_]  # type: ignore[union-attr]  # in the table
            stats.forced_misses += 1
            if dest is ABSENT:
                self._drop(state)
                stats.orphans_reclaimed += 1
            else:
                state.phase = dest
                state.verdict = False
