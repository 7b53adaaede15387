"""The drop-in base class: vLLM 0.33's ``AsyncLookupManager`` contract, on kvprobe's core.

Two classes are called ``AsyncLookupManager``.  kvprobe's own, native one
(``kvprobe.AsyncLookupManager``, defined in ``kvprobe.statemachine``) takes
a backend object and is what an engine other than vLLM uses.  This one,
``kvprobe.integrations.vllm.AsyncLookupManager``, keeps vLLM's class name and
shape so that a vLLM tier switches with one import (or the one assignment
``async_lookup.AsyncLookupManager = kvprobe.integrations.vllm.AsyncLookupManager``
before the tiers are imported); it runs a native manager underneath
(:attr:`AsyncLookupManager.manager`).  Its ``repr`` says which it is.

vLLM's base class (``vllm/v1/kv_offload/tiering/async_lookup.py``) keeps the
probe table itself and runs one background thread; a tier subclasses it and
implements ``batch_lookup``.  This class has the same constructor argument
(``tier_type``), the same abstract ``batch_lookup(keys, req_context)`` and
the same methods, and delegates them to a
:class:`kvprobe.statemachine.AsyncLookupManager` whose backend is the
subclass's own ``batch_lookup``.  It follows vLLM 0.33's contract where
kvprobe's own manager is stricter: calls serialized by the caller's lock may
come from more than one thread, ``mark_miss`` leaves an unresolved probe
alone, one ``batch_lookup`` runs at a time, and lookups still answer after
``shutdown``.  ``docs/vllm.md`` lists every remaining difference.
"""

from __future__ import annotations

import abc
import logging
import time
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Any, ClassVar, Literal

from kvprobe.integrations.vllm.after_shutdown import AfterShutdownTable
from kvprobe.integrations.vllm.compat import LookupPhase, LookupState, PublishedResults, state_snapshot
from kvprobe.statemachine.core import LookupCore
from kvprobe.statemachine.inferred import searches
from kvprobe.statemachine.inputs import key_list
from kvprobe.statemachine.manager import AsyncLookupManager as KvprobeManager, WorkerChoice
from kvprobe.statemachine.positions import DEFER, INFERRED_HIT, PAST_MISS, PositionBook, PositionRule, decide
from kvprobe.statemachine.trace import TraceSink
from kvprobe.statemachine.types import ChainAnswer, HasReqId, InvalidInputError, Key, ManagerClosedError, Stats
from kvprobe.statemachine.verdict_cache import VerdictCache
from kvprobe.statemachine.workers import DEFAULT_HOLD_S, ThreadedWorker

__all__ = ["VLLM_SCHEDULES", "AsyncLookupManager", "LookupPhase", "LookupState"]

logger = logging.getLogger(__name__)

#: The schedule of vLLM 0.33's own lookup classes, which carry none, after the one-line switch.
#: Its object store's is kvprobe's object backend's (``NixlObjBackend.chain_schedule``; a test
#: keeps the two equal): under vLLM's per-key scan a prompt with nothing stored then costs 4
#: HEADs, not 16.  Its fs tier keeps the default (a stat is cheap; fewer rounds matter more).
VLLM_SCHEDULES: dict[tuple[str, str], tuple[int, float]] = {
    ("vllm.v1.kv_offload.tiering.obj.manager", "ObjAsyncLookupManager"): (4, 1.25),
}

#: How often ``shutdown`` looks whether the worker answered the groups it holds.
_SHUTDOWN_POLL_S = 0.001


class _SubclassBackend:
    """The kvprobe backend a drop-in manager runs: its own ``batch_lookup``.

    A result with a ``tolist`` method (a NumPy array of bools, which vLLM's
    base accepts through truthiness) is converted to a list of Python bools
    in C; anything else goes to kvprobe's checks unchanged (so a lazily
    raising iterable is still caught while it is consumed).
    """

    __slots__ = ("_tier",)

    def __init__(self, tier: AsyncLookupManager) -> None:
        self._tier = tier

    @property
    def chain_schedule(self) -> object:
        """The tier's preferred ``(first window, growth)``: its class's ``chain_schedule``, else its vLLM class's."""
        tier_class = type(self._tier)
        own = getattr(tier_class, "chain_schedule", None)
        if own is not None:
            return own
        return next(
            (
                VLLM_SCHEDULES[c.__module__, c.__qualname__]
                for c in tier_class.__mro__
                if (c.__module__, c.__qualname__) in VLLM_SCHEDULES
            ),
            None,
        )

    def batch_lookup(self, keys: Sequence[Key], req_context: object) -> Iterable[bool]:
        result = self._tier.batch_lookup(list(keys), req_context)
        if type(result) is not list:
            tolist = getattr(result, "tolist", None)
            if callable(tolist):
                converted: Iterable[bool] = tolist()
                return converted
        return result


class _LockSerializedManager(KvprobeManager):
    """kvprobe's manager under vLLM 0.33's threading rule.

    vLLM 0.33 serializes a tier's calls with the offloading manager's lock,
    and reaches a tier from the tiering manager's tier-poll thread as well as
    from the scheduler's: calls come one at a time, from more than one
    thread.  This manager drops kvprobe's owner-thread check (the
    ``WrongThreadError`` of a second thread) and keeps everything else.
    """

    def _guard(self) -> None:
        if self.closed:
            raise ManagerClosedError(f"lookup manager {self.name!r} was shut down")


class AsyncLookupManager(abc.ABC):
    """The vLLM drop-in: vLLM 0.33's base class contract, running on a native kvprobe manager.

    Not kvprobe's native ``AsyncLookupManager`` (``kvprobe.AsyncLookupManager``,
    which takes a backend object): this one keeps vLLM's name, constructor
    and abstract :meth:`batch_lookup` so that a vLLM tier switches by one
    import, and delegates to the native manager it owns (:attr:`manager`).

    Subclass it and implement :meth:`batch_lookup`, exactly as with vLLM's
    class; the owning tier delegates ``lookup`` to :meth:`lookup`,
    ``on_schedule_end`` to :meth:`flush` and ``on_request_finished`` to
    :meth:`cleanup`, and reports failed loads with :meth:`mark_miss`.  As in
    vLLM 0.33, the calls must come one at a time (vLLM's offloading manager
    lock serializes them) and may come from more than one thread (the
    scheduler's, the tiering manager's tier-poll thread).

    Args:
        tier_type: the tier's name (names the worker thread, the metrics
            label and error messages), as in vLLM.
        lookup_timeout_s: kvprobe extra.  A ``batch_lookup`` call slower than
            this resolves its keys as MISS; None (vLLM's behaviour) waits.
        max_stuck_calls: kvprobe extra (concurrency bound).  With a timeout,
            how many calls may run on past it, each on its own thread, before
            further groups fail at once as MISS.
        max_concurrent_groups: kvprobe extra.  How many request groups'
            ``batch_lookup`` calls the worker runs at once: 1 (vLLM 0.33's
            behaviour) calls them one after another; more lets one slow
            group hold back no other, with the tier's ``batch_lookup`` then
            called from several threads at once.
        busy_call_hold_s: kvprobe extra, with ``max_concurrent_groups`` above
            1.  The longest that running calls which keep a CPU busy (rather
            than wait) hold back a further group; 0 starts one whenever a
            slot is free.
        shutdown_timeout_s: kvprobe extra.  How long :meth:`shutdown` waits
            for the calls already submitted (vLLM waits for ever).
        worker: kvprobe extra: ``"thread"`` (default: a dispatcher thread
            and a caller thread per running call, where vLLM has one
            background thread), ``"manual"`` for tests, or a kvprobe ``Worker``.
        single_thread: kvprobe extra: kvprobe's stricter rule, every call
            from the one thread that first called (another thread gets
            ``WrongThreadError``).  Off by default: vLLM 0.33 calls from two.
        checked: kvprobe extra: check every invariant after each call (and,
            with ``single_thread``, the thread of ``lookup`` too; slow).
        trace: kvprobe extra: a trace sink (see ``kvprobe.statemachine.trace``).
        core_class: kvprobe extra: the core to run (e.g. the metered core of
            ``kvprobe.metrics``); None: kvprobe's ``LookupCore``.
        chain_mode: kvprobe extra, the native manager's option of that
            name: ``"exact"`` (default) or ``"inferred"``, for tiers written
            in chain order (:meth:`lookup_chain` then searches for the
            stored prefix's end; :mod:`kvprobe.statemachine.inferred`).
        chain_window: kvprobe extra, the native manager's option of that
            name: the first window of :meth:`lookup_chain` and of positioned
            lookups (keys), or ``"all"``.  Not given: the tier class's
            ``chain_schedule`` attribute (a ``(first window, growth)`` pair),
            if it has one; vLLM 0.33's obj lookup class, switched: 4
            (:data:`VLLM_SCHEDULES`); else 16.
        chain_window_growth: kvprobe extra, the native manager's option of
            that name: how much each window grows on the one before.  Not
            given: the tier class's ``chain_schedule``, or vLLM's obj class's
            (1.25), else 2 (each twice the one before).
        verdict_cache: kvprobe extra, the native manager's option of that
            name: None (default, as vLLM: every request probes afresh) or a
            :class:`~kvprobe.statemachine.verdict_cache.VerdictCache`
            (backend answers remembered across requests; docs/cache.md).

    Raises:
        InvalidInputError: ``tier_type`` is not a string, a number
            argument is not a number (``chain_window_growth`` a bool too),
            ``chain_mode`` is not a string, or
            ``verdict_cache`` is not a ``VerdictCache``.
        InvalidValueError: a timeout is not positive and finite,
            ``busy_call_hold_s`` is negative, a count is below 1,
            ``chain_window_growth`` is not above 1, above 16, NaN or
            infinite, or ``chain_mode`` is a string other than ``"exact"``
            or ``"inferred"``.
    """

    #: The rule for positioned keys (:func:`kvprobe.statemachine.positions.decide`), held
    #: in a tuple so that it is not bound as a method; the tests' mutants override it.
    position_rule: ClassVar[tuple[PositionRule]] = (decide,)

    def __init__(
        self,
        tier_type: str,
        *,
        lookup_timeout_s: float | None = None,
        max_stuck_calls: int = 4,
        max_concurrent_groups: int = 1,
        busy_call_hold_s: float = DEFAULT_HOLD_S,
        shutdown_timeout_s: float = 5.0,
        worker: WorkerChoice = "thread",
        single_thread: bool = False,
        checked: bool = False,
        trace: TraceSink | None = None,
        core_class: type[LookupCore] | None = None,
        chain_mode: Literal["exact", "inferred"] = "exact",
        chain_window: int | Literal["all"] | None = None,
        chain_window_growth: float | None = None,
        verdict_cache: VerdictCache | None = None,
    ) -> None:
        if not isinstance(tier_type, str):
            raise InvalidInputError(f"tier_type must be a string, got {type(tier_type).__name__}")
        self._tier_type = tier_type
        manager_class: type[KvprobeManager] = KvprobeManager if single_thread else _LockSerializedManager
        if core_class is not None:
            manager_class = type(f"{core_class.__name__}Manager", (manager_class,), {"core_class": core_class})
        self._manager = manager_class(
            _SubclassBackend(self),
            name=tier_type,
            lookup_timeout_s=lookup_timeout_s,
            worker=worker,
            max_stuck_calls=max_stuck_calls,
            max_concurrent_groups=max_concurrent_groups,
            busy_call_hold_s=busy_call_hold_s,
            checked=checked,
            trace=trace,
            shutdown_timeout_s=shutdown_timeout_s,
            chain_mode=chain_mode,
            chain_window=chain_window,
            chain_window_growth=chain_window_growth,
            verdict_cache=verdict_cache,
        )
        #: Each request's positioned keys (kvprobe.statemachine.positions), dropped at cleanup.
        self._books: dict[str, PositionBook] = {}
        self._shutdown_timeout_s = float(shutdown_timeout_s)
        self._after_shutdown: AfterShutdownTable | None = None
        #: Test compatibility (read-only view): ``empty()`` as on vLLM's queue of results.
        self._pending_results = PublishedResults(self._manager.core)
        self._native_lookup = self._manager.lookup
        self._bind_fast_lookup(self._positioned_lookup)

    def _bind_fast_lookup(self, lookup: Any) -> None:
        # The scheduler calls lookup() per block: bind the manager's own
        # lookup (the core's method when nothing is checked or traced) so
        # this class adds no call layer.  Not when a subclass overrides
        # lookup: the instance attribute would hide its override.
        if type(self).lookup is AsyncLookupManager.lookup:
            self.lookup = lookup  # type: ignore[method-assign]

    @abc.abstractmethod
    def batch_lookup(self, keys: list[Key], req_context: Any) -> Iterable[bool]:
        """Whether each of ``keys`` is stored in this tier: one bool per key, in order.

        Called on a worker thread (never the scheduler's); ``req_context`` is
        the context of the request the group belongs to.  It may raise, return
        too few or too many results, or be slow: kvprobe turns each of those
        into MISS for the group's keys (counted in :attr:`stats`) and keeps
        serving.
        """

    # --- vLLM's methods (names and meanings of vLLM 0.33) -----------------------------

    def lookup(self, key: Key, req_context: HasReqId) -> bool | None:
        """Non-blocking: True (stored), False (not stored), None (not known yet; retry next step).

        The first lookup of a key queues it for this step's batch; results
        the worker has published are applied first.  A key whose position
        the request recorded (``req_context.get_offload_key_position``, as
        vLLM 0.33's scheduler does) is probed only within the request's
        window: further on it answers None without a probe, and past a key
        of the same request known not stored it answers False without a
        probe (:mod:`kvprobe.statemachine.positions`).  After
        :meth:`shutdown` it answers the verdict known then, or None.

        Raises:
            InvalidInputError: ``key`` is not bytes or ``req_context.req_id``
                is not a string (nothing changed).
        """
        if self._after_shutdown is not None:
            return self._after_shutdown.lookup(key, req_context)
        return self._positioned_lookup(key, req_context)

    def _positioned_lookup(self, key: Key, req_context: HasReqId) -> bool | None:
        # The scheduler's hot path: a context without positions, and a key
        # the request already holds, go straight to the native lookup (the
        # core's own method when nothing is checked or traced).
        native = self._native_lookup
        position_of = getattr(req_context, "get_offload_key_position", None)
        if position_of is None or type(key) is not bytes:
            return native(key, req_context)  # no positions: as without them (bad input is refused there)
        manager = self._manager
        core = manager.core
        req_id = getattr(req_context, "req_id", None)
        if type(req_id) is not str:
            return native(key, req_context)  # refused there, with the error the contract names
        state = core.states.get(key)
        if state is not None and req_id in state.waiters:
            return native(key, req_context)  # held: its verdict (results applied first)
        position = position_of(key)
        if type(position) is not int:
            return native(key, req_context)  # no position for this key: probed as without one
        if core.inbox:
            manager.drain_results()
        book = self._books.get(req_id)
        if book is None:
            book = self._books[req_id] = PositionBook()
        chain, rank = book.place(key, position)
        states = core.states

        def verdict(k: Key) -> bool | None:
            held = states.get(k)
            return held.verdict if held is not None and req_id in held.waiters else None

        search = searches(core, chain)
        decision = self.position_rule[0](chain, rank, verdict, core.chain_window, core.chain_window_growth, search)
        if decision is DEFER:
            return None
        if decision is PAST_MISS:
            return False
        if decision is INFERRED_HIT:
            return True
        return native(key, req_context)

    def flush(self) -> None:
        """End of step: apply published results, then hand this step's new keys to the worker.

        Never blocks and never raises because of the backend.  After
        :meth:`shutdown` it does nothing.
        """
        if self._after_shutdown is None:
            self._manager.flush()

    def drain_results(self) -> None:
        """Apply the results the worker has published (``lookup`` and ``flush`` do it too).

        After :meth:`shutdown` it does nothing.
        """
        if self._after_shutdown is None:
            self._manager.drain_results()

    def mark_miss(self, keys: Collection[Key]) -> None:
        """A load of these keys from the tier failed: keys with a verdict answer False from now on.

        As in vLLM 0.33, keys with no state are skipped, and so are keys
        whose state is a probe still PENDING or IN_FLIGHT: that probe was
        started after the verdict the failed load relied on, and its own
        result will land.  A forced False sticks until the state is
        reclaimed.  The keys not skipped are forgotten by the
        ``verdict_cache``, if any (a skipped key, its probe unresolved, has
        nothing remembered), and in ``chain_mode="inferred"`` are
        remembered as refuted: a chain holding one is walked exactly.

        Raises:
            InvalidInputError: ``keys`` is a single key, cannot be read, or
                holds a non-bytes element (nothing changed).
        """
        listed = key_list(keys, "mark_miss")
        if self._after_shutdown is not None:
            self._after_shutdown.mark_miss(listed)
            return
        # Unknown keys go through: kvprobe counts them (stats.unknown_mark_miss).
        states = self._manager.core.states
        self._manager.mark_miss([k for k in listed if (s := states.get(k)) is None or s.phase is LookupPhase.RESOLVED])

    def cleanup(self, req_id: str) -> None:
        """The request finished: release its interest; in-flight probes are kept for others to join.

        Unknown request ids are ignored (counted in :attr:`stats`).

        Raises:
            InvalidInputError: ``req_id`` is not a string (nothing changed).
        """
        if self._after_shutdown is not None:
            self._after_shutdown.cleanup(req_id)
        else:
            self._manager.cleanup(req_id)
            self._books.pop(req_id, None)

    def shutdown(self) -> None:
        """Stop the worker once the calls already submitted are done; later calls still answer.

        As vLLM 0.33's does, it waits for the groups already handed to the
        worker (at most ``shutdown_timeout_s``; a call still running then is
        abandoned and its keys stay without a verdict) and applies their
        results.  kvprobe's manager underneath is then shut down; this
        object keeps answering from a copy of the table
        (:mod:`kvprobe.integrations.vllm.after_shutdown`): verdicts known at
        shutdown, None for the other keys.  Calling it again does nothing.
        """
        if self._after_shutdown is not None:
            return
        manager = self._manager
        if not manager.closed:
            self._finish_submitted_groups()
        table = AfterShutdownTable(manager.core)
        self._after_shutdown = table
        self._books.clear()
        self._bind_fast_lookup(table.lookup)
        manager.shutdown()

    def _finish_submitted_groups(self) -> None:
        manager = self._manager
        manager.drain_results()
        if not isinstance(manager.worker, ThreadedWorker):
            return  # a manual or custom worker is pumped by its owner: nothing to wait for
        deadline = time.monotonic() + self._shutdown_timeout_s
        while manager.core.outstanding and time.monotonic() < deadline:
            time.sleep(_SHUTDOWN_POLL_S)
            manager.drain_results()

    # --- test compatibility: read-only views of vLLM's private fields ------------------

    @property
    def _lookup_state(self) -> Mapping[Key, LookupState]:
        """Test compatibility (read-only copy): each key's probe, as vLLM's ``_lookup_state``."""
        if self._after_shutdown is not None:
            return self._after_shutdown.states()
        return {key: state_snapshot(state) for key, state in self._manager.core.states.items()}

    @property
    def _lookup_batch(self) -> list[tuple[Key, object, int]]:
        """Test compatibility (read-only copy): this step's new probes as vLLM's ``(key, context, generation)``."""
        if self._after_shutdown is not None:
            return []
        return [(s.key, s.owner.context, s.generation) for s in self._manager.core.step_batch]

    # --- kvprobe extras --------------------------------------------------------------

    def lookup_chain(self, keys: Sequence[Key], req_context: HasReqId) -> ChainAnswer:
        """Look up a request's ordered keys, stopping after the first known MISS.

        The native manager's ``lookup_chain`` (same arguments, same
        :class:`~kvprobe.statemachine.types.ChainAnswer`): ``lookup`` of each
        key in order up to and including the first known not stored, so
        every key before it joins this step's batch.  An override of
        :meth:`lookup` in a subclass is not called.  For vLLM's result kind
        pass the answer to :func:`kvprobe.integrations.vllm.as_lookup_result`.
        With ``chain_mode="inferred"`` the chain is searched instead and
        ``ChainAnswer.inferred`` counts the hits not checked with the backend.

        Raises:
            InvalidInputError: ``keys`` is a single key or holds a non-bytes
                element, or ``req_context`` has no string ``req_id``.
            ManagerClosedError: after :meth:`shutdown` (unlike :meth:`lookup`,
                which still answers).
        """
        return self._manager.lookup_chain(keys, req_context)

    @property
    def tier_type(self) -> str:
        """The tier's name, as given."""
        return self._tier_type

    @property
    def stats(self) -> Stats:
        """A snapshot of kvprobe's counters (failures, timeouts, reclaimed orphans, ...)."""
        return self._manager.stats

    @property
    def manager(self) -> KvprobeManager:
        """The kvprobe manager this drop-in runs on (for observation and metrics)."""
        return self._manager

    def __len__(self) -> int:
        """Probe states currently held (after shutdown: the entries still answered)."""
        if self._after_shutdown is not None:
            return len(self._after_shutdown)
        return len(self._manager)

    def __enter__(self) -> AsyncLookupManager:
        """Use the tier's manager in a ``with`` block; :meth:`shutdown` on exit.

        Raises:
            ManagerClosedError: it was already shut down.
        """
        if self._after_shutdown is not None:
            raise ManagerClosedError(f"lookup manager {self._tier_type!r} was shut down")
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.shutdown()

    def __repr__(self) -> str:
        return (
            f"<{type(self).__name__} {self._tier_type!r}: vLLM drop-in (kvprobe.integrations.vllm) "
            f"over {self._manager!r}>"
        )
