"""The drop-in follows vLLM 0.33's contract where kvprobe's own manager is stricter.

vLLM 0.33 (``vllm/v1/kv_offload/tiering/async_lookup.py``, its docstrings and
its tier tests): calls serialized by the offloading manager's lock come from
the scheduler's thread and the tier-poll thread; ``mark_miss`` skips a key
whose entry is a probe still PENDING or IN_FLIGHT; ``shutdown`` waits for the
batches already handed to its thread, applies them, and lookups still answer
afterwards; one ``batch_lookup`` runs at a time; ``drain_results`` returns
None; ``LookupPhase`` and ``LookupState`` live beside the class.  Also the
read-only test-compatibility views of the private fields vLLM's tier tests
poll.  Every test here reaches the drop-in through vLLM's public surface (or
those views), as a vLLM tier does.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from vllm_harness import SetTier, hold_in_flight, settle

import kvprobe.integrations.vllm.manager as dropin_module
from kvprobe.integrations.vllm import LookupPhase, LookupState
from kvprobe.statemachine import ManagerClosedError, ReqContext, WrongThreadError
from kvprobe.statemachine.types import InvalidInputError

A, B, C, D = (bytes([i]) * 16 + i.to_bytes(4, "big") for i in range(1, 5))
R1, R2 = ReqContext("r1"), ReqContext("r2")


@pytest.fixture
def tier() -> Any:
    t = SetTier(stored={A, C})
    yield t
    if t.gate is not None:
        t.gate.set()
    t.shutdown()


def on_another_thread(call: Any) -> Any:
    """Run ``call`` on a fresh thread (as vLLM's tier-poll thread would, holding the lock); its result or error."""
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["value"] = call()
        except BaseException as exc:
            outcome["error"] = exc

    thread = threading.Thread(target=run, name="vllm_offload_tier_poll")
    thread.start()
    thread.join(10)
    assert not thread.is_alive()
    if "error" in outcome:
        raise outcome["error"]
    return outcome.get("value")


# --- threads ------------------------------------------------------------------------


def test_calls_serialized_by_a_lock_may_come_from_two_threads(tier: SetTier) -> None:
    lock = threading.Lock()  # vLLM's offloading manager lock

    def locked(call: Any) -> Any:
        with lock:
            return call()

    locked(lambda: tier.lookup(A, R1))
    locked(tier.flush)  # the scheduler's thread
    settle(tier)
    assert on_another_thread(lambda: locked(lambda: tier.lookup(A, R2))) is True
    on_another_thread(lambda: locked(lambda: tier.lookup(B, R2)))
    on_another_thread(lambda: locked(tier.flush))
    settle(tier)
    assert on_another_thread(lambda: locked(lambda: tier.lookup(B, R2))) is False
    on_another_thread(lambda: locked(lambda: tier.mark_miss([A])))
    on_another_thread(lambda: locked(tier.drain_results))
    on_another_thread(lambda: locked(lambda: tier.cleanup("r2")))
    assert locked(lambda: tier.lookup(A, R1)) is False
    locked(lambda: tier.cleanup("r1"))
    assert len(tier) == 0


@pytest.mark.parametrize("checked", [False, True], ids=["plain", "checked"])
def test_single_thread_restores_kvprobes_owner_check(checked: bool) -> None:
    t = SetTier(stored={A}, single_thread=True, checked=checked)
    try:
        t.lookup(A, R1)
        t.flush()
        for call in (t.flush, t.drain_results, lambda: t.cleanup("r1"), lambda: t.mark_miss([A])):
            with pytest.raises(WrongThreadError):
                on_another_thread(call)
        if checked:  # the hot path is checked only in checked mode
            with pytest.raises(WrongThreadError):
                on_another_thread(lambda: t.lookup(A, R2))
    finally:
        t.shutdown()


def test_checked_mode_without_single_thread_accepts_a_second_thread() -> None:
    t = SetTier(stored={A}, checked=True)
    try:
        t.lookup(A, R1)
        t.flush()
        settle(t)
        assert on_another_thread(lambda: t.lookup(A, R2)) is True
        on_another_thread(lambda: t.cleanup("r2"))
        assert t.lookup(A, R1) is True
    finally:
        t.shutdown()


# --- mark_miss ----------------------------------------------------------------------


@pytest.mark.parametrize("flushed", [True, False], ids=["in-flight", "pending"])
def test_mark_miss_skips_a_newer_probe_still_unresolved(tier: SetTier, flushed: bool) -> None:
    # Request r1 saw A stored and started loading it; r1 finished; r2 probes A
    # afresh; then r1's load fails.  The failure is about r1's verdict, not r2's probe.
    tier.lookup(A, R1)
    tier.flush()
    settle(tier)
    assert tier.lookup(A, R1) is True
    tier.cleanup("r1")
    if flushed:
        hold_in_flight(tier, A, R2)
    else:
        tier.lookup(A, R2)
    tier.mark_miss([A])
    assert tier.lookup(A, R2) is None
    if tier.gate is not None:
        tier.gate.set()
    tier.flush()
    settle(tier)
    assert tier.lookup(A, R2) is True  # r2's own result landed
    assert tier.stats.forced_misses == 0


def test_a_forced_miss_sticks_until_the_state_is_reclaimed(tier: SetTier) -> None:
    tier.lookup(A, R1)
    tier.flush()
    settle(tier)
    tier.mark_miss([A])
    tier.flush()
    settle(tier)
    assert [tier.lookup(A, R1), tier.lookup(A, R2)] == [False, False]
    assert tier.calls == [([A], "r1")]  # no re-probe while the state lives
    tier.cleanup("r1")
    tier.cleanup("r2")
    tier.lookup(A, R1)  # reclaimed: a fresh probe
    tier.flush()
    settle(tier)
    assert tier.lookup(A, R1) is True


# --- shutdown -----------------------------------------------------------------------


def test_shutdown_waits_for_the_submitted_groups_and_applies_them(
    tier: SetTier, monkeypatch: pytest.MonkeyPatch
) -> None:
    release = threading.Event()

    def held(keys: list[bytes]) -> list[bool]:
        release.wait(10)
        return [k in tier.stored for k in keys]

    tier.answer = held
    tier.lookup(A, R1)
    tier.flush()
    tier.lookup(B, R2)
    tier.flush()
    assert len(tier.manager.core.outstanding) == 2
    pause = time.sleep

    def release_once_shutdown_waits(seconds: float) -> None:
        release.set()  # the calls return only once shutdown is waiting for them
        pause(seconds)

    monkeypatch.setattr(dropin_module.time, "sleep", release_once_shutdown_waits)
    tier.shutdown()
    monkeypatch.undo()
    assert [tier.lookup(A, R1), tier.lookup(B, R2)] == [True, False]
    assert tier.manager.closed and not tier.manager.worker.is_alive()


def test_after_shutdown_the_tier_answers_as_vllm_033_does(tier: SetTier) -> None:
    tier.lookup(A, R1)
    tier.lookup(C, R1)
    tier.flush()
    settle(tier)
    tier.shutdown()
    calls = list(tier.calls)
    assert tier.lookup(A, R2) is True  # a verdict known at shutdown
    assert tier.lookup(D, R2) is None  # nothing will probe it
    tier.flush()
    tier.drain_results()
    assert tier.lookup(D, R2) is None and tier.calls == calls
    tier.mark_miss([A, D])  # A has a verdict: False from now on; D has none
    assert [tier.lookup(A, R1), tier.lookup(D, R2)] == [False, None]
    assert len(tier) == 3
    tier.cleanup("r1")  # C forgotten; A still waited on by r2
    assert tier.lookup(C, R2) is None and tier.lookup(A, R2) is False
    tier.cleanup("r2")
    assert len(tier) == 0
    with pytest.raises(InvalidInputError):
        tier.lookup("A", R1)  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError):
        tier.mark_miss(A)
    with pytest.raises(ManagerClosedError):
        tier.lookup_chain([A], R1)  # a kvprobe extra: refused, as by kvprobe's manager


def test_shutdown_gives_up_on_a_hung_call_after_shutdown_timeout_s() -> None:
    t = SetTier(stored={A}, shutdown_timeout_s=0.2)
    gate = hold_in_flight(t, A, R1)
    try:
        t.shutdown()
        assert t.lookup(A, R1) is None  # abandoned: no verdict
    finally:
        gate.set()


# --- one call at a time, names, test-compatibility views ------------------------------


def test_one_batch_lookup_at_a_time_by_default(tier: SetTier) -> None:
    running, most = [0], [0]
    guard = threading.Lock()

    def answer(keys: list[bytes]) -> list[bool]:
        with guard:
            running[0] += 1
            most[0] = max(most[0], running[0])
        time.sleep(0.02)
        with guard:
            running[0] -= 1
        return [k in tier.stored for k in keys]

    tier.answer = answer
    for i, key in enumerate((A, B, C, D)):
        tier.lookup(key, ReqContext(f"r{i}"))
    tier.flush()
    settle(tier)
    assert len(tier.calls) == 4 and most[0] == 1


def test_vllms_names_are_importable_from_the_drop_ins_module() -> None:
    assert dropin_module.LookupPhase is LookupPhase
    assert dropin_module.LookupState is LookupState
    assert [p.name for p in LookupPhase] == ["PENDING", "IN_FLIGHT", "RESOLVED"]
    assert LookupState(generation=3).phase is LookupPhase.PENDING


def test_the_private_field_views_read_kvprobes_table(tier: SetTier) -> None:
    tier.lookup(A, R1)
    assert tier._lookup_batch == [(A, R1, tier._lookup_state[A].generation)]
    assert tier._lookup_state[A] == LookupState(tier._lookup_state[A].generation, LookupPhase.PENDING, None, {"r1"})
    tier.flush()
    assert tier._lookup_batch == []
    settle_without_drain(tier)
    assert not tier._pending_results.empty()
    assert tier.lookup(A, R1) is True  # applies what was published
    assert tier._pending_results.empty()
    state = tier._lookup_state[A]
    assert (state.phase, state.result) == (LookupPhase.RESOLVED, True)
    state.result = False  # a copy: changes nothing
    assert tier.lookup(A, R1) is True
    tier.shutdown()
    assert tier._pending_results.empty() and tier._lookup_batch == []
    assert tier._lookup_state[A].result is True


def test_a_subclass_may_replace_the_pending_results_view() -> None:
    class Replacing(SetTier):
        def __init__(self) -> None:
            super().__init__(stored={A})
            self._pending_results = "its own"  # as vLLM's own tests' subclass does

    t = Replacing()
    try:
        t.lookup(A, R1)
        t.flush()
        settle(t)
        assert t.lookup(A, R1) is True
    finally:
        t.shutdown()


def settle_without_drain(tier: SetTier, timeout_s: float = 10.0) -> None:
    """Wait until the worker published its answer to every submitted group, applying none."""
    core = tier.manager.core
    deadline = time.monotonic() + timeout_s
    while len(core.inbox) < len(core.outstanding):
        if time.monotonic() > deadline:
            raise AssertionError("the worker did not answer")
        time.sleep(0.001)
