"""What the pure core holds, and the actions that read or empty it as a whole.

:class:`ProbeTable` is the bottom of :class:`~kvprobe.statemachine.core.LookupCore`:
the probe table, the reverse index, the step batch, the submitted groups,
the inbox the worker publishes to, the counters and the chain walk's
settings, with the actions that take the whole table at once (Shutdown and
the observations: :meth:`~ProbeTable.phase`, the invariant checks).  It is
a module of its own so that the actions above it
(:mod:`~kvprobe.statemachine.handoff`: Flush and Drain;
:mod:`~kvprobe.statemachine.core`: Lookup, Cleanup, MarkMiss) each read in
one sitting, and so that what every one of them relies on, the data layout
below, is stated once.

Data layout (see :mod:`kvprobe.statemachine.records`).  A
:class:`ProbeState` is one generation of one key, and every structure that
must refer to "this generation" holds the object itself: the step batch, the
reverse index (a :class:`WaitingRequest`'s list of states) and the submitted
groups.  A state dropped from the table has its phase set to ABSENT, so "is
this result still for the live generation?" is ``state.phase is IN_FLIGHT``
(a state never returns to IN_FLIGHT once it left it), and cleanup reaches
its states without a table lookup.  Generation numbers are kept for traces
and the reference model, not compared here.  Each probe points at the
registration of the request that created it, and that registration knows
whether the request was cleaned up, so flush groups a probe without looking
into its set of waiters (a separate object, and so a cache miss per key).

Compiled with the rest of the core (mypyc); every class of the core allows
interpreted subclasses (the tracing core, the test suite's mutant cores).
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from kvprobe.spec.lifecycle import ABSENT, Phase
from kvprobe.statemachine.closed import ClosedInbox, ClosedList, ClosedTable
from kvprobe.statemachine.inferred import EXACT
from kvprobe.statemachine.invariants import layout_violations
from kvprobe.statemachine.records import ProbeState, WaitingRequest
from kvprobe.statemachine.types import GroupOutcome, InvariantViolation, Key, ProbeGroup, Stats
from kvprobe.statemachine.verdict_cache import VerdictMemory
from kvprobe.statemachine.windows import ALL, DEFAULT_CHAIN_WINDOW_GROWTH

_C = TypeVar("_C")

try:
    from mypy_extensions import mypyc_attr
except ImportError:  # only the compiled build needs mypy_extensions (mypyc reads the decorator)

    def mypyc_attr(*_args: str, **_flags: bool) -> Callable[[_C], _C]:  # type: ignore[misc]
        return lambda cls: cls


__all__ = ["ProbeTable", "mypyc_attr"]


@mypyc_attr(allow_interpreted_subclasses=True)
class ProbeTable:
    """The core's tables and counters, and the actions on all of them at once.

    All methods must be called from one thread.  None of them performs I/O or
    blocks.
    """

    def __init__(self) -> None:
        self.states: dict[Key, ProbeState] = {}
        # Reverse index: request id -> its registration, which lists the
        # states it waits on (each once) and holds its context (handed to the
        # backend for the groups it owns).  A listed state is in the table: it
        # cannot be dropped while it has a waiter, and a request leaves only
        # through cleanup.
        self.requests: dict[str, WaitingRequest] = {}
        # This step's new states, in first-asked order.  Some may have been
        # reclaimed or forced to MISS since; flush skips those.
        self.step_batch: list[ProbeState] = []
        # Groups submitted whose first outcome has not been applied yet.
        self.outstanding: dict[int, ProbeGroup] = {}
        #: Outcomes published by the worker, applied by ``drain``.
        self.inbox: deque[GroupOutcome] = deque()
        self._stats = Stats()
        self._flushed_probes = 0  # probes_created, but for the step batch
        # The last generation number handed out (an int, not itertools.count:
        # ``next()`` on a counter cost a tenth of a new probe).
        self._last_generation = 0
        self._batch_ids = itertools.count(1)
        self._group_ids = itertools.count(1)
        #: The first window of ``lookup_chain``'s walk, in keys (later
        #: windows grow by ``chain_window_growth``); ``windows.ALL`` (0): one
        #: window, every key.  A bare
        #: core walks the whole chain; ``AsyncLookupManager(chain_window=...)``
        #: checks the value it sets (default ``windows.DEFAULT_CHAIN_WINDOW``).
        self.chain_window: int = ALL
        #: How ``lookup_chain``'s windows grow: window ``k`` holds
        #: ``ceil(chain_window * growth**k)`` keys (:func:`windows.window_end`).
        #: ``AsyncLookupManager(chain_window_growth=...)`` checks the value it sets.
        self.chain_window_growth: float = DEFAULT_CHAIN_WINDOW_GROWTH
        #: How ``lookup_chain`` walks: ``inferred.EXACT`` (every key up
        #: to the first miss) or ``inferred.INFERRED`` (a search that infers
        #: the keys before the stored prefix's end; :mod:`kvprobe.statemachine.inferred`).
        self.chain_mode: str = EXACT
        #: Inferred mode: keys whose load failed (``mark_miss``), latest last;
        #: a chain holding one is walked exactly (``inferred.refute``).
        self.refuted_keys: dict[bytes, None] = {}
        #: The opt-in verdict cache (:mod:`kvprobe.statemachine.verdict_cache`):
        #: None (the default) remembers nothing across requests;
        #: ``AsyncLookupManager(verdict_cache=...)`` sets one.
        self.memory: VerdictMemory | None = None
        #: ``lookup_chain``'s start rule (:func:`kvprobe.statemachine.chain.starts_walk`):
        #: None (the default), every walk starts at once; else the groups
        #: outstanding at which a request holding no probe waits.
        self.start_backlog: int | None = None
        #: Walks the start rule let start since the last flush.
        self.walks_started = 0
        #: ``lookup_chain`` calls the start rule held back (they looked nothing up).
        self.walks_held = 0

    @property
    def stats(self) -> Stats:
        """The live counters.

        ``probes_created`` is brought up to date here: the lookup that creates
        a probe does not count it (the step batch does), flush adds it.
        """
        stats = self._stats
        stats.probes_created = self._flushed_probes + len(self.step_batch)
        return stats

    def _drop(self, state: ProbeState) -> None:
        """Take ``state`` out of the table and mark it gone for groups that refer to it."""
        del self.states[state.key]
        state.phase = ABSENT

    # --- Shutdown ------------------------------------------------------------

    def shutdown(self, message: str = "the lookup manager was shut down") -> None:
        """Shutdown action: reclaim every state, request, batch entry and outcome.

        The tables are first swapped for closed ones (:mod:`kvprobe.statemachine.closed`),
        so every later action, including a lookup bound before this call or
        one racing it from another thread, raises :class:`ManagerClosedError`
        with ``message``; then the old tables are emptied.
        """
        step_batch, states, requests, inbox = self.step_batch, self.states, self.requests, self.inbox
        self.inbox = ClosedInbox(message)
        self.states = ClosedTable(message)
        self.requests = ClosedTable(message)
        self.step_batch = ClosedList(message)
        self._flushed_probes += len(step_batch)
        # Snapshots (C-level copies): a call racing this one may still write
        # to a table it read before the swap; iterating it directly could fail.
        for state in list(states.values()):
            state.phase = ABSENT
        states.clear()
        for request in list(requests.values()):
            request.waiting = False
        requests.clear()
        step_batch.clear()
        self.outstanding.clear()
        inbox.clear()
        if self.memory is not None:
            self.memory.clear()

    # --- Observation -----------------------------------------------------------

    def phase(self, key: Any) -> Phase:
        """The key's phase, or None when no state is held (does not drain)."""
        state = self.states.get(key)
        return None if state is None else state.phase

    def check_invariants(self) -> None:
        """Check the invariants (docs/properties.md) that a snapshot can show.

        Raises:
            InvariantViolation: naming the invariant and the offending key.
        """
        problems = list(self.violations())
        if problems:
            raise InvariantViolation("; ".join(problems))

    def violations(self) -> Iterable[str]:
        """Yield one message per broken invariant (empty when all hold); never raises.

        See :func:`kvprobe.statemachine.invariants.layout_violations`.
        """
        return layout_violations(self.states, self.requests, self.outstanding.values(), self.step_batch)
