"""ProcessBackend: a fault in a helper, through a manager and at the caller, costs a verdict, never the service.

``ProcessBackend`` runs a backend in spawned helper processes and forwards
each ``batch_lookup`` over a pipe, so it adds failures a backend in the
manager's own process cannot have: the helper can die mid-call, hang, be
busy, fail to start, or raise something that does not survive pickling.
Its contract (``backends/process.py``) says what the caller sees in each
case, and that the next call gets a working helper again.  This file holds
it to that with real ``spawn`` helpers and nothing mocked:

* each fault raised in the helper, through an ``AsyncLookupManager``,
  resolves the group as MISS, is counted, and the same manager then gives a
  stored key a true verdict (the rows of docs/reliability.md);
* a helper that dies or overstays ``call_timeout_s`` is killed and replaced,
  and ``max_procs`` fails a call at once instead of queueing.

The other topics have a file each: the verdicts and the helpers' priority
(``test_process_backend_verdicts.py``), the backend's errors as the caller
sees them (``..._errors.py``), construction and bad input (``..._limits.py``)
and closing (``..._close.py``); what they share is
``process_backend_harness.py``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from fault_harness import Reliability, counters, drive, finish, keys, process_alive, still_serves
from helper_backends import marker

# The *_fixture names register the module-scoped fixtures tier, fs_helper, scripted.
from process_backend_harness import (
    BOUND_S,
    Background,
    Tier,
    logged_calls,
    own_backend,
    scripted_fixture as scripted_fixture,
    tier_fixture as tier_fixture,
    wait_until,
)

from kvprobe.backends import HelperProcessError, ProcessBackend
from kvprobe.statemachine import AsyncLookupManager, FailureKind

# --- the same faults through the manager ---------------------------------------------------


@dataclass(frozen=True)
class ManagerCase:
    name: str
    marker: bytes
    kind: FailureKind
    kills_helper: bool = False
    call_timeout_s: float | None = None


MANAGER_CASES = [
    ManagerCase("backend raises OSError", marker("oserror"), FailureKind.RAISED),
    ManagerCase("backend raises an unpicklable exception", marker("unpicklable"), FailureKind.RAISED),
    ManagerCase("backend raises while its answer is iterated", marker("raise_iter"), FailureKind.RAISED),
    # ProcessBackend itself raises TypeError for a non-bool: RAISED, not BAD_VERDICT.
    ManagerCase("backend answers a non-bool verdict", marker("non_bool"), FailureKind.RAISED),
    ManagerCase("backend answers short", marker("short"), FailureKind.SHORT_RESULT),
    ManagerCase("backend answers long", marker("long"), FailureKind.LONG_RESULT),
    ManagerCase("helper exits mid-call (code 3)", marker("exit", 3), FailureKind.RAISED, kills_helper=True),
    ManagerCase("helper killed by SIGKILL mid-call", marker("sigkill"), FailureKind.RAISED, kills_helper=True),
    ManagerCase(
        "helper hangs past call_timeout_s=2",
        marker("sleep", 600),
        FailureKind.RAISED,
        kills_helper=True,
        call_timeout_s=2.0,
    ),
]


@pytest.mark.parametrize("case", MANAGER_CASES, ids=[c.name for c in MANAGER_CASES])
def test_a_fault_in_the_helper_is_a_counted_miss_and_the_manager_keeps_serving(
    case: ManagerCase, tier: Tier, scripted: ProcessBackend, reliability: Reliability
) -> None:
    tag = "-".join(case.name.split())
    stored = tier.fresh(f"mgr-{tag}", 3)
    healthy = tier.fresh(f"mgr-healthy-{tag}", 1)
    # Two requests, one batch, two groups: only the group with the marker fails.
    wants = {"faulty": [*stored, case.marker, *keys(f"mgr-absent-{tag}", 2)], "healthy": healthy}
    backend = own_backend(tier, call_timeout_s=case.call_timeout_s) if case.kills_helper else scripted
    try:
        with AsyncLookupManager(backend) as m:
            result = drive(m, wants)
            assert [result.of("faulty", k) for k in wants["faulty"]] == [False] * 6, "a failed group must be a MISS"
            assert result.of("healthy", healthy[0]) is True
            stats = m.stats
            assert stats.backend_errors == 1
            assert stats.failures == {case.kind.value: 1}
            assert stats.hits == 1
            leaked = finish(m, list(wants))
            assert leaked == 0
            still_serves(m, tier.writer.store, key=keys(f"mgr-fresh-{tag}", 1)[0])
            reliability.record(
                case.name,
                "FsBackend in a ProcessBackend",
                delivered=len(result.verdicts),
                asked=7,
                seconds=result.seconds,
                leaked=leaked,
                counters=counters(m, "backend_errors"),
            )
    finally:
        if backend is not scripted:
            backend.close()


def test_a_helper_stuck_past_the_managers_timeout_leaves_a_second_helper_serving(tier: Tier, tmp_path: Path) -> None:
    # The reason max_procs defaults to 2: the manager runs the next call while
    # an earlier one is stuck past lookup_timeout_s; it must get its own helper.
    release = tmp_path / "release"
    stored = tier.fresh("stuck-mgr", 1)
    with own_backend(tier, max_procs=2) as backend, AsyncLookupManager(backend, lookup_timeout_s=2.0) as m:
        result = drive(m, {"stuck": [*stored, marker("wait", release)]})
        assert result.values == [False, False]
        assert m.stats.timeouts == 1 and m.stats.failures == {"timeout": 1}
        assert finish(m, ["stuck"]) == 0
        assert backend.pids == []  # the only helper is still in the stuck call
        still_serves(m, tier.writer.store, key=keys("stuck-mgr-fresh", 1)[0])
        assert len(backend.pids) == 1  # a second helper served it
        release.touch()
        deadline = time.monotonic() + BOUND_S
        while m.stats.late_results < 1 and time.monotonic() < deadline:
            m.drain_results()
            time.sleep(0.005)
        assert m.stats.late_results == 1
        assert m.stats.backend_errors == 0 and len(m) == 0
        wait_until(lambda: len(backend.pids) == 2, "both helpers idle again")


# --- helpers that die, hang, or are all busy ----------------------------------------------


@pytest.mark.parametrize(("mode", "exit_code"), [(marker("exit", 3), 3), (marker("sigkill"), -9)], ids=["exit", "kill"])
def test_a_helper_that_dies_mid_call_is_named_and_replaced(tier: Tier, mode: bytes, exit_code: int) -> None:
    with own_backend(tier, max_procs=1) as backend:
        [first] = backend.pids
        with pytest.raises(HelperProcessError, match=rf"helper process {first} .*\(exit code {exit_code}\)"):
            backend.batch_lookup([tier.stored[1], mode], None)
        assert not process_alive(first)
        assert backend.pids == []  # the dead helper is not put back
        assert backend.batch_lookup([tier.stored[1], tier.absent[1]], None) == [True, False]
        [second] = backend.pids
        assert second != first and process_alive(second)


def test_a_call_past_call_timeout_kills_its_helper_and_the_next_call_works(tier: Tier) -> None:
    with own_backend(tier, max_procs=1, call_timeout_s=0.5) as backend:
        [first] = backend.pids
        calls_before = len(logged_calls(tier.log))
        # The helper would sleep 600 s; raising at all means the timeout fired.
        with pytest.raises(HelperProcessError, match=r"call_timeout_s=0\.5"):
            backend.batch_lookup([tier.stored[1], marker("sleep", 600)], None)
        assert (first, 2) in logged_calls(tier.log)[calls_before:], "the call never reached the helper"
        assert not process_alive(first), "the hung helper was left running"
        assert backend.batch_lookup([tier.stored[1], tier.absent[1]], None) == [True, False]
        [second] = backend.pids
        assert second != first


def test_max_procs_busy_fails_at_once_and_service_resumes(tier: Tier, tmp_path: Path) -> None:
    release = tmp_path / "release"
    with own_backend(tier, max_procs=1) as backend:
        [helper] = backend.pids
        stuck = Background(lambda: backend.batch_lookup([tier.stored[1], marker("wait", release)], None))
        wait_until(lambda: backend.pids == [], "the stuck call took the helper")
        # Not queued behind the stuck call (which waits for `release` up to
        # 30 s, so a queued call would return instead of raising).
        with pytest.raises(RuntimeError, match="busy") as info:
            backend.batch_lookup([tier.stored[1]], None)
        assert not isinstance(info.value, HelperProcessError)
        release.touch()
        stuck.join()
        assert stuck.error is None and stuck.result == [True, False]
        assert backend.batch_lookup([tier.stored[1], tier.absent[1]], None) == [True, False]
        assert backend.pids == [helper]  # the same helper: busy is not broken
