"""The drop-in base class: vLLM's ``AsyncLookupManager`` shape, kvprobe's contract.

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
the same scheduler-thread methods, and delegates all of them to a
:class:`kvprobe.statemachine.AsyncLookupManager` whose backend is the
subclass's own ``batch_lookup``.  Where vLLM's base would crash the
scheduler, stall lookups for ever or leak states, kvprobe's contract holds
instead (``docs/vllm.md`` lists each case).
"""

from __future__ import annotations

import abc
import logging
from collections.abc import Collection, Iterable, Sequence
from typing import Any

from kvprobe.statemachine.core import LookupCore
from kvprobe.statemachine.manager import AsyncLookupManager as KvprobeManager
from kvprobe.statemachine.manager import WorkerChoice
from kvprobe.statemachine.trace import TraceSink
from kvprobe.statemachine.types import ChainAnswer, HasReqId, InvalidInputError, Key, Stats
from kvprobe.statemachine.workers import DEFAULT_CONCURRENT_GROUPS, DEFAULT_HOLD_S

__all__ = ["AsyncLookupManager"]

logger = logging.getLogger(__name__)


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

    def batch_lookup(self, keys: Sequence[Key], req_context: object) -> Iterable[bool]:
        result = self._tier.batch_lookup(list(keys), req_context)
        if type(result) is not list:
            tolist = getattr(result, "tolist", None)
            if callable(tolist):
                converted: Iterable[bool] = tolist()
                return converted
        return result


class AsyncLookupManager(abc.ABC):
    """The vLLM drop-in: vLLM's base class shape, running on a native kvprobe manager.

    Not kvprobe's native ``AsyncLookupManager`` (``kvprobe.AsyncLookupManager``,
    which takes a backend object): this one keeps vLLM's name, constructor
    and abstract :meth:`batch_lookup` so that a vLLM tier switches by one
    import, and delegates to the native manager it owns (:attr:`manager`).

    Subclass it and implement :meth:`batch_lookup`, exactly as with vLLM's
    class; the owning tier delegates ``lookup`` to :meth:`lookup`,
    ``on_schedule_end`` to :meth:`flush` and ``on_request_finished`` to
    :meth:`cleanup`, and reports failed loads with :meth:`mark_miss`.  All
    scheduler-thread methods must be called from one thread.

    Args:
        tier_type: the tier's name (names the worker thread, the metrics
            label and error messages), as in vLLM.
        lookup_timeout_s: kvprobe extra.  A ``batch_lookup`` call slower than
            this resolves its keys as MISS; None (vLLM's behaviour) waits.
        max_stuck_calls: kvprobe extra (concurrency bound).  With a timeout,
            how many calls may run on past it, each on its own thread, before
            further groups fail at once as MISS.
        max_concurrent_groups: kvprobe extra.  How many request groups'
            ``batch_lookup`` calls the worker runs at once, so one slow group
            holds back no other (vLLM runs them one after another: 1).
        busy_call_hold_s: kvprobe extra.  The longest that running calls
            which keep a CPU busy (rather than wait) hold back a further
            group; 0 starts one whenever a slot is free.
        shutdown_timeout_s: kvprobe extra.  How long :meth:`shutdown` waits for
            a running call (vLLM waits for ever).
        worker: kvprobe extra: ``"thread"`` (default: a dispatcher thread
            and a caller thread per running call, where vLLM has one
            background thread), ``"manual"`` for tests, or a kvprobe ``Worker``.
        checked: kvprobe extra: check the one-thread rule and every invariant
            after each call (slow; tests and debugging).
        trace: kvprobe extra: a trace sink (see ``kvprobe.statemachine.trace``).
        core_class: kvprobe extra: the core to run (e.g. the metered core of
            ``kvprobe.metrics``); None: kvprobe's ``LookupCore``.

    Raises:
        InvalidInputError: ``tier_type`` is not a string, or a number
            argument is not a number.
        InvalidValueError: a timeout is not positive and finite,
            ``busy_call_hold_s`` is negative, or a count is below 1.
    """

    def __init__(
        self,
        tier_type: str,
        *,
        lookup_timeout_s: float | None = None,
        max_stuck_calls: int = 4,
        max_concurrent_groups: int = DEFAULT_CONCURRENT_GROUPS,
        busy_call_hold_s: float = DEFAULT_HOLD_S,
        shutdown_timeout_s: float = 5.0,
        worker: WorkerChoice = "thread",
        checked: bool = False,
        trace: TraceSink | None = None,
        core_class: type[LookupCore] | None = None,
    ) -> None:
        if not isinstance(tier_type, str):
            raise InvalidInputError(f"tier_type must be a string, got {type(tier_type).__name__}")
        self._tier_type = tier_type
        manager_class: type[KvprobeManager] = KvprobeManager
        if core_class is not None:
            manager_class = type(f"{core_class.__name__}Manager", (KvprobeManager,), {"core_class": core_class})
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
        )
        self._bind_fast_lookup()

    def _bind_fast_lookup(self) -> None:
        # The scheduler calls lookup() per block: bind the manager's own
        # lookup (the core's method when nothing is checked or traced) so
        # this class adds no call layer.  Not when a subclass overrides
        # lookup: the instance attribute would hide its override.
        if type(self).lookup is AsyncLookupManager.lookup:
            self.lookup = self._manager.lookup  # type: ignore[method-assign]

    @abc.abstractmethod
    def batch_lookup(self, keys: list[Key], req_context: Any) -> Iterable[bool]:
        """Whether each of ``keys`` is stored in this tier: one bool per key, in order.

        Called on the worker thread (never the scheduler's); ``req_context`` is
        the context of the request the group belongs to.  It may raise, return
        too few or too many results, or be slow: kvprobe turns each of those
        into MISS for the group's keys (counted in :attr:`stats`) and keeps
        serving.
        """

    # --- scheduler-thread API (vLLM's names and meanings) ---------------------------

    def lookup(self, key: Key, req_context: HasReqId) -> bool | None:
        """Non-blocking: True (stored), False (not stored), None (not known yet; retry next step).

        The first lookup of a key queues it for this step's batch; results
        the worker has published are applied first.

        Raises:
            InvalidInputError: ``key`` is not bytes or ``req_context.req_id``
                is not a string (nothing changed).
            ManagerClosedError: after :meth:`shutdown`.
        """
        return self._manager.lookup(key, req_context)

    def flush(self) -> None:
        """End of step: apply published results, then hand this step's new keys to the worker.

        Never blocks and never raises because of the backend.

        Raises:
            ManagerClosedError: after :meth:`shutdown`.
        """
        self._manager.flush()

    def drain_results(self) -> int:
        """Apply the results the worker has published; return how many request groups.

        (vLLM's returns None; a caller that ignores the value sees no difference.)

        Raises:
            ManagerClosedError: after :meth:`shutdown`.
        """
        return self._manager.drain_results()

    def mark_miss(self, keys: Collection[Key]) -> None:
        """A load of these keys from the tier failed: answer False for them from now on.

        Keys with no state are skipped.  The MISS sticks until the state is
        reclaimed, whatever result of an earlier probe arrives later.

        Raises:
            InvalidInputError: ``keys`` is a single key or holds a non-bytes
                element (nothing changed).
            ManagerClosedError: after :meth:`shutdown`.
        """
        self._manager.mark_miss(keys)

    def cleanup(self, req_id: str) -> None:
        """The request finished: release its interest; in-flight probes are kept for others to join.

        Unknown request ids are ignored (counted in :attr:`stats`).

        Raises:
            InvalidInputError: ``req_id`` is not a string (nothing changed).
            ManagerClosedError: after :meth:`shutdown`.
        """
        self._manager.cleanup(req_id)

    def shutdown(self) -> None:
        """Stop the worker (waiting at most ``shutdown_timeout_s``) and reclaim every state.

        Afterwards every method but ``shutdown`` raises ``ManagerClosedError``
        (a ``RuntimeError``); calling it again does nothing.
        """
        self._manager.shutdown()
        self.lookup = self._manager.lookup  # type: ignore[method-assign]  # now the closed manager's

    # --- kvprobe extras --------------------------------------------------------------

    def lookup_chain(self, keys: Sequence[Key], req_context: HasReqId) -> ChainAnswer:
        """Look up a request's ordered keys, stopping after the first known MISS.

        The native manager's ``lookup_chain`` (same arguments, same
        :class:`~kvprobe.statemachine.types.ChainAnswer`): ``lookup`` of each
        key in order up to and including the first known not stored, so
        every key before it joins this step's batch.  An override of
        :meth:`lookup` in a subclass is not called.  For vLLM's result kind
        pass the answer to :func:`kvprobe.integrations.vllm.as_lookup_result`.

        Raises:
            InvalidInputError: ``keys`` is a single key or holds a non-bytes
                element, or ``req_context`` has no string ``req_id``.
            ManagerClosedError: after :meth:`shutdown`.
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
        """Probe states currently held (0 after shutdown)."""
        return len(self._manager)

    def __enter__(self) -> AsyncLookupManager:
        """Use the tier's manager in a ``with`` block; :meth:`shutdown` on exit.

        Raises:
            ManagerClosedError: it was already shut down (the kvprobe manager's check).
        """
        self._manager.__enter__()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.shutdown()

    def __repr__(self) -> str:
        return (
            f"<{type(self).__name__} {self._tier_type!r}: vLLM drop-in (kvprobe.integrations.vllm) "
            f"over {self._manager!r}>"
        )
