"""Each documented difference from vLLM's base, as a scenario run on both bases.

The drop-in must pass every scenario; a stand-in with the semantics of
vLLM's own base class (``vllm_like_base.py``) must fail every one of them.
That second half is the tests' power: each scenario is shown to tell
kvprobe's contract from the behaviour docs/vllm.md says vLLM has.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
from vllm_harness import ScriptedTier, hold_in_flight, raise_after, step_verdicts
from vllm_like_base import VllmLikeBase

from kvprobe.integrations.vllm import AsyncLookupManager
from kvprobe.statemachine import ReqContext

A, B, C = (bytes([i]) * 16 + i.to_bytes(4, "big") for i in range(1, 4))
R1, R2 = ReqContext("r1"), ReqContext("r2")


def tier_on(base: type) -> Any:
    """A set-backed tier subclassing ``base``; ``answer`` and ``gate`` script its calls."""
    return type("Tier", (ScriptedTier, base), {})("diff", stored={A, C})


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


def mark_miss_while_in_flight(tier: Any) -> None:
    gate = hold_in_flight(tier, A, R1)
    tier.mark_miss([A])
    gate.set()
    assert step_verdicts(tier, A, R1) == [False] * 20


def mark_miss_in_flight_then_a_new_request(tier: Any) -> None:
    gate = hold_in_flight(tier, A, R1)
    tier.cleanup("r1")
    tier.mark_miss([A])
    tier.lookup(A, R2)
    gate.set()
    # kvprobe reclaimed the orphan at mark_miss, so r2 started a fresh probe
    # (A is stored: True); vLLM's base let r2 join the forced state, and the
    # old probe's result then trips its assertion inside lookup.
    step_verdicts(tier, A, R2)
    assert run_steps(tier, [A], R2) == [True]


def lazily_raising_result(tier: Any) -> None:
    tier.answer = lambda keys: raise_after(1, [True] * len(keys))
    assert run_steps(tier, [A, B], R1) == [False, False]
    tier.answer = None
    assert run_steps(tier, [C], R2) == [True], "the worker no longer serves"


def short_result(tier: Any) -> None:
    tier.answer = lambda keys: [True] * (len(keys) - 1)
    assert run_steps(tier, [A, B, C], R1) == [False, False, False]
    tier.cleanup("r1")
    assert len(tier) == 0, "states leaked"


def long_result(tier: Any) -> None:
    tier.answer = lambda keys: [True] * (len(keys) + 1)
    assert run_steps(tier, [A, B], R1) == [False, False]


def non_bool_result(tier: Any) -> None:
    tier.answer = lambda keys: ["yes"] * len(keys)
    assert run_steps(tier, [A], R1) == [False]


def calls_after_shutdown(tier: Any) -> None:
    tier.shutdown()
    with pytest.raises(RuntimeError):
        tier.lookup(A, R1)


SCENARIOS = [
    mark_miss_while_in_flight,
    mark_miss_in_flight_then_a_new_request,
    lazily_raising_result,
    short_result,
    long_result,
    non_bool_result,
    calls_after_shutdown,
]


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.__name__)
def test_the_drop_in_keeps_kvprobes_contract(scenario: Callable[[Any], None]) -> None:
    tier = tier_on(AsyncLookupManager)
    try:
        scenario(tier)
    finally:
        if tier.gate is not None:
            tier.gate.set()
        tier.shutdown()


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.__name__)
def test_vllms_base_fails_the_same_scenario(scenario: Callable[[Any], None]) -> None:
    tier = tier_on(VllmLikeBase)
    try:
        with pytest.raises((AssertionError, pytest.fail.Exception)):
            scenario(tier)
    finally:
        if tier.gate is not None:
            tier.gate.set()
        if tier._thread.is_alive():
            tier._jobs.put(None)
            tier._thread.join(5)
