"""Running the machine on a factory's tier, as ``kvprobe conform`` does: :func:`run_conformance`."""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import hypothesis
from hypothesis import HealthCheck, Phase, settings
from hypothesis.reporting import with_reporter
from hypothesis.stateful import get_state_machine_test

from kvprobe.testing.stateful.machine import lookup_machine
from kvprobe.testing.stateful.report import failure_report
from kvprobe.testing.stateful.tier import KEYS, as_target

__all__ = ["SHRINK_SECONDS", "ConformanceResult", "run_conformance"]


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
