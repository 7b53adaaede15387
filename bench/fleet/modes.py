"""How a scheduler asks kvprobe about a request: one strategy object per engine (``Scenario.mode`` names it).

The engine hands each waiting request to its mode at every step it runs
(a step runs when results are published, a request arrives or finishes,
and, with ``lazy=False``, at every step); the mode asks the engine's core
and says when the request is decided.  A mode is anything with:

* ``name``: what the reports call it;
* ``new_core(clock)``: the :class:`LookupCore` the engine runs (a mode that
  needs a core configured otherwise, a verdict cache say, returns that one);
  ``clock`` reads the fleet's virtual time (``Fleet.now``), for a core whose
  memory reads the time;
* ``warmup_s``: the virtual time the fleet must run before its tracked
  window for this mode to be in steady state (0 for a mode without memory:
  ``Scenario.warmup_s`` rules; ``sim.run`` takes the larger);
* ``ask(core, req)``: ask about ``req``; the number of its leading blocks
  known stored once that is decided (its first block known not stored, or
  the end of the prompt), else None (the engine asks again later).

The modes here:

* ``per-key``: ``lookup`` of every key of the prompt (a HEAD-per-block
  scheduler written against single lookups);
* ``chain``: ``lookup_chain(keys)`` and its :class:`ChainAnswer`, asked again
  whenever results arrive, as a scheduler written against kvprobe's chain
  call does.  It assumes nothing about which keys the core probes, so
  whatever ``lookup_chain`` comes to do inside (probing in windows, answering
  from remembered verdicts, inferring a stored prefix) is what this mode
  measures, with no change here; its windows grow by ``chain_growth``
  (``AsyncLookupManager(chain_window_growth=...)``, default 2);
* ``window``: ``lookup_chain(keys[:w])`` with ``w`` doubling from
  ``window0`` each time the first ``w`` are all known stored (windows kept
  by the scheduler, on top of kvprobe);
* ``inferred``: the ``chain`` mode on a core walking as
  ``AsyncLookupManager(chain_mode="inferred")`` does: it searches the stored
  prefix's end (gallop, then bisect) and counts the keys before it stored
  without asking.  The simulated tier is not prefix-closed for every prompt
  (a returning conversation's own blocks can outlive the shared prefix
  before them), and this simulation never calls ``mark_miss``, so where the
  assumption breaks the answer is too long: counted ``answers_above_truth``;
* ``cached``: the ``chain`` mode (exact walk) on a core holding a
  :class:`VerdictMemory` on the fleet's virtual clock, as
  ``AsyncLookupManager(verdict_cache=...)`` gives its core one on
  ``time.monotonic``: a key answered stored within the hit TTL, for any
  request of the engine, is answered from memory without a HEAD.  The
  simulated tier only grows (nothing is ever evicted from it), so a
  remembered "stored" is never stale here: ``answers_above_truth`` is
  counted as for every mode and stays 0.  A cache only pays in steady
  state, so this mode asks for a warm-up of its hit TTL plus
  :data:`CACHE_WARMUP_MARGIN_S` (``warmup_s``): by the tracked window,
  every entry was remembered in the run, and the first ones have expired
  and been asked again, as in a long-running fleet.  Requests arriving
  during the warm-up are not tracked (``Fleet.track_from``).

Lazy asking, exact.  The core guarantees that a request asking again about
keys it already waits on changes nothing (``LookupCore.lookup``: "the same
request asking again changes nothing").  So ``per-key`` and ``window``,
after the call that registers a request's keys, do not call the core again
for them: they read the verdicts of the states the core listed for the
request, in order, with a cursor that only moves forward (a verdict, once
set, stays while the request waits: this simulation never calls
``mark_miss``).  New keys (a window that grows) go through the core's own
call.  ``lazy=False`` re-asks through the core at every ask instead; the
tests check both give the same run.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from bench.fleet.workload import Prompt
from kvprobe.statemachine.core import LookupCore
from kvprobe.statemachine.inferred import EXACT, INFERRED
from kvprobe.statemachine.records import ProbeState
from kvprobe.statemachine.types import InvalidInputError, ReqContext
from kvprobe.statemachine.verdict_cache import VerdictCache, VerdictMemory
from kvprobe.statemachine.windows import (
    DEFAULT_CHAIN_WINDOW,
    DEFAULT_CHAIN_WINDOW_GROWTH,
    chain_window_size,
    window_growth,
)

__all__ = [
    "CACHE_WARMUP_MARGIN_S",
    "DEFAULT_VERDICT_CACHE",
    "MODES",
    "Cached",
    "Chain",
    "Clock",
    "LookupMode",
    "PerKey",
    "Request",
    "Window",
    "make_mode",
]

Clock = Callable[[], float]

#: The ``cached`` mode's verdict cache unless told otherwise
#: (``make_mode(verdict_cache=...)``, ``python -m bench.fleet --verdict-cache``).
#: Misses are not remembered (``miss_ttl_s=0``): a block missing now is
#: likely written soon (the engine computes and writes it).  Hits for 60 s:
#: a shared prefix comes back to an engine about once a minute on this
#: workload (``WorkloadParams``: 0.5 requests/s x 50 % shared / 16 prefixes =
#: one request per prefix every 64 s), so most returns find its blocks
#: remembered.  200,000 entries hold every shared prefix (16 x at most 2,048
#: blocks) and a minute of an engine's own stored blocks with room to spare.
DEFAULT_VERDICT_CACHE = VerdictCache(max_entries=200_000, hit_ttl_s=60.0, miss_ttl_s=0.0)
#: Warm-up beyond the cache's longest TTL: the requests of the last second
#: before the window are answered (their HEADs come back) before it starts.
CACHE_WARMUP_MARGIN_S = 5.0


@dataclass(eq=False)
class Request:
    """One request an engine serves, and what its mode has asked so far."""

    ctx: ReqContext
    prompt: Prompt
    arrived_step: int
    tracked: bool
    window: int = 0  # keys registered with the core so far (modes that read states)
    cursor: int = 0  # keys[:cursor] are known stored (modes that read states)
    states: list[ProbeState] = field(default_factory=list)
    answered_step: int = -1
    leading_hits: int = 0
    probes: int = 0  # new probes this request's lookups created
    stale: int = 0  # blocks answered stored that were gone when loaded (their load failed: mark_miss)


class LookupMode(Protocol):
    """A scheduler's way of asking kvprobe (see the module docstring)."""

    name: str

    @property
    def warmup_s(self) -> float:
        """Virtual seconds the fleet runs before its tracked window, at least (0: no memory to warm)."""
        ...

    def new_core(self, clock: Clock) -> LookupCore:
        """The core an engine with this mode runs; ``clock`` reads the fleet's virtual time."""
        ...

    def ask(self, core: LookupCore, req: Request) -> int | None:
        """Ask about ``req``: its leading known-stored blocks once decided, else None."""
        ...


class _ReadsStates:
    """A mode that registers keys through the core, then reads the states the core listed for the request."""

    name = ""
    warmup_s = 0.0

    def __init__(self, lazy: bool = True) -> None:
        self.lazy = lazy

    def new_core(self, clock: Clock) -> LookupCore:
        return LookupCore()

    def _first(self, n: int) -> int:
        """How many keys (of ``n``) the first call asks about."""
        return n

    def _more(self, window: int, n: int) -> int:
        """How many once the first ``window`` keys are all known stored."""
        return n

    def _register(self, core: LookupCore, req: Request, upto: int) -> None:
        """Ask the core about ``keys[:upto]``, this mode's way."""
        raise NotImplementedError

    def _call(self, core: LookupCore, req: Request, upto: int) -> None:
        before = core.stats.probes_created
        req.window = upto
        self._register(core, req, upto)
        req.probes += core.stats.probes_created - before
        req.states = core.requests[req.ctx.req_id].states

    def ask(self, core: LookupCore, req: Request) -> int | None:
        n = len(req.prompt.keys)
        if req.window == 0 or not self.lazy:
            self._call(core, req, req.window or self._first(n))
        while True:
            states = req.states
            cursor = req.cursor
            limit = min(req.window, len(states))
            while cursor < limit and states[cursor].verdict:
                cursor += 1
            req.cursor = cursor
            if cursor < limit and states[cursor].verdict is False:
                return cursor
            if cursor < req.window:
                return None  # some verdict unknown: ask again when results arrive
            if req.window >= n:
                return n
            self._call(core, req, self._more(req.window, n))


class PerKey(_ReadsStates):
    """``lookup`` of every key of the prompt."""

    name = "per-key"

    def _register(self, core: LookupCore, req: Request, upto: int) -> None:
        lookup = core.lookup
        for key in req.prompt.keys[:upto]:
            lookup(key, req.ctx)


class Window(_ReadsStates):
    """``lookup_chain`` of a window that starts at ``window0`` keys and doubles while every key is stored."""

    name = "window"

    def __init__(self, lazy: bool = True, window0: int = 32) -> None:
        if window0 < 1:
            raise ValueError(f"window0 must be >= 1, got {window0}")
        super().__init__(lazy)
        self.window0 = window0

    def _first(self, n: int) -> int:
        return min(n, self.window0)

    def _more(self, window: int, n: int) -> int:
        return min(n, 2 * window)

    def _register(self, core: LookupCore, req: Request, upto: int) -> None:
        core.lookup_chain(req.prompt.keys[:upto], req.ctx)


class Chain:
    """``lookup_chain(keys)`` at every ask, decided by its :class:`ChainAnswer` (kvprobe's chain contract)."""

    def __init__(self, walk: str = EXACT) -> None:
        self.walk = walk
        self.name = "chain" if walk == EXACT else walk
        #: The first window (``chain_window``) and how each window grows on
        #: the one before (``chain_window_growth``).
        self.first_window = DEFAULT_CHAIN_WINDOW
        self.growth = DEFAULT_CHAIN_WINDOW_GROWTH

    @property
    def warmup_s(self) -> float:
        """No memory to warm: the scenario's warm-up rules."""
        return 0.0

    def new_core(self, clock: Clock) -> LookupCore:
        # The windows and the walk it is given (AsyncLookupManager sets
        # them on its core; a bare core walks the whole chain at once).
        core = LookupCore()
        core.chain_window = self.first_window
        core.chain_window_growth = self.growth
        core.chain_mode = self.walk
        return core

    def ask(self, core: LookupCore, req: Request) -> int | None:
        keys = req.prompt.keys
        before = core.stats.probes_created
        answer = core.lookup_chain(keys, req.ctx)
        req.probes += core.stats.probes_created - before
        if not answer.decided:
            return None
        hits: int = answer.leading_hits
        return hits


class Cached(Chain):
    """The ``chain`` mode's exact walk on a core that remembers verdicts across requests (``verdict_cache``)."""

    def __init__(self, cache: VerdictCache = DEFAULT_VERDICT_CACHE) -> None:
        super().__init__(EXACT)
        self.name = "cached"
        #: The configuration each engine's core gets its own memory of.
        self.cache = cache

    @property
    def warmup_s(self) -> float:
        """The longest TTL plus :data:`CACHE_WARMUP_MARGIN_S`: the cache in steady state by the window."""
        return max(self.cache.hit_ttl_s, self.cache.miss_ttl_s) + CACHE_WARMUP_MARGIN_S

    def new_core(self, clock: Clock) -> LookupCore:
        # As AsyncLookupManager(verdict_cache=...): the core holds a memory
        # of the configuration, on the clock it is given (the virtual one).
        core = super().new_core(clock)
        core.memory = VerdictMemory(self.cache, clock)
        return core


#: The modes by name: a factory taking (lazy, window0).
MODES: dict[str, Callable[[bool, int], LookupMode]] = {
    "per-key": lambda lazy, window0: PerKey(lazy),
    "chain": lambda lazy, window0: Chain(),
    "window": lambda lazy, window0: Window(lazy, window0),
    "inferred": lambda lazy, window0: Chain(INFERRED),
    "cached": lambda lazy, window0: Cached(),
}


def make_mode(
    name: str,
    *,
    lazy: bool = True,
    window0: int = 32,
    chain_growth: float = DEFAULT_CHAIN_WINDOW_GROWTH,
    chain_window: int = DEFAULT_CHAIN_WINDOW,
    verdict_cache: VerdictCache | None = None,
) -> LookupMode:
    """The mode called ``name``; a chain walk's windows start at ``chain_window`` keys and grow by ``chain_growth``.

    ``verdict_cache`` replaces the ``cached`` mode's
    :data:`DEFAULT_VERDICT_CACHE`; modes without memory ignore it (so one
    setting can be given to a whole grid).

    Raises:
        ValueError: no mode has that name, or ``window0`` < 1.
        InvalidInputError, InvalidValueError: ``chain_growth`` or
            ``chain_window`` is not one ``AsyncLookupManager`` accepts
            (checked for every mode), or ``verdict_cache`` is not a
            ``VerdictCache``.
    """
    factory = MODES.get(name)
    if factory is None:
        raise ValueError(f"mode must be one of {tuple(MODES)}, got {name!r}")
    growth = window_growth(chain_growth)
    first_window = chain_window_size(chain_window)
    if verdict_cache is not None and not isinstance(verdict_cache, VerdictCache):
        raise InvalidInputError(f"verdict_cache must be a VerdictCache, got {type(verdict_cache).__name__}")
    mode = factory(lazy, window0)
    if isinstance(mode, Chain):
        mode.first_window, mode.growth = first_window, growth
    if isinstance(mode, Cached) and verdict_cache is not None:
        mode.cache = verdict_cache
    return mode
