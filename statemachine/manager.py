"""``AsyncLookupManager``: the public surface, a thin driver around the core.

The manager owns a :class:`~kvprobe.statemachine.core.LookupCore` (all probe
state) and a worker (all threads and backend calls).  It adds only what the
core must not know about: noticing a dead worker, shutting the worker down,
refusing calls after shutdown, checked mode, and tracing.

``lookup`` and ``lookup_chain`` are the scheduler's hot path; when neither
checked mode nor a trace is on, the instance attributes ``lookup`` and
``lookup_chain`` *are* the core's bound methods, so the manager adds no call
layer to them.  They still refuse after ``shutdown``: the core's shutdown
swaps its tables for closed ones that raise ``ManagerClosedError``.
"""

from __future__ import annotations

import threading
import time
import weakref
from collections.abc import Iterable, Sequence
from dataclasses import replace
from types import TracebackType
from typing import Literal

from kvprobe.backends.base import Backend
from kvprobe.spec.lifecycle import LookupPhase
from kvprobe.statemachine.core import LookupCore
from kvprobe.statemachine.inferred import chain_mode_name
from kvprobe.statemachine.trace import TraceSink, tracing
from kvprobe.statemachine.types import (
    ChainAnswer,
    FailureKind,
    HasReqId,
    InvalidInputError,
    InvalidValueError,
    Key,
    ManagerClosedError,
    Stats,
    WrongThreadError,
)
from kvprobe.statemachine.verdict_cache import VerdictCache, VerdictMemory
from kvprobe.statemachine.weak_backend import BackendAnchor, WeakBackend
from kvprobe.statemachine.windows import (
    chain_schedule,
    start_backlog_of,
    window_name,
)
from kvprobe.statemachine.workers import (
    DEFAULT_CONCURRENT_GROUPS,
    DEFAULT_HOLD_S,
    ManualWorker,
    ThreadedWorker,
    Worker,
    check_count,
    check_hold,
    check_timeout,
)

__all__ = ["AsyncLookupManager"]

WorkerChoice = Literal["thread", "manual"] | Worker


class AsyncLookupManager:
    """Batched, asynchronous existence lookups against one slow tier.

    Call ``lookup`` for each (key, request) during a scheduling step, ``flush``
    at the end of the step, ``cleanup`` when a request finishes, ``mark_miss``
    when loading a block the tier claimed failed, ``shutdown`` at the end.
    All of these must be called from one thread (the scheduler's): the first
    thread that calls ``flush``, ``drain_results``, ``cleanup``,
    ``mark_miss`` or ``phase`` owns the manager, and those calls from any
    other thread raise :class:`WrongThreadError` (``lookup`` is checked only
    in checked mode: it is the hot path).

    Args:
        backend: any object with ``batch_lookup(keys, req_context) -> Iterable[bool]``.
        name: names the worker thread and error messages.
        lookup_timeout_s: a backend call slower than this resolves its keys as
            MISS (counted in ``stats.timeouts``); None waits indefinitely.
            A backend with ``fit_deadline(seconds)`` is handed it, so that
            its own deadline ends before it.
        worker: ``"thread"`` (default, a background thread), ``"manual"``
            (tests pump :attr:`worker`, a :class:`ManualWorker`), or any object
            implementing :class:`~kvprobe.statemachine.workers.Worker`.
        max_stuck_calls: with a timeout, how many calls may run on past it
            before further groups fail at once (bounds the threads).
        max_concurrent_groups: how many request groups the threaded worker
            runs at once (one slow group holds back no other).
        busy_call_hold_s: the longest that running calls which keep a CPU
            busy (rather than wait) hold back a further group, counted from
            its slot being free; 0 starts one whenever a slot is free.
        checked: verify the one-thread rule on every call (``lookup`` and
            ``shutdown`` included) and every invariant after each call (slow;
            for tests and debugging).
        trace: a callable receiving one dict per model action (see
            :mod:`kvprobe.statemachine.trace`).
        shutdown_timeout_s: how long ``shutdown`` waits for the worker thread.
        chain_window: how many keys ``lookup_chain`` probes first (then
            ``chain_window_growth`` times as many per window, each window
            only once every key before it is known stored; see
            :mod:`kvprobe.statemachine.windows`), or ``"all"``: every key up
            to the first known miss at once (fewest steps to an answer, most
            backend checks).  Not given: the backend's ``chain_schedule``
            (first window, growth) if it has one (the object tier's is 4,
            1.25: docs/fleet.md), else 16.
        chain_window_growth: how much each window of ``lookup_chain`` grows
            on the one before (window ``k`` holds ``ceil(chain_window *
            growth**k)`` keys): 2 doubles; a smaller growth probes fewer keys
            past the stored prefix in more windows (docs/chains.md).  Not
            given: the backend's ``chain_schedule``, else 2.  Unused with
            ``chain_window="all"``.
        chain_mode: ``"exact"`` (the default): ``lookup_chain`` probes every
            key up to the first known miss; ``"inferred"``: for tiers written
            in chain order (a block is stored only if the blocks before it
            are, eviction removes suffixes first), it searches for the stored
            prefix's end in O(log n) probes and answers the keys before it
            stored by inference (``ChainAnswer.inferred`` counts them; see
            :mod:`kvprobe.statemachine.inferred`).
        verdict_cache: None (default): every request's lookups ask the
            backend afresh.  A :class:`~kvprobe.statemachine.verdict_cache.VerdictCache`:
            the backend's answers are remembered across requests, bounded in
            entries and time (docs/cache.md); a key asked again within its
            TTL is answered at once, without a probe.
        start_backlog: ``lookup_chain``'s start rule.  While groups submitted
            at earlier steps are unanswered, a request that holds no probe
            yet starts its walk only while those groups and the walks
            already started this step number fewer than this; otherwise the
            call looks nothing up and answers pending (counted in
            :attr:`walks_held`).  A store that cannot keep up then serves
            the walks under way first.  Not given: the backend's
            ``start_backlog`` if it has one (the object tier's), else off;
            0: off.

    A manager dropped without ``shutdown`` stops its worker when it is
    garbage-collected (its threads end once their calls return), even when
    the backend refers back to it: the worker holds the backend only
    through a weak link (:mod:`kvprobe.statemachine.weak_backend`).  After
    ``os.fork()`` the child's manager notices that its worker's threads stayed
    in the parent: the open groups resolve as MISS and a fresh worker starts.

    Raises:
        InvalidInputError: ``backend`` has no callable ``batch_lookup``,
            ``worker`` is not a worker, ``name`` is not a string, a number
            argument is not a number (``chain_window_growth`` a bool too),
            or ``verdict_cache`` is not a ``VerdictCache``.  Nothing was started.
        InvalidValueError: a timeout is not positive or above
            ``threading.TIMEOUT_MAX``, ``busy_call_hold_s`` is negative, a
            count is below 1, ``worker`` is an unknown string, or
            ``chain_window`` is below 1 or a string other than ``"all"``,
            ``chain_window_growth`` is not above 1, above 16, NaN or infinite,
            the backend's ``chain_schedule`` is not such a pair,
            ``start_backlog`` is negative or the backend's is not an int of
            at least 1 (``start_backlog`` not an int: InvalidInputError),
            or ``chain_mode`` is a string other than ``"exact"`` or
            ``"inferred"`` (not a string: InvalidInputError).
            Nothing was started.
    """

    #: The core implementation; the test suite's mutants override this.
    core_class: type[LookupCore] = LookupCore

    def __init__(
        self,
        backend: Backend,
        *,
        name: str = "tier",
        lookup_timeout_s: float | None = None,
        worker: WorkerChoice = "thread",
        max_stuck_calls: int = 4,
        max_concurrent_groups: int = DEFAULT_CONCURRENT_GROUPS,
        busy_call_hold_s: float = DEFAULT_HOLD_S,
        checked: bool = False,
        trace: TraceSink | None = None,
        shutdown_timeout_s: float = 5.0,
        chain_window: int | Literal["all"] | None = None,
        chain_window_growth: float | None = None,
        chain_mode: Literal["exact", "inferred"] = "exact",
        verdict_cache: VerdictCache | None = None,
        start_backlog: int | None = None,
    ) -> None:
        if not callable(getattr(backend, "batch_lookup", None)):
            raise InvalidInputError(
                f"backend must have a callable batch_lookup(keys, req_context); {type(backend).__name__} has none"
            )
        if not isinstance(name, str):
            raise InvalidInputError(f"name must be a str, got {type(name).__name__}")
        if lookup_timeout_s is not None:
            lookup_timeout_s = check_timeout("lookup_timeout_s", lookup_timeout_s)
        shutdown_timeout_s = check_timeout("shutdown_timeout_s", shutdown_timeout_s)
        check_count("max_stuck_calls", max_stuck_calls)
        check_count("max_concurrent_groups", max_concurrent_groups)
        check_hold("busy_call_hold_s", busy_call_hold_s)
        tier_schedule = getattr(backend, "chain_schedule", None)
        first_window, growth = chain_schedule(chain_window, chain_window_growth, tier_schedule)
        walk_mode = chain_mode_name(chain_mode)
        backlog = start_backlog_of(start_backlog, getattr(backend, "start_backlog", None))
        if trace is not None and not callable(trace):
            raise InvalidInputError(f"trace must be callable, got {type(trace).__name__}")
        memory = None if verdict_cache is None else VerdictMemory(verdict_cache, time.monotonic)
        if isinstance(worker, str):
            if worker not in ("thread", "manual"):
                raise InvalidValueError(f"worker must be 'thread', 'manual' or a Worker object, got {worker!r}")
        else:
            missing = [m for m in ("start", "submit", "is_alive", "stop") if not callable(getattr(worker, m, None))]
            if missing:
                raise InvalidInputError(
                    f"worker must be 'thread', 'manual' or an object with start, submit, is_alive and stop; "
                    f"{type(worker).__name__} lacks {', '.join(missing)}"
                )
        self.name = name
        self.backend = backend
        self.lookup_timeout_s = lookup_timeout_s
        fit_deadline = getattr(backend, "fit_deadline", None)
        if lookup_timeout_s is not None and callable(fit_deadline):
            # A tier with a deadline of its own must give up before this
            # timeout, or the timeout takes the keys it did answer too.
            fit_deadline(lookup_timeout_s)
        self._shutdown_timeout_s = shutdown_timeout_s
        self._core = self.core_class() if trace is None else tracing(self.core_class)(trace)
        self._core.chain_window = first_window
        self._core.chain_window_growth = growth
        self._core.chain_mode = walk_mode
        self._core.memory = memory
        self._core.start_backlog = backlog
        if worker == "thread":
            self.worker: Worker = ThreadedWorker(
                name=name,
                lookup_timeout_s=lookup_timeout_s,
                max_stuck_calls=max_stuck_calls,
                max_concurrent_groups=max_concurrent_groups,
                busy_call_hold_s=busy_call_hold_s,
            )
        elif worker == "manual":
            self.worker = ManualWorker()
        else:
            assert not isinstance(worker, str)
            self.worker = worker
        self._checked = checked
        self._owner: int | None = None
        self._closed = False
        self._deaths_seen = 0  # worker deaths the manager has revived after
        if not checked:
            # Hot path: no manager layer between the caller and the core.
            self.lookup = self._core.lookup  # type: ignore[method-assign]
            self.lookup_chain = self._core.lookup_chain  # type: ignore[method-assign]
        # The worker reaches the backend only through this manager's anchor
        # (kvprobe.statemachine.weak_backend): a backend that refers back to
        # its manager must not keep it reachable from the worker's threads.
        self._backend_anchor = BackendAnchor(backend)
        self._worker_backend = WeakBackend(self._backend_anchor)
        self.worker.start(self._worker_backend, self._core.inbox.append)
        # A manager dropped without shutdown() must not leave its threads
        # behind (as concurrent.futures does for an executor).  The finalizer
        # holds the worker, never the manager.
        self._finalizer = weakref.finalize(self, _stop_abandoned, self.worker)

    # --- the scheduler's calls --------------------------------------------------

    def lookup(self, key: Key, req_context: HasReqId) -> bool | None:
        """Whether ``key`` is stored: True, False, or None (not known yet; ask again).

        The first call for a key starts a probe that joins this step's batch.
        Results the worker published are applied first, so a verdict is
        visible as soon as the backend returned.

        Raises:
            InvalidInputError: ``key`` is not ``bytes``, or ``req_context``
                has no string ``req_id`` (also when hashing the key or
                reading the id raises, whatever it raises).  Nothing changed.
            ManagerClosedError: after ``shutdown``.
        """
        self._guard()
        try:
            return self._core.lookup(key, req_context)
        finally:
            self._check()

    def lookup_chain(self, keys: Sequence[Key], req_context: HasReqId) -> ChainAnswer:
        """Look up a request's ordered keys, stopping at the first known MISS or the window's end.

        Exactly ``lookup(key, req_context)`` for each key in order, up to and
        including the first whose verdict is False, and no further than the
        end of the window of the first key whose verdict is unknown: the
        first call probes the first ``chain_window`` keys, and each later
        window (``chain_window_growth`` times the one before) is probed only once every
        key before it is known stored.  Keys not looked up get no state, no
        probe, no backend work.  With ``chain_mode="inferred"`` the chain is
        searched instead (O(log n) keys looked up, one per step; the keys
        before the boundary found are inferred stored).  The answer holds ``leading_hits`` (keys
        known stored before the first that is not), ``stopped_at_miss``,
        ``pending`` (not decided yet: ask again next step) and ``looked_up``.

        Raises:
            InvalidInputError: ``keys`` is not a sequence of ``bytes``, or
                ``req_context`` has no string ``req_id`` (also when reading
                either raises, whatever it raises).  Nothing changed
                (a walk that changes something checks every key first; one
                that only reads checks the keys up to its stop).
            ManagerClosedError: after ``shutdown``.
        """
        self._guard()
        try:
            return self._core.lookup_chain(keys, req_context)
        finally:
            self._check()

    @property
    def chain_window(self) -> int | str:
        """The first window of ``lookup_chain`` (keys), or ``"all"``."""
        return window_name(self._core.chain_window)

    @property
    def chain_window_growth(self) -> float:
        """How much each window of ``lookup_chain`` grows on the one before."""
        return self._core.chain_window_growth

    @property
    def start_backlog(self) -> int | None:
        """``lookup_chain``'s start rule: the groups outstanding at which new walks wait, or None (off)."""
        return self._core.start_backlog

    @property
    def walks_held(self) -> int:
        """``lookup_chain`` calls the start rule held back (they looked nothing up and answered pending)."""
        return self._core.walks_held

    @property
    def chain_mode(self) -> str:
        """How ``lookup_chain`` walks: ``"exact"`` or ``"inferred"``."""
        return self._core.chain_mode

    def flush(self) -> None:
        """End of step: submit this step's pending probes to the worker.

        Also notices a dead worker: its probes resolve as MISS and a new
        worker is started.  Never raises because of the backend; a worker
        whose ``submit`` raises has the batch's probes resolved as MISS
        (``failures["worker_error"]``).

        Raises:
            ManagerClosedError: after ``shutdown``.
            WrongThreadError: called from a thread other than the owner's.
        """
        self._guard()
        self._revive_worker()
        batch = self._core.flush()
        if batch is not None:
            if self._core.stats.worker_deaths != self._deaths_seen:
                # A death marker arrived between the revival check and the
                # core's own drain: this batch must go to a fresh worker.
                self._revive_worker()
            try:
                if not self.worker.is_alive():
                    raise RuntimeError("the worker is not running (it could not be started again)")
                self.worker.submit(batch)
            except Exception as exc:
                # A worker that cannot take the batch must not strand its
                # probes IN_FLIGHT: they resolve as MISS, counted.
                self._core.fail_outstanding(
                    FailureKind.WORKER_ERROR, f"worker.submit raised {type(exc).__name__}: {exc}", batch.groups
                )
        self._check()

    def drain_results(self) -> int:
        """Apply every result the worker has published; return how many groups.

        ``lookup`` and ``flush`` do this implicitly.

        Raises:
            ManagerClosedError: after ``shutdown``.
            WrongThreadError: called from a thread other than the owner's.
        """
        self._guard()
        self._revive_worker()
        applied = self._core.drain()
        self._check()
        return applied

    def cleanup(self, req_id: str) -> None:
        """The request finished: release every probe it waits on.

        Unknown request ids are counted (``stats.unknown_cleanups``) and ignored.

        Raises:
            InvalidInputError: ``req_id`` is not a string.  Nothing changed.
            ManagerClosedError: after ``shutdown``.
            WrongThreadError: called from a thread other than the owner's.
        """
        self._guard()
        self._core.cleanup(req_id)
        self._check()

    def mark_miss(self, keys: Iterable[Key]) -> None:
        """Loading these keys from the tier failed: answer False for them from now on.

        The MISS sticks until the key's state is reclaimed, whatever results
        arrive later.  Keys without a state are counted and ignored.

        Raises:
            InvalidInputError: ``keys`` is a single key, holds a non-bytes
                element, or raised while it was read.  Nothing changed.
            ManagerClosedError: after ``shutdown``.
            WrongThreadError: called from a thread other than the owner's.
        """
        self._guard()
        self._core.mark_miss(keys)
        self._check()

    def shutdown(self) -> None:
        """Stop the worker and reclaim every probe state.

        Afterwards ``len(m) == 0`` and every call but ``shutdown`` and ``len``
        raises :class:`ManagerClosedError`.  Calling it again does nothing.
        Waits at most ``shutdown_timeout_s`` for the worker thread; a backend
        call still running then is abandoned (its result is discarded, its
        thread ends when the call returns).  The table is reclaimed even if
        the worker's ``stop`` raises; that error is then raised.

        Raises:
            WrongThreadError: checked mode, called from another thread.
                Nothing changed.
        """
        if self._closed:
            return
        if self._checked:
            self._guard()
        self._closed = True
        self._finalizer.detach()
        try:
            self.worker.stop(self._shutdown_timeout_s)
        finally:
            self.lookup = self._closed_lookup  # type: ignore[method-assign]
            self._core.shutdown(f"lookup manager {self.name!r} was shut down")

    # --- observation ------------------------------------------------------------

    def __len__(self) -> int:
        """Probe states currently held (0 after shutdown)."""
        return len(self._core.states)

    def phase(self, key: Key) -> LookupPhase | None:
        """The key's phase after applying published results, or None if no state is held.

        Raises:
            InvalidInputError: ``key`` is not ``bytes``.
            ManagerClosedError: after ``shutdown``.
            WrongThreadError: called from a thread other than the owner's.
        """
        self._guard()
        if type(key) is not bytes:
            raise InvalidInputError(f"phase() keys must be bytes, got {type(key).__name__}")
        self._core.drain()
        return self._core.phase(key)

    @property
    def stats(self) -> Stats:
        """A snapshot of the counters (see :class:`~kvprobe.statemachine.types.Stats`)."""
        snapshot = replace(self._core.stats)
        snapshot.failures = dict(snapshot.failures)
        return snapshot

    @property
    def closed(self) -> bool:
        """True after ``shutdown``."""
        return self._closed

    @property
    def core(self) -> LookupCore:
        """The pure core (read it; do not call its actions behind the manager's back)."""
        return self._core

    def __enter__(self) -> AsyncLookupManager:
        """Use the manager in a ``with`` block; ``shutdown`` on exit.

        Raises:
            ManagerClosedError: the manager was already shut down.
        """
        if self._closed:
            raise ManagerClosedError(f"lookup manager {self.name!r} was shut down")
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.shutdown()

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"{len(self)} states"
        return f"<AsyncLookupManager {self.name!r} {state}>"

    # --- driver duties ----------------------------------------------------------

    def _revive_worker(self) -> None:
        core = self._core
        if self.worker.is_alive() and core.stats.worker_deaths == self._deaths_seen:
            return
        # Apply what was published: a death marker among it fails the dead
        # worker's open groups (and counts the death) ...
        core.drain()
        if core.stats.worker_deaths == self._deaths_seen:
            # ... a worker that died without one (or never started): fail them here.
            core.fail_outstanding(FailureKind.WORKER_DIED, f"worker of {self.name!r} died")
        self._deaths_seen = core.stats.worker_deaths
        try:
            self.worker.start(self._worker_backend, core.inbox.append)
        except Exception:
            # No thread to be had now (a resource limit): flush resolves this
            # step's batch as MISS (WORKER_ERROR) and the next call tries again.
            pass

    def _guard(self) -> None:
        if self._closed:
            raise ManagerClosedError(f"lookup manager {self.name!r} was shut down")
        me = threading.get_ident()
        if self._owner != me:
            if self._owner is None:
                self._owner = me
            else:
                raise WrongThreadError(
                    f"lookup manager {self.name!r} is used from thread {threading.current_thread().name!r}; "
                    "it belongs to the thread that first called it"
                )

    def _check(self) -> None:
        if self._checked:
            self._core.check_invariants()

    def _closed_lookup(self, key: Key, req_context: HasReqId) -> bool | None:
        raise ManagerClosedError(f"lookup manager {self.name!r} was shut down")


def _stop_abandoned(worker: Worker) -> None:
    """Finalizer of a manager collected without ``shutdown``: stop its worker, wait for nothing."""
    abandon = getattr(worker, "abandon", None)
    try:
        if callable(abandon):
            abandon()
        else:
            worker.stop(0.0)
    except Exception:  # a finalizer has nobody to report to
        pass
