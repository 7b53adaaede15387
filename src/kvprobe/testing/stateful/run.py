"""Running the machine on a factory's tier, as ``kvprobe conform`` does: :func:`run_conformance`.

Two promises of ``kvprobe conform`` are kept here.  A seed reproduces the
same report: the shrinking is bounded by a number of runs, not by seconds
(a time bound ends it wherever the machine's load left it).  Nothing is
left in the user's directory: Hypothesis's caches go to a temporary
directory, removed at the end.
"""

from __future__ import annotations

import math
import random
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import hypothesis
from hypothesis import Phase, settings
from hypothesis.configuration import set_hypothesis_home_dir, storage_directory
from hypothesis.reporting import with_reporter
from hypothesis.stateful import RuleBasedStateMachine, RuleStrategy, get_state_machine_test

from kvprobe.statemachine import AsyncLookupManager
from kvprobe.testing.search import search_settings
from kvprobe.testing.stateful.machine import lookup_machine
from kvprobe.testing.stateful.report import failure_report
from kvprobe.testing.stateful.tier import KEYS, as_target

__all__ = ["SHRINK_RUNS", "SHRINK_SECONDS", "ConformanceResult", "run_conformance"]


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


#: How many runs the shrinking of a failure may make before the smallest
#: failing run found so far is reported.  A count, not a time, so that a seed
#: reproduces the same report on any machine under any load.
SHRINK_RUNS = 500

#: A wall-clock bound on the shrinking, for a tier so slow that
#: ``SHRINK_RUNS`` runs would take minutes.  When it ends the shrinking, the
#: report says so: another run may then stop elsewhere.
SHRINK_SECONDS = 60.0


class _Runs:
    """The factory each run calls: counts the runs, and ends the shrinking at its bounds.

    Hypothesis bounds the shrinking by time only (and reads the clock after
    each run); once the shrinking has made ``shrink_runs`` runs or taken
    ``shrink_seconds``, the next run moves its engine's deadline into the
    past, so the engine stops after that run and reports the smallest
    failing run found so far.  The runs themselves are never changed.
    """

    def __init__(
        self,
        factory: Callable[[], object],
        shrink_runs: int,
        shrink_seconds: float,
        on_run: Callable[[int], None] | None,
    ) -> None:
        self.factory = factory
        self.shrink_runs = shrink_runs
        self.shrink_seconds = shrink_seconds
        self.on_run = on_run
        self.runs = 0
        #: The shrinking engine, and the runs made and the time when it started.
        self.shrinking: tuple[Any, int, float] | None = None
        #: Why the shrinking was ended early: "runs", "seconds", or "" (it finished).
        self.cut = ""

    def __call__(self) -> object:
        if self.shrinking is not None and not self.cut:
            engine, runs_before, started = self.shrinking
            if self.runs - runs_before >= self.shrink_runs:
                self.cut = "runs"
            elif time.monotonic() - started > self.shrink_seconds:
                self.cut = "seconds"
            if self.cut:
                engine.finish_shrinking_deadline = -math.inf
        self.runs += 1
        if self.on_run is not None:
            self.on_run(self.runs)
        return self.factory()

    @contextmanager
    def watching_the_shrinking(self) -> Iterator[None]:
        """While the block runs, note when Hypothesis's engine starts shrinking (and which engine).

        Hypothesis has no public hook for this; if a future version renames
        the method, the runs work unchanged, with Hypothesis's own bound.
        """
        from hypothesis.internal.conjecture.engine import ConjectureRunner

        original = getattr(ConjectureRunner, "shrink_interesting_test_cases", None)
        if original is None:
            yield
            return

        def shrink(engine: Any) -> None:
            self.shrinking = (engine, self.runs, time.monotonic())
            original(engine)

        setattr(ConjectureRunner, "shrink_interesting_test_cases", shrink)  # noqa: B010 (a method, typed by its class)
        try:
            yield
        finally:
            setattr(ConjectureRunner, "shrink_interesting_test_cases", original)  # noqa: B010
            # The machine class keeps this factory (as its options' factory), and
            # Hypothesis keeps every machine class for the life of the process
            # (RuleBasedStateMachine._setup_state_per_class): a kept engine would
            # keep every run's choices, and the failures with their tracebacks.
            self.shrinking = None

    def note(self) -> str:
        """A line for the report when a bound ended the shrinking (else empty)."""
        if self.cut == "runs":
            return f"(shrinking stopped after {self.shrink_runs} runs: a smaller failing run may exist)"
        if self.cut == "seconds":
            return f"(shrinking stopped after {self.shrink_seconds:g} s: another run may stop elsewhere)"
        return ""


@contextmanager
def _scratch_storage() -> Iterator[None]:
    """Hypothesis's on-disk caches (e.g. the constants it collects from the
    code under test) go to a temporary directory, not ``./.hypothesis``."""
    previous = storage_directory(intent_to_write=False).home_directory
    with tempfile.TemporaryDirectory(prefix="kvprobe-conform-") as scratch:
        set_hypothesis_home_dir(scratch)
        try:
            yield
        finally:
            set_hypothesis_home_dir(previous)


@contextmanager
def _forgotten_after(machine: type[RuleBasedStateMachine]) -> Iterator[None]:
    """After the block, Hypothesis's caches keyed by ``machine`` no longer hold it.

    Hypothesis keeps, for the life of the process, a table of every state
    machine class it has run (``RuleBasedStateMachine._setup_state_per_class``)
    and, in an LRU cache, the rules strategy of the last 128
    (``RuleStrategy._setup_for``).  Each conformance run makes a class of its
    own, holding the run's factory and options: without this, every run
    (every ``kvprobe conform`` of a test suite) would leave its class, rules
    and strategies behind.  The LRU cache cannot drop one key, so it is
    cleared (it is only a cache: other machines rebuild their entry on their
    next run).  Both are private: if a Hypothesis version renames them,
    nothing is dropped and the runs are unchanged.
    """
    try:
        yield
    finally:
        per_class = getattr(RuleBasedStateMachine, "_setup_state_per_class", None)
        if isinstance(per_class, dict):
            per_class.pop(machine, None)
        cache_clear = getattr(getattr(RuleStrategy, "_setup_for", None), "cache_clear", None)
        if callable(cache_clear):
            cache_clear()


def _settings(examples: int, steps: int, derandomize: bool, shrink: bool) -> settings:
    # The suites' search (no database, no deadline, no health checks), seeded
    # here, reporting one failure, and shrinking it unless asked not to.
    # No explain phase: it re-runs the failure many times to annotate lines.
    phases = (Phase.explicit, Phase.generate, Phase.target, *((Phase.shrink,) if shrink else ()))
    return settings(
        search_settings(examples, steps), derandomize=derandomize, report_multiple_bugs=False, phases=phases
    )


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
    shrink_runs: int = SHRINK_RUNS,
    manager_class: type[AsyncLookupManager] = AsyncLookupManager,
) -> ConformanceResult:
    """Run the machine against ``factory``'s backend; never raises for a failed run.

    Writes nothing to the current directory.  The same ``seed`` (or
    ``derandomize``) gives the same report, whatever ``PYTHONHASHSEED`` is,
    unless the ``shrink_seconds`` bound ended the shrinking (the report
    then says so).

    Args:
        factory: returns a fresh tier and its ground truth (see :func:`as_target`).
        examples: generated runs at most (the first failure stops the search).
        steps: steps per run at most.
        worker: ``"manual"`` or ``"thread"`` (see :func:`lookup_machine`).
        derandomize: the same examples on every call (for CI); overrides ``seed``.
        shrink: minimise the failing run (bounded by ``shrink_runs`` and ``shrink_seconds``).
        seed: generate from this seed (a run's reported seed reproduces it);
            None and not derandomized: a fresh random seed, reported.
        timeout_s: a backend call slower than this fails the run; None: no bound.
        shrink_seconds: the most time the shrinking takes (for slow tiers).
        round_trips: weight of the ``RoundTrip`` rule (see :func:`lookup_machine`).
        on_run: called with the number of runs started so far, as each starts
            (for a progress display).
        shrink_runs: the most runs the shrinking makes.
        manager_class: the manager driven (a subclass, e.g. a test suite's
            mutant, to see what the report says when kvprobe is at fault).

    Raises:
        TypeError: the factory's first result is not a usable target (the
            run could not start).  Other errors of the factory's first call
            propagate unchanged, and so does the error of its tier's
            ``fit_deadline(timeout_s)`` (a timeout the tier refuses).
    """
    made = as_target(factory())  # fail early, with a clear message, if the factory is unusable
    try:
        fit_deadline = getattr(made.backend, "fit_deadline", None)
        if timeout_s is not None and callable(fit_deadline):
            fit_deadline(timeout_s)  # a timeout the tier refuses is the caller's error, not a failing run
    finally:
        if made.close is not None:
            made.close()
    runs = _Runs(factory, shrink_runs, shrink_seconds, on_run)
    machine = lookup_machine(
        manager_class=manager_class, factory=runs, worker=worker, round_trips=round_trips, budget_s=timeout_s
    )
    if derandomize:
        seed = None
    elif seed is None:
        seed = random.getrandbits(32)
    # run_state_machine_as_test takes no seed: build the same test and seed it.
    test = get_state_machine_test(machine, settings=_settings(examples, steps, derandomize, shrink))
    if seed is not None:
        test = hypothesis.seed(seed)(test)
    lines: list[str] = []
    start = time.monotonic()
    try:
        with (
            _forgotten_after(machine),
            with_reporter(lambda text: lines.append(str(text))),
            runs.watching_the_shrinking(),
            _scratch_storage(),
        ):
            test()
    except Exception as exc:
        report = failure_report(exc, lines, KEYS, getattr(machine, "last_effects", None))
        if runs.note():
            report += "\n" + runs.note()
        return ConformanceResult(False, examples, time.monotonic() - start, worker, report, seed, runs.runs)
    return ConformanceResult(True, examples, time.monotonic() - start, worker, "", seed, runs.runs)
