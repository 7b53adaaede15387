"""Each documented difference from vLLM 0.33's base, and each agreement where 0.33 fixed an old one.

A *difference* scenario must pass on the drop-in and fail on vLLM's base:
on a stand-in with vLLM 0.33.0's semantics (``vllm_like_base.py``) always,
and on vLLM 0.33.0's own class when the release is installed
(``tests/vllm_release/run.sh``; skipped otherwise).  That second half is
the tests' power: each scenario tells kvprobe's contract from vLLM's
behaviour.  An *agreement* scenario (a behaviour docs/vllm.md no longer
lists because vLLM 0.33 changed it) must pass on all of them.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from vllm_harness import ScriptedTier, hold_in_flight, raise_after, step_verdicts
from vllm_like_base import VllmLikeBase

from kvprobe.integrations.vllm import AsyncLookupManager
from kvprobe.statemachine import ReqContext
from kvprobe.statemachine.types import InvalidInputError

A, B, C = (bytes([i]) * 16 + i.to_bytes(4, "big") for i in range(1, 4))
R1, R2 = ReqContext("r1"), ReqContext("r2")


def _vllms_own_class() -> type | None:
    """vLLM's class, if the release is installed (and not switched to the drop-in in this process)."""
    try:
        from vllm.v1.kv_offload.tiering.async_lookup import AsyncLookupManager as VllmClass
    except ImportError:
        return None
    assert not issubclass(VllmClass, AsyncLookupManager), "vLLM's module was switched to the drop-in before this test"
    return VllmClass


VLLM_CLASS = _vllms_own_class()


def vllm_base(name: str) -> type:
    """The base a vLLM-side test runs on: the stand-in, or vLLM 0.33's own class (skipped without vLLM)."""
    if name == "stand-in":
        return VllmLikeBase
    if VLLM_CLASS is None:
        if os.environ.get("KVPROBE_REQUIRE_VLLM") == "1":
            pytest.fail("vLLM is required here (KVPROBE_REQUIRE_VLLM=1) and does not import")
        pytest.skip("needs vLLM 0.33: tests/vllm_release/run.sh")
    return VLLM_CLASS


def tier_on(base: type) -> Any:
    """A set-backed tier subclassing ``base``; ``answer`` and ``gate`` script its calls."""
    return type("Tier", (ScriptedTier, base), {})("diff", stored={A, C})


def close(tier: Any) -> None:
    """Release held calls and shut down (vLLM's base may assert on a strange table: not this test's business)."""
    if tier.gate is not None:
        tier.gate.set()
    with contextlib.suppress(AssertionError):
        tier.shutdown()


#: How long the scheduler loop waits for verdicts (far above what a loaded machine needs).
STEP_BUDGET_S = 5.0


def run_steps(tier: Any, keys: list[bytes], ctx: ReqContext, seconds: float = STEP_BUDGET_S) -> list[bool | None]:
    """The scheduler loop: look up, flush, let the step pass; until every verdict is known or time is up."""
    deadline = time.monotonic() + seconds
    while True:
        verdicts = [tier.lookup(k, ctx) for k in keys]
        if None not in verdicts or time.monotonic() > deadline:
            return verdicts
        tier.flush()
        time.sleep(0.005)


# --- differences: the drop-in passes, vLLM 0.33's base fails --------------------------


def short_result(tier: Any) -> None:
    tier.answer = lambda keys: [True] * (len(keys) - 1)
    assert run_steps(tier, [A, B, C], R1) == [False, False, False]


def long_result(tier: Any) -> None:
    tier.answer = lambda keys: [True] * (len(keys) + 1)
    assert run_steps(tier, [A, B], R1) == [False, False]


def non_bool_result(tier: Any) -> None:
    tier.answer = lambda keys: ["yes"] * len(keys)
    assert run_steps(tier, [A], R1) == [False]


def a_finished_group_is_not_held_back_by_a_slow_one_of_the_same_step(tier: Any) -> None:
    tier.gate, tier.gated_keys = threading.Event(), {A}
    tier.lookup(B, R1)  # r1's group is called first and returns at once
    tier.lookup(A, R2)  # r2's group is held
    tier.flush()
    assert run_steps(tier, [B], R1) == [False]


def a_probe_is_submitted_under_a_request_still_waiting_on_it(tier: Any) -> None:
    tier.lookup(A, R1)
    tier.lookup(A, R2)
    tier.cleanup("r1")
    assert run_steps(tier, [A], R2) == [True]
    assert tier.calls == [([A], "r2")]


def a_key_that_is_not_bytes_is_refused(tier: Any) -> None:
    with pytest.raises(InvalidInputError):
        tier.lookup("A", R1)


DIFFERENCES = [
    short_result,
    long_result,
    non_bool_result,
    a_finished_group_is_not_held_back_by_a_slow_one_of_the_same_step,
    a_probe_is_submitted_under_a_request_still_waiting_on_it,
    a_key_that_is_not_bytes_is_refused,
]


@pytest.mark.parametrize("scenario", DIFFERENCES, ids=lambda s: s.__name__)
def test_the_drop_in_keeps_kvprobes_contract(scenario: Callable[[Any], None]) -> None:
    tier = tier_on(AsyncLookupManager)
    try:
        scenario(tier)
    finally:
        close(tier)


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
@pytest.mark.parametrize("base", ["stand-in", "vllm-0.33"])
@pytest.mark.parametrize("scenario", DIFFERENCES, ids=lambda s: s.__name__)
def test_vllms_base_fails_the_same_scenario(scenario: Callable[[Any], None], base: str) -> None:
    tier = tier_on(vllm_base(base))
    try:
        with pytest.raises((AssertionError, pytest.fail.Exception)):
            scenario(tier)
    finally:
        close(tier)


# --- agreements: behaviours vLLM 0.33 changed, now the same on both ----------------------


def mark_miss_leaves_an_in_flight_probe_to_its_result(tier: Any) -> None:
    gate = hold_in_flight(tier, A, R1)
    tier.mark_miss([A])
    gate.set()
    assert run_steps(tier, [A], R1) == [True]
    assert step_verdicts(tier, A, R1, steps=3) == [True] * 3


def mark_miss_in_flight_then_a_new_request_joins(tier: Any) -> None:
    gate = hold_in_flight(tier, A, R1)
    tier.cleanup("r1")
    tier.mark_miss([A])
    assert tier.lookup(A, R2) is None  # joins the probe in flight
    gate.set()
    assert run_steps(tier, [A], R2) == [True]
    assert tier.calls == [([A], "r1")]


def a_lazily_raising_result_is_a_miss_and_the_worker_serves_on(tier: Any) -> None:
    tier.answer = lambda keys: raise_after(1, [True] * len(keys))
    assert run_steps(tier, [A, B], R1) == [False, False]
    tier.answer = None
    assert run_steps(tier, [C], R2) == [True], "the worker no longer serves"


def lookups_after_shutdown_answer_the_verdicts_known_then(tier: Any) -> None:
    assert run_steps(tier, [A, B], R1) == [True, False]
    tier.shutdown()
    assert [tier.lookup(A, R1), tier.lookup(B, R2), tier.lookup(C, R2)] == [True, False, None]
    tier.mark_miss([A])
    assert tier.lookup(A, R2) is False


AGREEMENTS = [
    mark_miss_leaves_an_in_flight_probe_to_its_result,
    mark_miss_in_flight_then_a_new_request_joins,
    a_lazily_raising_result_is_a_miss_and_the_worker_serves_on,
    lookups_after_shutdown_answer_the_verdicts_known_then,
]


@pytest.mark.parametrize("base", ["drop-in", "stand-in", "vllm-0.33"])
@pytest.mark.parametrize("scenario", AGREEMENTS, ids=lambda s: s.__name__)
def test_where_vllm_033_changed_both_agree(scenario: Callable[[Any], None], base: str) -> None:
    tier = tier_on(AsyncLookupManager if base == "drop-in" else vllm_base(base))
    try:
        scenario(tier)
    finally:
        close(tier)
