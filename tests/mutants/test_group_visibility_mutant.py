"""The group-visibility tests catch a worker that publishes groups together (issue 29).

The mutant ``groups-published-together`` is the threaded worker with one
rule changed: the outcome of a call that returned is held back while any
other call is still running, and everything held is published together once
none runs.  So a fast group's verdicts wait for the slowest group running
beside it (of its own batch or an earlier one).  It loses nothing and
answers every group; the issue reports that such a variant passed the fast
suite, the property suite and the fault matrix.

The scenario of ``tests/faults/test_group_visibility.py`` (in
``tests/faults/slow_group.py``) must fail on the mutant with
:class:`~slow_group.HeldBack` (the fast call returned, its verdicts stayed
invisible while the slow call ran), and pass on the real worker built with
the same arguments.

The mutant changes only what the worker's public ``start(backend, publish)``
is given: a backend wrapper that counts the calls running and a publish
that holds outcomes back; it reaches no private name of the worker.  One
consequence: under a traced manager it logs no worker events (the publish
it hands the worker is not the traced inbox's), so it is not a mutant for
trace validation.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "faults"))  # the scenario, and the helpers' backends

from fault_harness import VERDICT_BOUND_S, finish
from slow_group import (
    FAST,
    GATES,
    SLOW,
    HeldBack,
    Tier,
    fast_group_seen_while_slow_runs,
    poll_verdicts,
    process_tier,
    serving,
    thread_tier,
)

from kvprobe.backends import Backend
from kvprobe.statemachine import FailureKind, GroupOutcome, ReqContext, ThreadedWorker

#: Outcomes that are not the answer of a call that returned: the dispatcher's
#: own (a timeout, saturation, its death, its machinery failing).  The mutant
#: publishes these at once: the issue's variant collects "the calls that
#: returned in time".
NOT_A_RETURNED_CALL = frozenset(
    {FailureKind.TIMEOUT, FailureKind.SATURATED, FailureKind.WORKER_DIED, FailureKind.WORKER_ERROR}
)

#: How long the mutant's scenario waits for the fast verdicts once the fast
#: call has returned.  Any bound catches the mutant (it publishes nothing
#: before the slow call returns, which the scenario lets it do only after);
#: the bound only keeps the failing run short.
MUTANT_SEEN_WITHIN_S = 2.0


class _PublishedWhenIdle:
    """The mutant's backend and publish: counts the calls inside the backend; holds answers while any runs."""

    def __init__(self, backend: Backend, publish: Callable[[GroupOutcome], None]) -> None:
        self.inner = backend
        self._publish = publish
        self._lock = threading.Lock()
        self._running = 0
        self._held: list[GroupOutcome] = []

    def batch_lookup(self, keys: Sequence[bytes], req_context: object) -> Any:
        with self._lock:
            self._running += 1
        try:
            return self.inner.batch_lookup(keys, req_context)
        finally:
            with self._lock:
                self._running -= 1

    def publish(self, outcome: GroupOutcome) -> None:
        with self._lock:
            # MUTANT: a returned call's outcome waits while another call runs;
            # the last call to return publishes everything held, in order.
            if self._running and outcome.failure not in NOT_A_RETURNED_CALL:
                self._held.append(outcome)
                return
            ready, self._held = [*self._held, outcome], []
            for each in ready:
                self._publish(each)

    def __getattr__(self, name: str) -> Any:
        if name == "inner":  # not set yet: no recursion
            raise AttributeError(name)
        return getattr(self.inner, name)  # fit_concurrency, cpu_seconds_of: the backend's own


class PublishedTogether(ThreadedWorker):
    """The threaded worker, mutant ``groups-published-together`` (module docstring)."""

    def start(self, backend: Backend, publish: Callable[[GroupOutcome], None]) -> None:
        together = _PublishedWhenIdle(backend, publish)
        super().start(together, together.publish)


def _tier(kind: str, root: Path) -> Tier:
    root.mkdir()
    return thread_tier() if kind == "thread" else process_tier(root)


@pytest.mark.parametrize("kind", ["thread", "process"])
@pytest.mark.parametrize("gate", list(GATES))
@pytest.mark.parametrize("same_batch", [True, False], ids=["same-batch", "earlier-batch"])
def test_the_scenario_fails_on_the_mutant_and_passes_on_the_real_worker(
    kind: str, gate: str, same_batch: bool, tmp_path: Path
) -> None:
    tier = _tier(kind, tmp_path / "mutant")
    with pytest.raises(HeldBack, match="not visible"), serving(tier, PublishedTogether(**GATES[gate])) as m:
        fast_group_seen_while_slow_runs(m, tier, same_batch=same_batch, seen_within_s=MUTANT_SEEN_WITHIN_S)
    tier = _tier(kind, tmp_path / "real")
    with serving(tier, ThreadedWorker(**GATES[gate])) as m:
        fast_group_seen_while_slow_runs(m, tier, same_batch=same_batch)


def test_the_mutant_delays_verdicts_but_delivers_every_one() -> None:
    # A worker that lost the fast verdicts would fail the scenario too; this
    # one loses nothing, it only delays: once the slow call returns, both
    # groups' verdicts arrive.  Only the visibility tests tell it apart.
    tier = thread_tier()
    wants = {SLOW: tier.slow_keys, FAST: tier.fast_keys}
    with serving(tier, PublishedTogether()) as m:
        for req, wanted in wants.items():
            assert [m.lookup(k, ReqContext(req)) for k in wanted] == [None] * len(wanted)
        m.flush()
        tier.backend.wait_until(lambda: FAST in tier.backend.returned, "the fast call returned")
        tier.release()
        for req, wanted in wants.items():
            assert poll_verdicts(m, wanted, ReqContext(req), VERDICT_BOUND_S) == tier.truth(wanted), req
        assert finish(m, list(wants)) == 0
