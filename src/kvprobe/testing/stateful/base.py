"""What every rule of the machine stands on: its options, how a rule is declared, the shared state.

A rule's strategies depend on the options the machine is built with (the key
and request pools, the worker mode, the timeout), so a rule cannot carry
Hypothesis's ``@rule`` from the start.  It is declared with
:func:`machine_rule` instead: the strategies as a function of
:class:`MachineOptions`, its precondition, and for which options it exists.
:func:`~kvprobe.testing.stateful.machine.lookup_machine` turns each
declaration into a Hypothesis rule when it assembles a machine.

:class:`MachineBase` holds what the rule groups (scheduler, worker, faults,
checks) share: the manager under test, the model state ``s``, the ground
truth, the backend calls the model expects, and how the model follows the
real threaded worker.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, ClassVar, TypeVar, cast

from hypothesis import strategies as st, target
from hypothesis.stateful import RuleBasedStateMachine, initialize, precondition, rule
from hypothesis.strategies import SearchStrategy

from kvprobe.spec import model
from kvprobe.spec.model_state import CacheSpec
from kvprobe.statemachine import AsyncLookupManager, ManualWorker, ProbeGroup, VerdictCache
from kvprobe.testing.lifetimes import Lifetimes
from kvprobe.testing.stateful.ghosts import GhostRecorder
from kvprobe.testing.stateful.tier import FAILURES, ScriptedBackend, as_target

__all__ = ["MachineBase", "MachineOptions", "RuleRecipe", "is_open", "machine_rule", "manual_worker_up"]


@dataclass(frozen=True)
class MachineOptions:
    """How a machine is built (the arguments of :func:`lookup_machine`, checked there)."""

    manager_class: type[AsyncLookupManager]
    worker: str
    worker_class: type[ManualWorker]
    factory: Callable[[], object]
    thread_wait_s: float
    lookup_timeout_s: float | None
    keys: tuple[bytes, ...]
    reqs: tuple[str, ...]
    round_trips: int
    budget_s: float | None
    max_stuck: int
    #: The first windows a chain walk is drawn with (``windows.ALL``: one window); empty: the manager's own.
    chain_windows: tuple[int, ...] = ()
    #: How the manager's ``lookup_chain`` walks: ``"exact"`` or ``"inferred"`` (set on its core).
    chain_mode: str = "exact"
    #: The manager's verdict cache (its clock is the machine's ``Tick`` rule); None: no cache.
    verdict_cache: VerdictCache | None = None
    #: Whether a scheduler step may walk a chain (``lookup_chain``); else single lookups only.
    chain_walks: bool = True

    @property
    def manual(self) -> bool:
        """The machine pumps a ManualWorker (else the real threaded worker runs)."""
        return self.worker == "manual"


_Function = TypeVar("_Function", bound=Callable[..., Any])

#: Hypothesis's ``@rule`` and ``@initialize`` as used here (it types them by the
#: Bundle a rule targets, and these rules target none).
_RuleDecorator = Callable[..., Callable[[Callable[..., Any]], Callable[..., Any]]]

#: The attribute under which :func:`machine_rule` leaves its declaration on a method.
RECIPE_ATTRIBUTE = "_kvprobe_machine_rule"


@dataclass(frozen=True)
class RuleRecipe:
    """A rule's declaration: its strategies per options, its precondition, when it exists."""

    arguments: Callable[[MachineOptions], dict[str, SearchStrategy[Any]]]
    when: Callable[[MachineBase], bool] | None = None
    only: Callable[[MachineOptions], bool] | None = None
    initialize: bool = False

    def build(self, function: Callable[..., Any], options: MachineOptions) -> Callable[..., Any] | None:
        """``function`` as a Hypothesis rule for ``options``; None if the rule does not exist for them."""
        if self.only is not None and not self.only(options):
            return None
        decorate = cast("_RuleDecorator", initialize if self.initialize else rule)
        made = decorate(**self.arguments(options))(function)
        return made if self.when is None else precondition(self.when)(made)


def machine_rule(
    arguments: Callable[[MachineOptions], dict[str, SearchStrategy[Any]]] = lambda options: {},
    *,
    when: Callable[[MachineBase], bool] | None = None,
    only: Callable[[MachineOptions], bool] | None = None,
    initialize: bool = False,
) -> Callable[[_Function], _Function]:
    """Declare a method as a rule (or, with ``initialize``, an initialize rule) of the machine.

    Args:
        arguments: the rule's strategies, by parameter name, for the options
            the machine is built with.
        when: the rule's precondition (None: always enabled).
        only: for which options the rule exists at all (None: for all).
            Hypothesis picks among the rules a machine has, so a rule that
            exists but is never enabled still shapes the generated runs.
        initialize: an ``@initialize`` rule (runs once, before the others).
    """

    def declare(function: _Function) -> _Function:
        setattr(function, RECIPE_ATTRIBUTE, RuleRecipe(arguments, when, only, initialize))
        return function

    return declare


def is_open(machine: MachineBase) -> bool:
    """The manager has not been shut down."""
    return not machine.s.closed


def manual_worker_up(machine: MachineBase) -> bool:
    """The machine pumps a ManualWorker, and it is alive behind an open manager."""
    return machine.options.manual and is_open(machine) and not machine.s.worker_dead


class MachineBase(RuleBasedStateMachine):
    """Drives a real manager and the reference model side by side (the state the rules share)."""

    #: Set on each assembled machine class by ``lookup_machine``.
    options: ClassVar[MachineOptions]
    #: The effects of the latest run's steps (see ``effects``); replaced per run.
    last_effects: ClassVar[list[bool]]

    def __init__(self) -> None:
        super().__init__()
        options = self.options
        self.target = as_target(options.factory())
        self.stored: set[bytes] = set()
        for key in options.keys:
            self.target.remove(key)
        # The oracle: what the factory's store/remove put in the tier.
        self.backend = ScriptedBackend(
            self.target.backend, oracle=self.stored.__contains__, budget_s=options.budget_s, pool=options.keys
        )
        self.ghosts = GhostRecorder()
        # What the manager (and a ProcessBackend) starts must end at teardown.
        self.lifetimes = Lifetimes(prefix="kvprobe-")
        # The cache only when there is one: a manager class without the
        # option (the vLLM drop-in's) still runs every other machine.
        cache: dict[str, Any] = {} if options.verdict_cache is None else {"verdict_cache": options.verdict_cache}
        self.m = options.manager_class(
            self.backend,
            name="conform",
            worker=options.worker_class(max_stuck_calls=options.max_stuck) if options.manual else "thread",
            lookup_timeout_s=None if options.manual else options.lookup_timeout_s,
            trace=self.ghosts,
            **cache,
        )
        self.m.core.chain_mode = options.chain_mode
        # Inferred mode: the keys given to MarkMiss, whose chains the model walks exactly.
        self.refuted: set[bytes] = set()
        self.s = model.initial()
        #: The time the core's verdict cache reads (the model's ``now``; only ``Tick`` advances it).
        self.now = 0.0
        config, memory = options.verdict_cache, self.m.core.memory
        if config is not None and memory is not None:
            memory.clock = lambda: self.now
            self.s = replace(self.s, cache=CacheSpec(config.max_entries, config.hit_ttl_s, config.miss_ttl_s))
        self.ghosts.bind(self.m.core)
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

    # -- ground truth -------------------------------------------------------------------

    # The same draws as st.sets(...), shown sorted: a set's printed order would
    # follow the keys' hashes, and so change with PYTHONHASHSEED.
    @machine_rule(lambda o: {"stored": st.lists(st.sampled_from(o.keys), unique=True).map(sorted)}, initialize=True)
    def initial_blocks(self, stored: list[bytes]) -> None:
        """The tier's contents when the run starts (so hits happen from the first step)."""
        for key in stored:
            self.target.store(key)
            self.stored.add(key)

    @machine_rule(lambda o: {"key": st.sampled_from(o.keys), "present": st.booleans()}, when=is_open)
    def set_stored(self, key: bytes, present: bool) -> None:
        """Change the ground truth: store or remove the block of ``key``."""
        self._settle_thread()
        if present:
            self.target.store(key)
            self.stored.add(key)
        else:
            self.target.remove(key)
            self.stored.discard(key)

    # -- helpers ------------------------------------------------------------------------

    def _manual_worker(self) -> ManualWorker:
        worker_obj = self.m.worker
        assert isinstance(worker_obj, ManualWorker)
        return worker_obj

    def _expect_call(self, group: model.Group) -> None:
        self.expected_calls.append((group.keys, group.req))

    def _pick(self, index: int, timed_out: bool | None = None) -> ProbeGroup:
        """The taken group ``index`` picks (among those timed out or not, if asked)."""
        gids = sorted(g for g in self.s.taken if timed_out is None or (g in self.s.timed_out) is timed_out)
        gid = gids[index % len(gids)]
        return self._manual_worker().taken[gid]

    def _truth(self, group: model.Group) -> tuple[bool, ...]:
        return tuple(k in self.stored for k in group.keys)

    def _answered(self, group: model.Group, scripted: str | None = None, *, late: bool = False) -> None:
        """The model's action for a group whose backend call just returned: the
        failure the tier's own answer causes, else the scripted one, else the truth.

        A tier that raises or answers other than one bool per key is
        tolerated by the manager (the group fails, its keys resolve as MISS);
        the model is told so, and ``TierAnswersWellFormed`` reports the call.
        """
        tier_failure = self.backend.tier_failure(group.keys, group.req)
        failure = tier_failure.value if tier_failure is not None else scripted and FAILURES[scripted].value
        if failure:
            self.s = model.fail_group(self.s, group.group_id, failure)
        elif late:
            self.s = model.late_answer(self.s, group.group_id, self._truth(group))
        else:
            self.s = model.complete_group(self.s, group.group_id, self._truth(group))

    # -- following the real threaded worker ---------------------------------------------

    def _settle_thread(self) -> None:
        # Ground truth only changes while no backend call can be running.
        if not self.options.manual:
            self._wait_published(len(self.s.inbox))

    def _wait_published(self, count: int) -> None:
        wait_s = self.options.thread_wait_s
        deadline = time.monotonic() + wait_s
        while len(self.m.core.inbox) < count:
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"NothingLeaks: the threaded worker published {len(self.m.core.inbox)} of {count} "
                    f"outcomes within {wait_s} s"
                )
            time.sleep(0.0005)

    def _run_thread_worker(self, groups: tuple[model.Group, ...], fail: str | None) -> None:
        """After a flush: wait for the threaded worker to publish ``groups``, and let
        the model's worker answer them in the order the real one did."""
        if not groups:
            # Nothing was submitted, so the scripted failure did not fire.
            self.backend.mode = "ok"
            return
        self.s, _ = model.take_batch(self.s)
        for group in groups:
            self._expect_call(group)
        self._wait_published(len(self.s.inbox) + len(groups))
        # Groups run concurrently and publish as they finish.
        published = [o.group.group_id for o in list(self.m.core.inbox)[-len(groups) :]]
        by_id = {group.group_id: group for group in groups}
        assert sorted(published) == sorted(by_id), f"published {published}, submitted {sorted(by_id)}"
        for gid in published:
            group = by_id[gid]
            if group is groups[0] and fail == "hang":
                self.s = model.time_out(self.s, gid)
                self.hung = group
            else:
                self._answered(group, fail if group is groups[0] else None)
        self.backend.mode_for = None
