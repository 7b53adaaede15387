"""The factory: :func:`lookup_machine` assembles a machine from the rule groups for its options.

The rule groups are classes over :class:`~.base.MachineBase`: the scheduler's
actions (:mod:`.scheduler`), the worker's (:mod:`.worker`), the faults
(:mod:`.faults`), the multi-action steps (:mod:`.sequences`) and the checks
(:mod:`.checks`).  Their rules are declared with
:func:`~.base.machine_rule`; this module turns each declaration into a
Hypothesis rule with the strategies, precondition and existence the options
give it, and makes one ``RuleBasedStateMachine`` class of them.

Hypothesis orders a machine's rules by name, so the rule groups' order here
does not change which runs are generated; which rules exist does.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, cast

from hypothesis.stateful import RuleBasedStateMachine

from kvprobe.statemachine import AsyncLookupManager, ManualWorker, VerdictCache
from kvprobe.statemachine.inferred import chain_mode_name
from kvprobe.statemachine.windows import chain_window_size
from kvprobe.testing.stateful.base import RECIPE_ATTRIBUTE, MachineOptions, RuleRecipe
from kvprobe.testing.stateful.checks import Checks
from kvprobe.testing.stateful.faults import Faults
from kvprobe.testing.stateful.sequences import Sequences
from kvprobe.testing.stateful.tier import KEYS, REQS, memory_factory

__all__ = ["LookupMachineBase", "lookup_machine"]


class LookupMachineBase(Sequences, Faults, Checks):
    """Every rule group, before the options turn their declarations into rules."""


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
    chain_mode: str = "exact",
    verdict_cache: VerdictCache | None = None,
    chain_walks: bool = True,
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
            opens at the second key; with 2, a miss can precede a key of
            its own window.
        chain_mode: how the manager's ``lookup_chain`` walks, set on its
            core: ``"exact"``, or ``"inferred"`` (the search of
            :mod:`kvprobe.statemachine.inferred`, against the model's
            :func:`~kvprobe.spec.model_chain.lookup_chain_inferred`).
        verdict_cache: the manager's verdict cache (docs/cache.md), its
            clock driven by the ``Tick`` rule (which exists only then) and
            its memory compared with the model's; None (default): no cache.
        chain_walks: whether a scheduler step may walk a chain with
            ``lookup_chain`` (default); False: single lookups only.

    Raises:
        ValueError: ``worker`` is neither ``"manual"`` nor ``"thread"``, or
            ``max_stuck`` is not a positive int.
        InvalidInputError, InvalidValueError: one of ``chain_windows`` is a
            window the manager would refuse, or ``chain_mode`` a mode it
            would refuse.
    """
    if worker not in ("manual", "thread"):
        raise ValueError(f"worker must be 'manual' or 'thread', got {worker!r}")
    if isinstance(max_stuck, bool) or not isinstance(max_stuck, int) or max_stuck < 1:
        raise ValueError(f"max_stuck must be an int of at least 1, got {max_stuck!r}")
    options = MachineOptions(
        manager_class=manager_class,
        worker=worker,
        worker_class=worker_class,
        factory=factory,
        thread_wait_s=thread_wait_s,
        lookup_timeout_s=lookup_timeout_s,
        keys=tuple(keys),
        reqs=tuple(reqs),
        round_trips=round_trips,
        budget_s=budget_s,
        max_stuck=max_stuck,
        chain_windows=() if chain_windows is None else tuple(chain_window_size(w) for w in chain_windows),
        chain_mode=chain_mode_name(chain_mode),
        verdict_cache=verdict_cache,
        chain_walks=chain_walks,
    )
    name = f"LookupMachine_{manager_class.__name__}_{worker}"
    namespace: dict[str, Any] = {"options": options, "last_effects": [], "__qualname__": name}
    namespace.update(_rules_for(options))
    # Hypothesis picks uniformly among the enabled rules: each copy of RoundTrip adds weight.
    for copy in range(2, round_trips + 1):
        namespace[f"RoundTrip{copy}"] = namespace["RoundTrip"]
    metaclass: Any = type(LookupMachineBase)  # Hypothesis's, which the assembled class keeps
    return cast("type[RuleBasedStateMachine]", metaclass(name, (LookupMachineBase,), namespace))


def _rules_for(options: MachineOptions) -> dict[str, Callable[..., Any]]:
    """Every declared rule of the groups that exists for ``options``, as a Hypothesis rule, by name."""
    rules: dict[str, Callable[..., Any]] = {}
    for group in reversed(LookupMachineBase.__mro__):  # a subclass's declaration overrides its base's
        for attribute, value in vars(group).items():
            recipe = getattr(value, RECIPE_ATTRIBUTE, None)
            if isinstance(recipe, RuleRecipe):
                built = recipe.build(value, options)
                if built is None:
                    rules.pop(attribute, None)
                else:
                    rules[attribute] = built
    return rules
