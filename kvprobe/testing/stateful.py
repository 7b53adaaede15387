"""The shipped stateful conformance machine (a Hypothesis ``RuleBasedStateMachine``).

:func:`lookup_machine` builds a machine whose rules are the model actions of
``docs/properties.md`` (Lookup, Flush, Drain, Cleanup, MarkMiss, Shutdown;
the worker's TakeBatch, CompleteGroup, FailGroup in four ways, TimeOut,
Saturate, a late answer (also from a stuck call of a worker that died), and
Die with or without the death marker) plus ground-truth changes
(store/remove a block).  Each rule
performs the action on a real :class:`~kvprobe.statemachine.AsyncLookupManager`
and on the reference model (:mod:`kvprobe.spec.model`) and compares what the
caller can see: return values, ``phase`` and ``len``, the backend calls made,
the counters, and the manager's tables abstracted into a model state.  One
``@invariant`` (``contract``) runs the checks after every step: first
``TierAnswersTruthfully`` (the oracle: every answer the tier gave matched
what the factory stored), then the predicates named as in
``docs/properties.md``, evaluated both on the model and on the abstraction
of the real manager (history variables are recorded from the manager's
trace), then the comparison with the model.  Every
trace event is also fed to :class:`kvprobe.spec.replay.TraceChecker` as it is
emitted, so each run's whole trace is validated against the model.

Worker modes:

* ``"manual"`` (default): the machine pumps a
  :class:`~kvprobe.statemachine.ManualWorker`, so Hypothesis chooses every
  interleaving and shrinks it.  Failures are injected by a scriptable wrapper
  of the backend, so the real ``probe_group`` path turns them into outcomes.
* ``"thread"``: the real :class:`~kvprobe.statemachine.ThreadedWorker`; each
  flush waits for the worker to publish every group of the batch.

Ground truth: a factory returns a :class:`Target` (a backend plus ``store``
and ``remove``), a ``BlockStore``, or a ``(backend, store, remove)`` tuple;
the machine keeps the set of stored keys and expects the backend to agree.
:func:`memory_factory` is the in-memory example; ``kvprobe conform`` runs
:func:`run_conformance` on any factory.
"""

from __future__ import annotations

import json
import random
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, fields
from typing import Any

import hypothesis
from hypothesis import HealthCheck, Phase, settings, target
from hypothesis import strategies as st
from hypothesis.reporting import with_reporter
from hypothesis.stateful import (
    RuleBasedStateMachine,
    get_state_machine_test,
    initialize,
    invariant,
    precondition,
    rule,
)

from kvprobe.backends.base import Backend
from kvprobe.backends.memory import InMemoryBackend
from kvprobe.spec import model, model_chain
from kvprobe.spec.lifecycle import LookupPhase
from kvprobe.spec.model_state import ChainAsk
from kvprobe.spec.replay import TraceChecker
from kvprobe.statemachine.core import LookupCore
from kvprobe.statemachine.manager import AsyncLookupManager
from kvprobe.statemachine.types import FailureKind, GroupOutcome, ManagerClosedError, ProbeGroup, ReqContext
from kvprobe.statemachine.windows import chain_window_size
from kvprobe.statemachine.workers import ManualWorker
from kvprobe.testing.lifetimes import Lifetimes

__all__ = [
    "FAILURES",
    "KEYS",
    "REQS",
    "ConformanceResult",
    "GhostRecorder",
    "ScriptedBackend",
    "ScriptedFault",
    "Target",
    "abstract_state",
    "as_target",
    "failure_report",
    "lookup_machine",
    "memory_factory",
    "run_conformance",
    "short_name",
]

#: The key pool: few keys, so collisions, shared probes and reuse are common.
#: Eight bytes plus a four-byte group index, shaped like vLLM offload keys.
KEYS: tuple[bytes, ...] = tuple(bytes([0xC0 + i]) * 8 + i.to_bytes(4, "big") for i in range(3))
#: The request-id pool (two suffice for shared probes and for a flush regrouping
#: a key under the request still waiting; cleanup also draws an unknown id).
REQS: tuple[str, ...] = ("req-a", "req-b")

#: How a scripted backend call fails, and the FailureKind probe_group reports for it.
FAILURES: dict[str, FailureKind] = {
    "raise": FailureKind.RAISED,
    "raise_iter": FailureKind.RAISED_WHILE_ITERATING,
    "short": FailureKind.SHORT_RESULT,
    "long": FailureKind.LONG_RESULT,
}


class ScriptedFault(RuntimeError):
    """The failure a :class:`ScriptedBackend` injects on purpose."""


def _raise_after(verdicts: list[bool]) -> Iterator[bool]:
    yield from verdicts
    raise ScriptedFault("scripted failure while the result is iterated")


def short_name(key: bytes, pool: Sequence[bytes] = KEYS) -> str:
    """``k1``, ``k2``, ... for the keys of ``pool`` (in pool order); other keys as hex."""
    return f"k{pool.index(key) + 1}" if key in pool else key.hex()


def _hit(verdict: object) -> str:
    return "hit" if verdict else "miss"


def _shown(verdict: bool | None) -> str:
    return "unknown yet (None)" if verdict is None else _hit(verdict)


class ScriptedBackend:
    """Wraps a backend; the next call can be made to fail in a chosen way, and
    every answer of the wrapped backend is audited against the ground truth.

    ``mode`` applies to the next ``batch_lookup`` only: ``"ok"``, ``"raise"``
    (raise at call time), ``"raise_iter"`` (raise while the result is
    iterated), ``"short"`` (one result too few), ``"long"`` (one too many).
    Every call is recorded in ``calls`` as ``(keys, req_id)`` before anything
    else happens.  Errors of the wrapped backend propagate unchanged.

    The audit: with ``oracle`` (key -> is the block stored now), each answer
    the wrapped backend gives is compared with it, key by key, before any
    scripted fault is applied; with ``budget_s``, a call that takes longer is
    a fault too (behind a manager with that timeout its keys would resolve as
    MISS).  Each finding is appended to ``lies`` as one line; the machine's
    ``TierAnswersTruthfully`` check fails on the first.  The audit runs on the
    calling thread (the worker's in thread mode): it only appends, so it never
    changes what the manager sees.
    """

    def __init__(
        self,
        inner: Backend,
        oracle: Callable[[bytes], bool] | None = None,
        budget_s: float | None = None,
        pool: Sequence[bytes] = KEYS,
    ) -> None:
        self.inner = inner
        self.mode = "ok"
        self.calls: list[tuple[tuple[bytes, ...], str | None]] = []
        self.release = threading.Event()
        #: With groups running concurrently, ``mode`` applies to this request's call only.
        self.mode_for: str | None = None
        self.oracle = oracle
        self.budget_s = budget_s
        self.pool = tuple(pool)
        self.lies: list[str] = []

    def batch_lookup(self, keys: Sequence[bytes], req_context: object) -> Any:
        keys = list(keys)
        req_id = getattr(req_context, "req_id", None)
        self.calls.append((tuple(keys), req_id))
        if self.mode_for is not None and req_id != self.mode_for:
            mode = "ok"
        else:
            mode, self.mode = self.mode, "ok"
        if mode == "hang":
            # Blocks until the test releases it (a call that overstays its timeout).
            self.release.wait()
        if mode == "raise":
            raise ScriptedFault("scripted failure at call time")
        start = time.monotonic()
        verdicts = list(self.inner.batch_lookup(keys, req_context))
        self._audit(keys, verdicts, time.monotonic() - start)
        if mode == "raise_iter":
            return _raise_after(verdicts[: len(verdicts) // 2])
        if mode == "short":
            return verdicts[:-1]
        if mode == "long":
            return [*verdicts, False]
        return verdicts

    def _audit(self, keys: list[bytes], verdicts: list[Any], seconds: float) -> None:
        names = ", ".join(short_name(k, self.pool) for k in keys)
        if self.budget_s is not None and seconds > self.budget_s:
            self.lies.append(
                f"the tier took {seconds:.2f} s to answer [{names}], over the {self.budget_s:g} s lookup "
                "timeout: behind a manager with that timeout these keys resolve as MISS"
            )
        if self.oracle is None:
            return
        if len(verdicts) != len(keys):
            self.lies.append(f"the tier returned {len(verdicts)} answers for {len(keys)} keys [{names}]")
            return
        for key, verdict in zip(keys, verdicts, strict=True):
            truth = self.oracle(key)
            if bool(verdict) is not truth:
                self.lies.append(
                    f"the tier answered {short_name(key, self.pool)} = {_hit(verdict)}, "
                    f"but it holds {short_name(key, self.pool)} = {_hit(truth)} "
                    f"(the factory {'stored' if truth else 'removed or never stored'} that block)"
                )


@dataclass
class Target:
    """A backend under test plus the means to set its ground truth.

    ``store(key)`` must make the block present, ``remove(key)`` absent (no
    error if it was not there); ``close`` (optional) releases resources at
    the end of each run.
    """

    backend: Backend
    store: Callable[[bytes], None]
    remove: Callable[[bytes], None]
    close: Callable[[], None] | None = None


def as_target(made: object) -> Target:
    """Accept what a factory returns: a Target, a BlockStore, or ``(backend, store, remove)``.

    Raises:
        TypeError: ``made`` is none of these.
    """
    if isinstance(made, Target):
        return made
    if isinstance(made, tuple) and len(made) == 3 and all(callable(x) for x in made[1:]):
        return Target(made[0], made[1], made[2])
    if all(callable(getattr(made, name, None)) for name in ("batch_lookup", "store", "remove")):
        close = getattr(made, "close", None)
        return Target(made, made.store, made.remove, close if callable(close) else None)  # type: ignore[attr-defined,arg-type]
    raise TypeError(
        "a conformance factory must return a Target, a BlockStore (batch_lookup/store/remove) "
        f"or a (backend, store, remove) tuple; got {type(made).__name__}"
    )


def memory_factory() -> Target:
    """A fresh, empty in-memory tier (the example factory for ``kvprobe conform``)."""
    backend = InMemoryBackend()
    return Target(backend, backend.store, backend.remove)


# --- abstraction of the real manager --------------------------------------------------------


class GhostRecorder:
    """Trace sink that derives the model's history variables from the real core.

    It is called synchronously inside each core action, so it can look at the
    core's table right after the action; comparing with the table after the
    previous event shows what the action changed.  Every event is also
    round-tripped through JSON and fed to a :class:`TraceChecker`.
    """

    def __init__(self) -> None:
        self.core: LookupCore | None = None
        self.events: list[dict[str, object]] = []
        self.checker = TraceChecker()
        self.submitted: dict[tuple[bytes, int], int] = {}
        self.submitted_not_pending: set[tuple[bytes, int]] = set()
        self.applied: dict[tuple[bytes, int], int] = {}
        self.stale_applied = 0
        self.forced: set[tuple[bytes, int]] = set()
        self.moot: set[tuple[bytes, int]] = set()
        self._before: dict[bytes, tuple[LookupPhase, int, bool | None]] = {}
        #: The open groups after the latest scheduler event (``{req, keys, gens}`` each).
        self._open: list[dict[str, Any]] = []
        #: Whether events are still recorded and checked (off for the final teardown).
        self.checking = True
        #: The chain walks' Lookups as they happened (model_chain.ChainAsk each), and the
        #: walk being recorded: its request and the verdicts its events reported so far.
        self.chain_asks: list[ChainAsk] = []
        self._walk: tuple[str, list[bool | None]] | None = None

    def bind(self, core: LookupCore) -> None:
        self.core = core
        self._before = self._snapshot()

    def _snapshot(self) -> dict[bytes, tuple[LookupPhase, int, bool | None]]:
        assert self.core is not None
        return {k: (_held(s.phase), s.generation, s.verdict) for k, s in self.core.states.items()}

    def __call__(self, event: dict[str, object]) -> None:
        if not self.checking:
            return
        event = json.loads(json.dumps(event))
        self.events.append(event)
        if self.core is None:
            return
        after = self._snapshot()
        before = self._before
        action = event["action"]
        if action == "Flush":
            for group in event["groups"]:  # type: ignore[attr-defined]
                for hexkey, gen in zip(group["keys"], group["gens"], strict=True):
                    pair = (bytes.fromhex(hexkey), gen)
                    self.submitted[pair] = self.submitted.get(pair, 0) + 1
                    was = before.get(pair[0])
                    if was is None or was[0] is not LookupPhase.PENDING or was[1] != gen:
                        self.submitted_not_pending.add(pair)
        elif action == "Drain" and event["group"] == 0:
            self._dead_worker_drain(event, before, after)
        elif action == "Drain":
            for hexkey, gen in zip(event["keys"], event["gens"], strict=True):  # type: ignore[call-overload]
                key = bytes.fromhex(hexkey)
                was, now = before.get(key), after.get(key)
                if was is None or was == now:
                    continue
                if was[1] != gen:
                    self.stale_applied += 1
                    continue
                self.applied[(key, gen)] = self.applied.get((key, gen), 0) + 1
        elif action == "MarkMiss":
            for hexkey in event["keys"]:  # type: ignore[attr-defined]
                was = before.get(bytes.fromhex(hexkey))
                if was is not None:
                    self.forced.add((bytes.fromhex(hexkey), was[1]))
                    if was[0] is LookupPhase.IN_FLIGHT:
                        self.moot.add((bytes.fromhex(hexkey), was[1]))
        self._record_chain_walk(event)
        self._before = after
        if "open" in event:
            self._open = event["open"]  # type: ignore[assignment]
        # Validate the trace as it grows: the first divergence fails the step that caused it.
        self.checker.feed(event)

    def _record_chain_walk(self, event: dict[str, object]) -> None:
        """A chain walk's Lookup: record what the walk's earlier keys were answered when it asked.

        The events of one walk are consecutive (indices 0, 1, ...); each
        reports the verdict the walk got for its key, which no later Lookup
        of the same walk changes (nothing is drained mid-walk).
        """
        index = event.get("index")
        if event["action"] != "Lookup" or not isinstance(index, int):
            self._walk = None
            return
        req = str(event["req"])
        if index == 0 or self._walk is None or self._walk[0] != req:
            self._walk = (req, [])
        before = self._walk[1]
        window = event.get("window")
        start = model_chain.window_start(window if isinstance(window, int) else None, index)
        self.chain_asks.append(ChainAsk(req, bytes.fromhex(str(event["key"])), index, start, tuple(before)))
        verdict = event.get("verdict")
        before.append(verdict if isinstance(verdict, bool) else None)

    def _dead_worker_drain(
        self,
        event: dict[str, object],
        before: dict[bytes, tuple[LookupPhase, int, bool | None]],
        after: dict[bytes, tuple[LookupPhase, int, bool | None]],
    ) -> None:
        """The Drain of a dead worker fails every open group at once and names no
        group: a state it changed had a result applied, of its own generation if
        one of the groups open before it holds that generation, else a stale one."""
        pairs = {(bytes.fromhex(k), int(g)) for o in self._open for k, g in zip(o["keys"], o["gens"], strict=True)}
        for item in event["after"]:  # type: ignore[attr-defined]
            key = bytes.fromhex(item["key"])
            was = before.get(key)
            if was is None or was == after.get(key):
                continue
            if (key, was[1]) in pairs:
                self.applied[(key, was[1])] = self.applied.get((key, was[1]), 0) + 1
            else:
                self.stale_applied += 1


def _held(phase: LookupPhase | None) -> LookupPhase:
    """The phase of a state the table holds (never ABSENT: that is a dropped state)."""
    if phase is None:
        raise AssertionError("the probe table holds a state marked ABSENT (dropped)")
    return phase


def _group(g: ProbeGroup) -> model.Group:
    return model.Group(g.group_id, g.batch_id, g.req_id, g.keys, g.generations)


def _outcome(o: GroupOutcome) -> model.Outcome:
    failure = None if o.failure is None else o.failure.value
    return model.Outcome(_group(o.group), o.verdicts, failure, o.late)


def abstract_state(m: AsyncLookupManager, ghosts: GhostRecorder) -> model.State:
    """The real manager seen as a model state (the abstraction function).

    The worker's queue and taken groups are read from a ManualWorker; for any
    other worker they are taken as empty (call this when that worker is idle).
    Id counters are not observable and are left at their initial values.
    """
    core = m.core
    worker = m.worker
    queue: tuple[tuple[model.Group, ...], ...] = ()
    taken: dict[int, model.Group] = {}
    timed_out: frozenset[int] = frozenset()
    stray: dict[int, model.Group] = {}
    marker_published = False
    if isinstance(worker, ManualWorker):
        stray = {gid: _group(g) for gid, g in worker.stray.items()}
        marker_published = worker.marker_published
        if m.closed:
            # Shutdown: the calls stuck then outlive the worker too (the model's stray).
            stray.update({gid: _group(worker.taken[gid]) for gid in worker.timed_out})
        else:
            queue = tuple(tuple(_group(g) for g in b.groups) for b in worker.submitted)
            taken = {gid: _group(g) for gid, g in worker.taken.items()}
            timed_out = frozenset(worker.timed_out)
    stats = m.stats
    counts = model.Counts(**{f.name: getattr(stats, f.name) for f in fields(model.Counts)})
    probes = {
        k: model.Probe(_held(s.phase), s.generation, frozenset(s.waiters), s.verdict) for k, s in core.states.items()
    }
    return model.State(
        probes=probes,
        requests={r: frozenset(s.key for s in request.states) for r, request in core.requests.items()},
        step_batch=tuple((s.key, s.generation, s.owner.req_id) for s in core.step_batch),
        outstanding={gid: _group(g) for gid, g in core.outstanding.items()},
        queue=queue,
        taken=taken,
        timed_out=timed_out,
        inbox=tuple(_outcome(o) for o in core.inbox),
        closed=m.closed,
        worker="stopped" if m.closed else ("up" if worker.is_alive() else "dead"),
        # A dead worker's open groups are failed by the drain of its death marker
        # or, if it published none, by the next flush/drain_results.
        death_unannounced=not m.closed and not worker.is_alive() and not marker_published,
        stray=stray,
        counts=counts,
        submitted=dict(ghosts.submitted),
        submitted_not_pending=frozenset(ghosts.submitted_not_pending),
        applied=dict(ghosts.applied),
        stale_applied=ghosts.stale_applied,
        forced=frozenset(ghosts.forced),
        moot=frozenset(ghosts.moot),
        chain_asks=tuple(ghosts.chain_asks),
    )


#: The state variables compared between the model and the real manager.
COMPARED = (
    "probes",
    "requests",
    "step_batch",
    "outstanding",
    "queue",
    "taken",
    "timed_out",
    "stray",
    "inbox",
    "closed",
    "counts",
)


#: What is compared with the threaded worker (its queue and calls are not observable).
COMPARED_THREAD = tuple(n for n in COMPARED if n not in ("queue", "taken", "timed_out", "stray"))


def _differences(expected: model.State, actual: model.State, names: Sequence[str]) -> list[str]:
    out = []
    for name in names:
        want, got = getattr(expected, name), getattr(actual, name)
        if isinstance(want, dict | type(expected.probes)):
            want, got = dict(want), dict(got)
        if want != got:
            out.append(f"{name}: model {want!r}, implementation {got!r}")
    return out


def interest(s: model.State) -> dict[str, int]:
    """How many subtle situations a model state holds, by kind (a steering score)."""
    with_worker = [g for g in s.taken.values()] + [g for batch in s.queue for g in batch]
    pairs = {(k, g) for grp in with_worker for k, g in zip(grp.keys, grp.gens, strict=True)}
    superseded = sum(1 for k, g in pairs if (p := s.probes.get(k)) is not None and p.gen != g)
    forced = sum(1 for pair in pairs if pair in s.forced)
    orphans = sum(1 for p in s.probes.values() if p.phase is LookupPhase.IN_FLIGHT and not p.waiters)
    return {
        "answers pending for a superseded generation": superseded,
        "answers pending for a forced miss": forced,
        "late answers pending": len(s.timed_out),
        "orphans in flight": orphans,
    }


# --- the machine -------------------------------------------------------------------------


def lookup_machine(
    *,
    manager_class: type[AsyncLookupManager] = AsyncLookupManager,
    worker: str = "manual",
    worker_class: type[ManualWorker] = ManualWorker,
    factory: Callable[[], object] = memory_factory,
    thread_wait_s: float = 10.0,
    lookup_timeout_s: float | None = None,
    keys: Sequence[bytes] = KEYS,
    reqs: Sequence[str] = REQS,
    round_trips: int = 0,
    budget_s: float | None = None,
    max_stuck: int = 1,
    chain_windows: Sequence[int | str] | None = (1, 2),
) -> type[RuleBasedStateMachine]:
    """Build the stateful machine for a manager class, worker mode and backend factory.

    Args:
        manager_class: ``AsyncLookupManager`` or a subclass (the mutants of
            the test suite replace its ``core_class``).
        worker: ``"manual"`` (the machine pumps the worker) or ``"thread"``
            (the real threaded worker; flushes wait for it).
        worker_class: the ManualWorker class to instantiate in manual mode.
        factory: returns the backend under test with its ground truth (see
            :func:`as_target`); called once per run.
        thread_wait_s: in thread mode, how long a flush waits for the worker
            before the run fails (a worker that never answers is a leak).
        lookup_timeout_s: thread mode only: the manager's timeout; with it,
            a flush may make its first call hang past the timeout (reported
            as TIMEOUT) and a later rule releases it (its late answer is
            dropped).  Keep it well above scheduling noise (e.g. 0.3 s).
        keys: the key pool lookups, mark_miss and store/remove draw from.
        reqs: the request-id pool.
        round_trips: how many copies of the ``RoundTrip`` rule to add (0:
            none).  Hypothesis picks among enabled rules uniformly, so each
            copy adds weight: ``kvprobe conform`` uses 3, which makes a
            lying tier surface within a few steps.
        budget_s: a backend call slower than this fails the run
            (``TierAnswersTruthfully``); None: no bound.
        max_stuck: manual mode: the worker's ``max_stuck_calls`` (the model's
            ``max_stuck``): while this many calls are stuck, the ``Saturate``
            rule may fail a running group as SATURATED.  One makes Saturate
            reachable after a single TimeOut.
        chain_windows: the first windows of the manager's ``lookup_chain``
            walks to draw from, one per walk (``"all"``: one window); it is
            set on the manager's core before the walk (so every manager
            class, a drop-in's too, is driven alike).  None keeps the
            manager's own.  The default, 1 or 2, puts the window rule in
            play on the short chains the machine draws: with 1, a window
            opens at the second key; with 2, a miss can precede a key of its
            own window.

    Raises:
        ValueError: ``worker`` is neither ``"manual"`` nor ``"thread"``, or
            ``max_stuck`` is not a positive int.
        InvalidInputError, InvalidValueError: one of ``chain_windows`` is a
            window the manager would refuse.
    """
    if worker not in ("manual", "thread"):
        raise ValueError(f"worker must be 'manual' or 'thread', got {worker!r}")
    if isinstance(max_stuck, bool) or not isinstance(max_stuck, int) or max_stuck < 1:
        raise ValueError(f"max_stuck must be an int of at least 1, got {max_stuck!r}")
    manual = worker == "manual"
    first_windows = None if chain_windows is None else [chain_window_size(w) for w in chain_windows]

    key_pool, req_pool = tuple(keys), tuple(reqs)
    lookup_op = st.tuples(st.just("lookup"), st.sampled_from(key_pool), st.sampled_from(req_pool))
    # A chain lookup: a request's keys in order (see LookupChain).  Half the chains are
    # prefixes of the pool in its order, as prompts share prefixes: walks of one chain
    # then go on window by window, and past a miss, across requests.
    chain_keys = st.one_of(
        st.integers(1, len(key_pool)).map(lambda n: list(key_pool[:n])),
        st.lists(st.sampled_from(key_pool), max_size=4),
    )
    chain_window = st.sampled_from(first_windows) if first_windows else st.none()
    chain_op = st.tuples(st.just("chain"), chain_keys, st.sampled_from(req_pool), chain_window)

    class LookupMachine(RuleBasedStateMachine):
        """Drives a real manager and the reference model side by side."""

        last_effects: list[bool] = []  # noqa: RUF012 (replaced, never mutated, per run)

        def __init__(self) -> None:
            super().__init__()
            self.target = as_target(factory())
            self.stored: set[bytes] = set()
            for key in key_pool:
                self.target.remove(key)
            # The oracle: what the factory's store/remove put in the tier.
            self.backend = ScriptedBackend(
                self.target.backend, oracle=self.stored.__contains__, budget_s=budget_s, pool=key_pool
            )
            self.ghosts = GhostRecorder()
            # What the manager (and a ProcessBackend) starts must end at teardown.
            self.lifetimes = Lifetimes(prefix="kvprobe-")
            self.m = manager_class(
                self.backend,
                name="conform",
                worker=worker_class(max_stuck_calls=max_stuck) if manual else "thread",
                lookup_timeout_s=None if manual else lookup_timeout_s,
                trace=self.ghosts,
            )
            self.ghosts.bind(self.m.core)
            self.s = model.initial()
            self.expected_calls: list[tuple[tuple[bytes, ...], str | None]] = []
            self._cached: tuple[tuple[int, ...], model.State] | None = None
            self._best: dict[str, int] = {}
            self.hung: model.Group | None = None
            # Per step: did it change anything (the model, the tier, the backend calls)?
            # The failure report leaves out steps that did not.  The class keeps the
            # list of the latest run, which is the failing one Hypothesis replays last.
            self.effects: list[bool] = []
            self._fingerprint: tuple[object, ...] | None = None
            type(self).last_effects = self.effects

        def teardown(self) -> None:
            # Release resources only; checks belong to rules and invariants (an
            # error raised here would mask the failure Hypothesis is reporting).
            self.ghosts.checking = False
            self.backend.release.set()  # never leave a caller thread blocked
            # target() may be called once per label and run: report the run's peak.
            for label, score in self._best.items():
                target(float(score), label=label)
            self.m.shutdown()
            if self.target.close is not None:
                self.target.close()
            self.lifetimes.assert_ended()

        @initialize(stored=st.sets(st.sampled_from(key_pool)))
        def initial_blocks(self, stored: set[bytes]) -> None:
            """The tier's contents when the run starts (so hits happen from the first step)."""
            for key in sorted(stored):
                self.target.store(key)
                self.stored.add(key)

        # -- helpers --------------------------------------------------------------------

        def _open(self) -> bool:
            return not self.s.closed

        def _expect_call(self, group: model.Group) -> None:
            self.expected_calls.append((group.keys, group.req))

        def _pick(self, index: int, timed_out: bool | None = None) -> ProbeGroup:
            gids = sorted(g for g in self.s.taken if timed_out is None or (g in self.s.timed_out) is timed_out)
            gid = gids[index % len(gids)]
            worker_obj = self.m.worker
            assert isinstance(worker_obj, ManualWorker)
            return worker_obj.taken[gid]

        def _truth(self, group: model.Group) -> tuple[bool, ...]:
            return tuple(k in self.stored for k in group.keys)

        # -- ground truth ---------------------------------------------------------------

        @precondition(lambda self: self._open())
        @rule(key=st.sampled_from(key_pool), present=st.booleans())
        def set_stored(self, key: bytes, present: bool) -> None:
            """Change the ground truth: store or remove the block of ``key``."""
            self._settle_thread()
            if present:
                self.target.store(key)
                self.stored.add(key)
            else:
                self.target.remove(key)
                self.stored.discard(key)

        # -- scheduler actions ----------------------------------------------------------

        @precondition(lambda self: self._open())
        @rule(key=st.sampled_from(key_pool), req=st.sampled_from(req_pool))
        def Lookup(self, key: bytes, req: str) -> None:
            got = self.m.lookup(key, ReqContext(req))
            self.s, want = model.lookup(self.s, key, req)
            if got is not want:
                self.TierAnswersTruthfully()  # a lying tier is the cause: say so first
            assert got is want, (
                f"Lookup({short_name(key, key_pool)}, {req}): the manager answered {_shown(got)}, "
                f"the model {_shown(want)}"
            )

        def LookupChain(self, keys: list[bytes], req: str, window: int | None = None) -> None:
            """lookup_chain: the model's walk (kvprobe.spec.model_chain), the Lookup
            of each key its window rule allows, in order (each one traced and
            validated as a Lookup event).  Every key the answer counts as
            stored must hold a verdict the backend gave (ChainHitsAnswered).

            Drawn as an operation of SchedulerStep rather than as a rule of
            its own: a further rule thins out every other rule in a run of
            fixed length (the lying tiers of tests/property were then found
            only with twice the examples).  Each walk may have its own first
            window (``window``, set on the core first; None: the one it has):
            the window follows from the walk, so nothing else changes."""
            if window is not None:
                self.m.core.chain_window = window
            first = self.m.core.chain_window
            answer = self.m.lookup_chain(keys, ReqContext(req))
            self.s, want = model_chain.lookup_chain(self.s, keys, req, first or None)
            got = (answer.leading_hits, answer.stopped_at_miss, answer.pending, answer.looked_up)
            assert got == want, (
                f"lookup_chain({[k.hex() for k in keys]}, {req}): the manager answered {got}, the model says {want} "
                f"(leading_hits, stopped_at_miss, pending, looked_up; first window {first or 'all'})"
            )
            states = self.m.core.states
            for key in keys[: answer.leading_hits]:
                state = states.get(key)
                gen = None if state is None else state.generation
                assert self.s.told.get((key, gen)) is True and (key, gen) not in self.s.forced, (  # type: ignore[arg-type]
                    f"ChainHitsAnswered: lookup_chain counted {short_name(key, key_pool)} as stored, but the "
                    f"backend's answer for its generation {gen} was {self.s.told.get((key, gen))!r}"  # type: ignore[arg-type]
                )

        @precondition(lambda self: self._open())
        @rule(
            fail=st.just(None)
            if manual
            else st.sampled_from([None, *FAILURES, *(("hang",) if lookup_timeout_s is not None else ())])
        )
        def Flush(self, fail: str | None) -> None:
            if fail == "hang" and self.hung is not None:
                fail = None  # one stuck call at a time keeps the worker's bound on stuck calls out of play
            self.s, groups = model.flush(model.revive(self.s))
            if fail is not None:
                # Groups run concurrently: the scripted failure goes to the first group's call.
                self.backend.mode = fail
                self.backend.mode_for = groups[0].req if groups else None
            self.m.flush()
            if not manual:
                self._run_thread_worker(groups, fail)

        @precondition(lambda self: self._open())
        @rule(via_phase=st.booleans())
        def Drain(self, via_phase: bool) -> None:
            """Apply published outcomes: through drain_results(), or through the
            public phase(), which drains before it answers."""
            if not via_phase:
                # drain_results() first notices a dead worker (which applies the inbox).
                self.s = model.revive(self.s)
            want = len(self.s.inbox)
            self.s = model.drain_all(self.s)
            if via_phase:
                got_phases = [self.m.phase(k) for k in key_pool]
                want_phases = [p.phase if (p := self.s.probes.get(k)) else None for k in key_pool]
                assert got_phases == want_phases, f"phase() per key {got_phases}, the model {want_phases}"
            else:
                got = self.m.drain_results()
                assert got == want, f"drain_results applied {got} outcomes, the model {want}"

        @precondition(lambda self: self._open())
        @rule(req=st.sampled_from((*req_pool, "req-unknown")))
        def Cleanup(self, req: str) -> None:
            self.m.cleanup(req)
            self.s = model.cleanup(self.s, req)

        @precondition(lambda self: self._open())
        @rule(keys=st.lists(st.sampled_from(key_pool), max_size=3))
        def MarkMiss(self, keys: list[bytes]) -> None:
            self.m.mark_miss(keys)
            self.s = model.mark_miss(self.s, keys)

        @precondition(lambda self: self._open() and bool(self.s.requests))
        @rule(index=st.integers(0, 3))
        def LoadFailed(self, index: int) -> None:
            """The engine's failed-load path: loading a request's blocks failed, so it
            forces MISS on them (MarkMiss), and the request finishes (Cleanup)."""
            reqs = sorted(self.s.requests)
            req = reqs[index % len(reqs)]
            self.MarkMiss(sorted(self.s.requests[req]))
            self.Cleanup(req)

        @precondition(lambda self: self._open())
        @rule(roll=st.integers(0, 7))
        def Shutdown(self, roll: int) -> None:
            # Shutdown ends the interesting part of a run, so it happens on one roll in eight.
            if roll != 7:
                return
            self.m.shutdown()
            self.s = model.shutdown(self.s)
            assert len(self.m) == 0, f"len(m) is {len(self.m)} after shutdown"

        @precondition(lambda self: self.s.closed)
        @rule(key=st.sampled_from(key_pool))
        def after_shutdown(self, key: bytes) -> None:
            calls: list[Callable[[], object]] = [
                lambda: self.m.lookup(key, ReqContext(req_pool[0])),
                self.m.flush,
                self.m.drain_results,
                lambda: self.m.cleanup(req_pool[0]),
                lambda: self.m.mark_miss([key]),
                lambda: self.m.phase(key),
            ]
            for call in calls:
                try:
                    call()
                except ManagerClosedError:
                    continue
                raise AssertionError(f"{call} did not raise ManagerClosedError after shutdown")
            self.m.shutdown()  # a second shutdown does nothing
            assert len(self.m) == 0

        @precondition(lambda self: self._open())
        @rule(
            ops=st.lists(
                # Mostly lookups, as in a real step; cleanup and mark_miss reclaim
                # probes, so too many of them would starve the worker's side.
                st.one_of(
                    lookup_op,
                    st.one_of(lookup_op, chain_op),
                    st.tuples(st.just("cleanup"), st.sampled_from(req_pool)),
                    st.tuples(st.just("mark_miss"), st.sampled_from(key_pool)),
                    st.tuples(st.just("set_stored"), st.sampled_from(key_pool), st.booleans()),
                ),
                min_size=1,
                max_size=5,
            ),
            flush=st.booleans(),
        )
        def SchedulerStep(self, ops: list[tuple[Any, ...]], flush: bool) -> None:
            """A scheduler step: several Lookup/Cleanup/MarkMiss actions (and ground-truth
            changes between them), then maybe Flush.

            The same actions as the single rules (each one is compared and
            traced), bundled so that the deep interleavings come within reach.
            """
            for op in ops:
                if op[0] == "lookup":
                    self.Lookup(op[1], op[2])
                elif op[0] == "chain":
                    self.LookupChain(op[1], op[2], op[3])
                elif op[0] == "cleanup":
                    self.Cleanup(op[1])
                elif op[0] == "set_stored":
                    self.set_stored(op[1], op[2])
                else:
                    self.MarkMiss([op[1]])
            if flush:
                self.Flush(None)

        @precondition(lambda self: self._open())
        @rule(roll=st.integers(0, 3))
        def EventuallyReclaimed(self, roll: int) -> None:
            """Liveness, checked by playing it out: clean up every request, let the
            worker answer everything (late answers included), drain; the table
            must then be empty."""
            if roll != 3:
                return
            for req in sorted(self.s.requests):
                self.m.cleanup(req)
                self.s = model.cleanup(self.s, req)
            # End the step: stale step-batch entries are dropped, nothing is submitted.
            self.m.flush()
            self.s, groups = model.flush(model.revive(self.s))
            assert not groups, f"a flush after every request left submitted {groups}"
            if manual:
                worker_obj = self.m.worker
                assert isinstance(worker_obj, ManualWorker)
                while worker_obj.submitted or worker_obj.taken:
                    if worker_obj.submitted:
                        worker_obj.take_batch()
                        self.s, _ = model.take_batch(self.s)
                    for gid in sorted(worker_obj.taken):
                        group = self.s.taken[gid]
                        self._expect_call(group)
                        truth = self._truth(group)
                        worker_obj.complete(worker_obj.taken[gid])
                        self.s = model.complete_group(self.s, gid, truth)
            self.m.drain_results()
            self.s = model.drain_all(self.s)
            assert model.Reclaimed(self.s), f"the model leaks: {self.s.probes}"
            assert len(self.m) == 0, f"EventuallyReclaimed: {len(self.m)} states left: {dict(self.m.core.states)}"
            assert not self.m.core.outstanding, f"EventuallyReclaimed: groups never answered {self.m.core.outstanding}"

        # -- worker actions (manual mode) ---------------------------------------------------

        @precondition(lambda self: manual and self._open() and not self.s.worker_dead and bool(self.s.queue))
        @rule()
        def TakeBatch(self) -> None:
            worker_obj = self.m.worker
            assert isinstance(worker_obj, ManualWorker)
            batch = worker_obj.take_batch()
            self.s, groups = model.take_batch(self.s)
            assert batch is not None and tuple(_group(g) for g in batch.groups) == groups

        @precondition(lambda self: manual and self._open() and not self.s.worker_dead and bool(self.s.queue))
        @rule(overstay=st.integers(0, 3))
        def WorkerServesBatch(self, overstay: int = 0) -> None:
            """TakeBatch, then CompleteGroup for each of its groups, in order (what an
            unhurried worker does; the single rules give the other interleavings).

            On two rolls in four the worker behaves as the threaded one does
            while max_stuck calls are stuck: each group is answered SATURATED at
            once.  On one of them the tier hangs besides: until max_stuck calls
            are stuck, each call overstays (TimeOut)."""
            worker_obj = self.m.worker
            assert isinstance(worker_obj, ManualWorker)
            batch = worker_obj.take_batch()
            self.s, groups = model.take_batch(self.s)
            assert batch is not None and tuple(_group(g) for g in batch.groups) == groups
            for group in groups:
                taken = worker_obj.taken[group.group_id]
                if overstay >= 2 and len(self.s.stuck()) >= max_stuck:
                    worker_obj.saturate(taken)
                    self.s = model.saturate(self.s, group.group_id, max_stuck)
                elif overstay == 3:
                    worker_obj.time_out(taken)
                    self.s = model.time_out(self.s, group.group_id, max_stuck)
                else:
                    self._expect_call(group)
                    worker_obj.complete(taken)
                    self.s = model.complete_group(self.s, group.group_id, self._truth(group))

        @precondition(lambda self: manual and self._open() and not self.s.worker_dead and bool(self.s.taken))
        @rule(index=st.integers(0, 7))
        def CompleteGroup(self, index: int) -> None:
            group = self._pick(index)
            want = self.s.taken[group.group_id]
            truth = self._truth(want)
            self._expect_call(want)
            self.m.worker.complete(group)  # type: ignore[attr-defined]
            self.s = model.complete_group(self.s, group.group_id, truth)

        @precondition(lambda self: manual and self._open() and not self.s.worker_dead and bool(self.s.taken))
        @rule(index=st.integers(0, 7), how=st.sampled_from(sorted(FAILURES)))
        def FailGroup(self, index: int, how: str) -> None:
            group = self._pick(index)
            self._expect_call(self.s.taken[group.group_id])
            self.backend.mode = how
            self.m.worker.complete(group)  # type: ignore[attr-defined]
            self.s = model.fail_group(self.s, group.group_id, FAILURES[how].value)

        @precondition(
            lambda self: (
                manual and self._open() and not self.s.worker_dead and bool(set(self.s.taken) - self.s.timed_out)
            )
        )
        @rule(index=st.integers(0, 7))
        def TimeOut(self, index: int) -> None:
            group = self._pick(index, timed_out=False)
            self.m.worker.time_out(group)  # type: ignore[attr-defined]
            self.s = model.time_out(self.s, group.group_id, max_stuck)

        @precondition(lambda self: manual and self._open() and not self.s.worker_dead)
        @rule(roll=st.integers(0, 3), marker=st.booleans())
        def WorkerDies(self, roll: int, marker: bool) -> None:
            """The worker dies holding its batches.  With its death marker (how the
            threaded worker's dispatcher dies): the next drain, a lookup's
            included, fails every open group as WORKER_DIED.  Without: the next
            flush or drain_results must notice and do so.  Either way that call
            starts a new worker; stuck calls live on and may answer late."""
            if roll != 3:
                return
            worker_obj = self.m.worker
            assert isinstance(worker_obj, ManualWorker)
            worker_obj.die(publish_marker=marker)
            self.s = model.worker_dies(self.s, marker=marker)

        if manual:
            # Rules only the manual machine has (an extra rule would change how the
            # threaded machine's runs are generated).

            @precondition(
                lambda self: (
                    self._open()
                    and not self.s.worker_dead
                    and len(self.s.stuck()) >= max_stuck
                    and bool(set(self.s.taken) - self.s.timed_out)
                )
            )
            @rule(index=st.integers(0, 7))
            def Saturate(self, index: int) -> None:
                """While max_stuck calls are stuck, a running group fails at once as
                SATURATED (no backend call), as the threaded worker does instead of
                starting another call."""
                group = self._pick(index, timed_out=False)
                worker_obj = self.m.worker
                assert isinstance(worker_obj, ManualWorker)
                assert worker_obj.stuck_calls == len(self.s.stuck()), (
                    f"the worker counts {worker_obj.stuck_calls} stuck calls, the model {len(self.s.stuck())}"
                )
                worker_obj.saturate(group)
                self.s = model.saturate(self.s, group.group_id, max_stuck)

            @precondition(lambda self: self._open() and bool(self.s.stray))
            @rule(index=st.integers(0, 7))
            def StrayAnswersLate(self, index: int) -> None:
                """A stuck call of the worker's earlier life (it died since, or was
                revived) returns: its answer is published marked late and dropped,
                also while the worker is dead."""
                gids = sorted(self.s.stray)
                gid = gids[index % len(gids)]
                group = self.s.stray[gid]
                worker_obj = self.m.worker
                assert isinstance(worker_obj, ManualWorker)
                self._expect_call(group)
                worker_obj.complete(worker_obj.stray[gid])
                self.s = model.late_answer(self.s, gid, self._truth(group))

        # -- thread mode --------------------------------------------------------------------

        def _settle_thread(self) -> None:
            # Ground truth only changes while no backend call can be running.
            if not manual:
                self._wait_published(len(self.s.inbox))

        def _wait_published(self, count: int) -> None:
            deadline = time.monotonic() + thread_wait_s
            while len(self.m.core.inbox) < count:
                if time.monotonic() > deadline:
                    raise AssertionError(
                        f"NothingLeaks: the threaded worker published {len(self.m.core.inbox)} of {count} "
                        f"outcomes within {thread_wait_s} s"
                    )
                time.sleep(0.0005)

        def _run_thread_worker(self, groups: tuple[model.Group, ...], fail: str | None) -> None:
            if not groups:
                # Nothing was submitted, so the scripted failure did not fire.
                self.backend.mode = "ok"
                return
            self.s, _ = model.take_batch(self.s)
            truths = {}
            for group in groups:
                self._expect_call(group)
                truths[group.group_id] = self._truth(group)
            self._wait_published(len(self.s.inbox) + len(groups))
            # Groups run concurrently and publish as they finish: the model's
            # worker answers them in the order the real one did.
            published = [o.group.group_id for o in list(self.m.core.inbox)[-len(groups) :]]
            by_id = {group.group_id: group for group in groups}
            assert sorted(published) == sorted(by_id), f"published {published}, submitted {sorted(by_id)}"
            for gid in published:
                group = by_id[gid]
                if group is groups[0] and fail == "hang":
                    self.s = model.time_out(self.s, gid)
                    self.hung = group
                elif group is groups[0] and fail is not None:
                    self.s = model.fail_group(self.s, gid, FAILURES[fail].value)
                else:
                    self.s = model.complete_group(self.s, gid, truths[gid])
            self.backend.mode_for = None

        if not manual:
            # Only the threaded machine has this rule (an extra rule would change how the
            # manual machine's runs are generated).

            @precondition(lambda self: not manual and self._open() and self.hung is not None)
            @rule()
            def ReleaseStuckCall(self) -> None:
                """The call that overstayed its timeout returns: its late answer is published."""
                group = self.hung
                assert group is not None
                self.hung = None
                self.s = model.complete_group(self.s, group.group_id, self._truth(group))
                self.backend.release.set()
                self._wait_published(len(self.s.inbox))
                self.backend.release = threading.Event()

        if round_trips > 0:

            @precondition(lambda self: self._open())
            @rule(
                req=st.sampled_from(req_pool),
                # Two keys at least: a group whose verdicts can be swapped or shifted.
                asked=st.lists(
                    st.sampled_from(key_pool), min_size=min(2, len(key_pool)), max_size=len(key_pool), unique=True
                ),
                change=st.none() | st.tuples(st.sampled_from(key_pool), st.booleans()),
            )
            def RoundTrip(self, req: str, asked: list[bytes], change: tuple[bytes, bool] | None) -> None:
                """Maybe store or remove a block; one request looks up some keys; Flush;
                the worker answers the batch; Drain; the request asks again.

                The path every verdict takes, as one step (each action is compared
                and traced as in the single rules), so that a tier's answers reach
                the checks within a few steps.
                """
                if change is not None:
                    self.set_stored(*change)
                for key in asked:
                    self.Lookup(key, req)
                self.Flush(None)
                if manual:
                    while self.s.queue and not self.s.worker_dead:
                        self.WorkerServesBatch()
                self.Drain(False)
                for key in asked:
                    self.Lookup(key, req)

        # -- invariants (docs/properties.md names) --------------------------------------------

        def _real(self) -> model.State:
            # Invariants run after every step; abstract the manager once per step.
            # Every change of the abstracted state is an action (a trace event) or a
            # worker move (which changes one of these lengths).
            worker_obj = self.m.worker
            moves = (
                (len(worker_obj.submitted), len(worker_obj.taken), len(worker_obj.timed_out), len(worker_obj.stray))
                if isinstance(worker_obj, ManualWorker)
                else (0, 0, 0, 0)
            )
            key = (len(self.ghosts.events), len(self.m.core.inbox), len(self.backend.calls), *moves)
            if self._cached is None or self._cached[0] != key:
                self._cached = (key, abstract_state(self.m, self.ghosts))
            return self._cached[1]

        def _check(self, name: str) -> None:
            holds = model.INVARIANTS[name]
            assert holds(self.s), f"{name} broken by the reference model itself: {self.s}"
            real = self._real()
            assert holds(real), f"{name} broken by the implementation: {real}"

        #: The checks run after every step, in this order (one ``@invariant``, so a
        #: failing example prints one line per step, not one per check).
        CHECKS = (
            "TierAnswersTruthfully",
            "TypeOK",
            "EnqueueOnce",
            "NoDuplicateProbe",
            "StaleGenerationDropped",
            "VerdictIffResolved",
            "ForcedMissSticks",
            "ReverseIndexConsistent",
            "NothingLeaks",
            "ChainStopsAtMiss",
            "ChainWindowWaits",
            "ChainHitsAnswered",
            "steer",
            "conforms_to_reference",
        )

        @invariant()
        def contract(self) -> None:
            """Every check of ``CHECKS``; the first that fails names itself."""
            s = self.s  # the tables, not the counters (a no-op Cleanup still counts one)
            tables = (s.probes, s.requests, s.step_batch, s.outstanding, s.queue, s.taken, s.timed_out, s.inbox)
            now = (*tables, s.closed, frozenset(self.stored), len(self.backend.calls))
            if self._fingerprint is not None:
                self.effects.append(now != self._fingerprint)
            self._fingerprint = now
            for name in self.CHECKS:
                getattr(self, name)()

        def TierAnswersTruthfully(self) -> None:
            """Every answer the tier gave matched what the factory stored (and came in time)."""
            lies = self.backend.lies
            assert not lies, "TierAnswersTruthfully: " + lies[0] + (f" (and {len(lies) - 1} more)" if lies[1:] else "")

        def TypeOK(self) -> None:
            self._check("TypeOK")

        def EnqueueOnce(self) -> None:
            self._check("EnqueueOnce")

        def NoDuplicateProbe(self) -> None:
            self._check("NoDuplicateProbe")

        def StaleGenerationDropped(self) -> None:
            self._check("StaleGenerationDropped")

        def VerdictIffResolved(self) -> None:
            self._check("VerdictIffResolved")

        def ForcedMissSticks(self) -> None:
            self._check("ForcedMissSticks")

        def ReverseIndexConsistent(self) -> None:
            self._check("ReverseIndexConsistent")

        def NothingLeaks(self) -> None:
            self._check("NothingLeaks")

        # The chain walk's invariants (kvprobe.spec.model_chain), on the model and on the
        # implementation (its history recorded from the walks' trace events).  Counted hits
        # are checked on the implementation by LookupChain itself (its answer against the
        # model's record of the backend's answers).

        def _check_chain(self, name: str, real: bool = True) -> None:
            holds = model_chain.CHAIN_INVARIANTS[name]
            assert holds(self.s), f"{name} broken by the reference model itself"
            if real:
                broken = [a for a in self._real().chain_asks if not holds(model.State(chain_asks=(a,)))]
                assert not broken, f"{name} broken by the implementation: {broken[0]}"

        def ChainStopsAtMiss(self) -> None:
            self._check_chain("ChainStopsAtMiss")

        def ChainWindowWaits(self) -> None:
            self._check_chain("ChainWindowWaits")

        def ChainHitsAnswered(self) -> None:
            self._check_chain("ChainHitsAnswered", real=False)

        def steer(self) -> None:
            """Guide generation toward the interleavings where the lifecycle is subtle.

            Not a check: the peak of each score is reported to
            ``hypothesis.target`` at teardown, so the targeting phase mutates
            the runs that reach these situations.
            """
            for label, score in interest(self.s).items():
                self._best[label] = max(self._best.get(label, 0), score)

        def conforms_to_reference(self) -> None:
            """Every observable equals the model's (runs after the named invariants)."""
            real = self._real()
            # The threaded worker's queue and taken groups are not observable.
            problems = _differences(self.s, real, COMPARED if manual else COMPARED_THREAD)
            assert not problems, "implementation diverges from the reference model: " + "; ".join(problems)
            assert len(self.m) == len(self.s.probes), f"len(m) is {len(self.m)}, the model holds {len(self.s.probes)}"
            if not self.s.closed:
                got = [self.m.core.phase(k) for k in key_pool]
                want = [p.phase if (p := self.s.probes.get(k)) else None for k in key_pool]
                assert got == want, f"phases {got}, the model {want}"
            calls, expected = self.backend.calls, self.expected_calls
            if not manual:
                # Concurrent groups call the backend in any order.
                calls, expected = sorted(calls, key=repr), sorted(expected, key=repr)
            assert calls == expected, f"backend calls {self.backend.calls}, the model expects {self.expected_calls}"
            assert self.ghosts.checker.count == len(self.ghosts.events)

    # Hypothesis picks uniformly among the enabled rules: each copy of RoundTrip adds weight.
    for copy in range(2, round_trips + 1):
        setattr(LookupMachine, f"RoundTrip{copy}", LookupMachine.RoundTrip)
    LookupMachine.__name__ = f"LookupMachine_{manager_class.__name__}_{worker}"
    LookupMachine.__qualname__ = LookupMachine.__name__
    return LookupMachine


# --- running it (kvprobe conform) ----------------------------------------------------------


@dataclass
class ConformanceResult:
    """The outcome of :func:`run_conformance`.

    ``seed`` is the seed the examples were generated from (None when
    derandomized): passing it again reproduces the run.  ``failure`` is the
    one-screen report of a failed run (empty when it passed).
    """

    passed: bool
    examples: int
    seconds: float
    worker: str
    failure: str = ""
    seed: int | None = None
    runs: int = 0


#: How long Hypothesis may spend shrinking a failure before it reports the
#: smallest example found so far (its own bound is 300 s).
SHRINK_SECONDS = 10.0


@contextmanager
def _shrink_budget(seconds: float) -> Iterator[None]:
    # Hypothesis has no public setting for this; its engine reads the module
    # constant when shrinking starts.  If a future version renames it, the
    # run still works, with Hypothesis's own bound.
    from hypothesis.internal.conjecture import engine

    old = getattr(engine, "MAX_SHRINKING_SECONDS", None)
    if old is None:
        yield
        return
    engine.MAX_SHRINKING_SECONDS = seconds  # type: ignore[assignment]
    try:
        yield
    finally:
        engine.MAX_SHRINKING_SECONDS = old


def run_conformance(
    factory: Callable[[], object],
    *,
    examples: int = 100,
    steps: int = 50,
    worker: str = "manual",
    derandomize: bool = False,
    shrink: bool = True,
    seed: int | None = None,
    timeout_s: float | None = None,
    shrink_seconds: float = SHRINK_SECONDS,
    round_trips: int = 3,
    on_run: Callable[[int], None] | None = None,
) -> ConformanceResult:
    """Run the machine against ``factory``'s backend; never raises for a failed run.

    Args:
        factory: returns a fresh tier and its ground truth (see :func:`as_target`).
        examples: generated runs at most (the first failure stops the search).
        steps: steps per run at most.
        worker: ``"manual"`` or ``"thread"`` (see :func:`lookup_machine`).
        derandomize: the same examples on every call (for CI); overrides ``seed``.
        shrink: minimise the failing run (bounded by ``shrink_seconds``).
        seed: generate from this seed (a run's reported seed reproduces it);
            None and not derandomized: a fresh random seed, reported.
        timeout_s: a backend call slower than this fails the run; None: no bound.
        shrink_seconds: the most time spent shrinking.
        round_trips: weight of the ``RoundTrip`` rule (see :func:`lookup_machine`).
        on_run: called with the number of runs started so far, as each starts
            (for a progress display).

    Raises:
        TypeError: the factory's first result is not a usable target (the
            run could not start).  Other errors of the factory's first call
            propagate unchanged.
    """
    made = as_target(factory())  # fail early, with a clear message, if the factory is unusable
    if made.close is not None:
        made.close()
    runs = 0

    def counted() -> object:
        nonlocal runs
        runs += 1
        if on_run is not None:
            on_run(runs)
        return factory()

    machine = lookup_machine(factory=counted, worker=worker, round_trips=round_trips, budget_s=timeout_s)
    if derandomize:
        seed = None
    elif seed is None:
        seed = random.getrandbits(32)
    config = settings(
        max_examples=examples,
        stateful_step_count=steps,
        deadline=None,
        database=None,
        derandomize=derandomize,
        suppress_health_check=list(HealthCheck),
        print_blob=False,
        report_multiple_bugs=False,  # one failure, one report
        # No explain phase: it re-runs the failure many times to annotate lines.
        phases=tuple(
            p for p in (Phase.explicit, Phase.generate, Phase.target, Phase.shrink) if shrink or p is not Phase.shrink
        ),
    )
    # run_state_machine_as_test takes no seed: build the same test and seed it.
    test = get_state_machine_test(machine, settings=config)
    if seed is not None:
        test = hypothesis.seed(seed)(test)
    lines: list[str] = []
    start = time.monotonic()
    try:
        with with_reporter(lambda text: lines.append(str(text))), _shrink_budget(shrink_seconds):
            test()
    except Exception as exc:
        report = failure_report(exc, lines, KEYS, getattr(machine, "last_effects", None))
        return ConformanceResult(False, examples, time.monotonic() - start, worker, report, seed, runs)
    return ConformanceResult(True, examples, time.monotonic() - start, worker, "", seed, runs)


def _leaves(exc: BaseException) -> list[BaseException]:
    subs = getattr(exc, "exceptions", None)  # an ExceptionGroup: several distinct failures
    if isinstance(subs, tuple):
        return [leaf for sub in subs for leaf in _leaves(sub)]
    return [exc]


#: Lines of Hypothesis's report that are not steps of the run.
_NOT_STEPS = ("state.contract()", "state.teardown()")


def failure_report(
    exc: BaseException,
    lines: Sequence[str],
    pool: Sequence[bytes] = KEYS,
    effects: Sequence[bool] | None = None,
    width: int = 400,
) -> str:
    """A failed run on one screen: what broke, then one numbered line per step.

    Keys of ``pool`` are shown as ``k1``, ``k2``, ...; the checks Hypothesis
    prints after each step are left out; the last step, where the
    implementation (or the tier) and the model disagree, is marked.  Each
    error message is cut to ``width`` characters.  With ``effects`` (per
    step after the initialize rule, whether it changed the model's tables,
    the tier or the backend calls), steps that changed nothing are left out (the last step is always kept).
    """

    def short(text: str) -> str:
        for key in pool:
            text = text.replace(repr(key), short_name(key, pool)).replace(key.hex(), short_name(key, pool))
        return text

    out: list[str] = []
    for leaf in _leaves(exc):
        message = short(f"{leaf}".strip().splitlines()[0] if str(leaf).strip() else type(leaf).__name__)
        if len(message) > width:
            message = message[: width - 3] + "..."
        out.append(f"  {type(leaf).__name__}: {message}")
    # The steps come through the reporter or, in recent Hypothesis, as notes on the error.
    notes = [note for leaf in _leaves(exc) for note in getattr(leaf, "__notes__", [])]
    texts = [line for text in (*lines, *notes) for line in str(text).splitlines()]
    steps: list[str] = []
    continued = False  # Hypothesis wraps a long step over several lines: join them
    for line in texts:
        text = line.strip()
        if text.startswith("state."):
            steps.append(short(text.removeprefix("state.")))
            continued = not text.endswith(")")
        elif continued and steps and text:
            joiner = "" if steps[-1].endswith(("(", "[", "{")) else " "
            steps[-1] += joiner + short(text)
            continued = not text.endswith(")") or text.count("(") < text.count(")") - 1
    steps = [line for line in steps if f"state.{line}" not in _NOT_STEPS]
    keys = ", ".join(f"{short_name(k, pool)} = {k.hex()}" for k in pool)
    numbered = list(enumerate(steps, 1))
    if effects is not None:
        # effects[0] is the first step after the initialize rule (step 1, always shown).
        numbered = [(n, step) for n, step in numbered if n in (1, len(steps)) or effects[n - 2 : n - 1] != [False]]
    idle = len(steps) - len(numbered)
    left_out = f"; {idle} steps that changed nothing left out" if idle else ""
    out.append(f"The run ({len(steps)} steps{left_out}; keys {keys}):")
    for number, step in numbered:
        marker = "   <- fails here" if number == len(steps) else ""
        out.append(f"  {number:>2}. {step}{marker}")
    return "\n".join(out)
