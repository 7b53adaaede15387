"""The drop-in's vLLM-visible behaviour, method by method.

Written from the semantics vLLM 0.33 documents for its tiered-offloading
``AsyncLookupManager`` (``lookup`` returns True / False / None = retry next
step; ``flush`` posts the step's new keys, one ``batch_lookup`` per request;
``cleanup`` releases a request and keeps in-flight probes for others to
join; ``mark_miss`` forces False on a resolved verdict after a failed load;
``shutdown`` stops the worker), and, where vLLM's base stalls or leaks, from
kvprobe's contract (docs/vllm.md).  test_vllm_contract.py has the rest of
vLLM 0.33's contract (threads, shutdown, the test-compatibility views).
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from vllm_harness import SetTier, chain_retry_then_miss, hold_in_flight, raise_after, settle

from kvprobe.integrations.vllm import AsyncLookupManager, ChainAnswer, LookupResult, as_lookup_result
from kvprobe.statemachine import LookupPhase, ManagerClosedError, ReqContext
from kvprobe.statemachine.types import InvalidInputError, InvalidValueError

A, B, C, D, E = (bytes([i]) * 16 + i.to_bytes(4, "big") for i in range(1, 6))
R1, R2 = ReqContext("r1"), ReqContext("r2")


@pytest.fixture
def tier() -> Any:
    t = SetTier(stored={A, C})
    yield t
    t.shutdown()


def test_lookup_is_none_until_the_worker_answered_then_the_verdict(tier: SetTier) -> None:
    assert [tier.lookup(k, R1) for k in (A, B)] == [None, None]
    assert tier.calls == []  # nothing is probed before the step ends
    tier.flush()
    settle(tier)
    assert [tier.lookup(k, R1) for k in (A, B)] == [True, False]
    assert tier.calls == [([A, B], "r1")]


def test_flush_submits_one_batch_lookup_per_request_in_first_asked_order(tier: SetTier) -> None:
    for key in (C, A):
        tier.lookup(key, R1)
    tier.lookup(B, R2)
    tier.lookup(A, R2)  # joins r1's probe of A: not probed twice
    tier.flush()
    settle(tier)
    assert sorted(tier.calls, key=lambda c: c[1]) == [([C, A], "r1"), ([B], "r2")]
    assert tier.lookup(A, R2) is True


def test_flush_with_nothing_new_calls_nothing(tier: SetTier) -> None:
    tier.flush()
    tier.lookup(A, R1)
    tier.flush()
    settle(tier)
    tier.lookup(A, R1)  # resolved: no new probe
    tier.flush()
    settle(tier)
    assert tier.calls == [([A], "r1")]


def test_batch_lookup_gets_the_requests_context_object(tier: SetTier) -> None:
    seen: list[object] = []
    tier.answer = lambda keys: [False] * len(keys)
    original = tier.batch_lookup

    def spy(keys: list[bytes], ctx: Any) -> Any:
        seen.append(ctx)
        return original(keys, ctx)

    tier.batch_lookup = spy  # type: ignore[method-assign]
    tier.lookup(A, R1)
    tier.flush()
    settle(tier)
    assert seen == [R1] and seen[0] is R1


def test_drain_results_applies_what_the_worker_published() -> None:
    t = SetTier(stored={A}, worker="manual")
    try:
        t.lookup(A, R1)
        t.flush()
        assert t.manager.phase(A) is LookupPhase.IN_FLIGHT
        t.manager.worker.run_all()  # type: ignore[attr-defined]
        assert t.drain_results() is None  # as vLLM's
        assert t.manager.core.phase(A) is LookupPhase.RESOLVED
        assert t.lookup(A, R1) is True
        assert t.stats.hits == 1
    finally:
        t.shutdown()


def test_cleanup_before_flush_means_never_probed(tier: SetTier) -> None:
    tier.lookup(A, R1)
    tier.cleanup("r1")
    tier.flush()
    settle(tier)
    assert tier.calls == [] and len(tier) == 0


def test_cleanup_keeps_an_in_flight_probe_for_the_next_request(tier: SetTier) -> None:
    gate = hold_in_flight(tier, A, R1)
    tier.cleanup("r1")
    assert len(tier) == 1  # kept while in flight
    assert tier.lookup(A, R2) is None  # joins it
    gate.set()
    settle(tier)
    assert tier.lookup(A, R2) is True
    assert tier.calls == [([A], "r1")]  # one probe served both requests
    tier.cleanup("r2")
    assert len(tier) == 0


def test_an_in_flight_probe_nobody_waits_on_is_reclaimed_when_answered(tier: SetTier) -> None:
    gate = hold_in_flight(tier, A, R1)
    tier.cleanup("r1")
    gate.set()
    settle(tier)
    assert len(tier) == 0 and tier.stats.orphans_reclaimed == 1


def test_cleanup_of_an_unknown_request_is_ignored(tier: SetTier) -> None:
    tier.cleanup("never-seen")
    assert tier.stats.unknown_cleanups == 1 and len(tier) == 0


def test_mark_miss_forces_false_on_a_resolved_hit(tier: SetTier) -> None:
    tier.lookup(A, R1)
    tier.flush()
    settle(tier)
    assert tier.lookup(A, R1) is True
    tier.mark_miss([A, D])  # D has no state: skipped
    assert tier.lookup(A, R1) is False
    assert tier.stats.unknown_mark_miss == 1


def test_mark_miss_leaves_an_in_flight_probe_to_its_own_result(tier: SetTier) -> None:
    # vLLM 0.33: a failed load cannot be about a probe still in flight (no
    # verdict was given yet): the probe's own result lands.
    gate = hold_in_flight(tier, A, R1)
    tier.mark_miss([A])
    assert tier.lookup(A, R1) is None
    gate.set()
    settle(tier)
    assert tier.lookup(A, R1) is True
    assert tier.stats.forced_misses == 0 and tier.stats.stale_results_dropped == 0


def test_mark_miss_on_an_in_flight_orphan_leaves_it_to_be_reclaimed_when_answered(tier: SetTier) -> None:
    gate = hold_in_flight(tier, A, R1)
    tier.cleanup("r1")
    tier.mark_miss([A])
    assert len(tier) == 1  # kept for a request that may join it
    gate.set()
    settle(tier)
    assert len(tier) == 0 and tier.stats.orphans_reclaimed == 1


@pytest.mark.parametrize(
    "answer",
    [
        pytest.param(lambda keys: raise_after(1, [True] * len(keys)), id="raises-while-iterated"),
        pytest.param(lambda keys: [True] * (len(keys) - 1), id="short-result"),
        pytest.param(lambda keys: [True] * (len(keys) + 1), id="long-result"),
        pytest.param(lambda keys: (_ for _ in ()).throw(OSError("down")), id="raises-at-call"),
    ],
)
def test_a_faulty_batch_lookup_resolves_as_miss_and_the_worker_keeps_serving(tier: SetTier, answer: Any) -> None:
    # vLLM's base: a lazily raising result kills its worker (every later
    # lookup stays None for ever); a short result leaves keys IN_FLIGHT for ever.
    tier.answer = answer
    for key in (A, B, C):
        tier.lookup(key, R1)
    tier.flush()
    settle(tier)
    assert [tier.lookup(k, R1) for k in (A, B, C)] == [False, False, False]
    assert not tier.manager.core.outstanding
    assert tier.stats.backend_errors == 1
    tier.answer = None
    tier.lookup(D, R2)
    tier.lookup(A, R2)
    tier.flush()
    settle(tier)
    assert tier.lookup(D, R2) is False and tier.manager.worker.is_alive()
    tier.stored.add(D)
    tier.mark_miss([D])
    tier.cleanup("r2")
    tier.cleanup("r1")
    assert len(tier) == 0


def test_a_numpy_bool_array_is_accepted_as_vllm_accepts_it(tier: SetTier) -> None:
    np = pytest.importorskip("numpy")
    tier.answer = lambda keys: np.array([k in tier.stored for k in keys])
    tier.lookup(A, R1)
    tier.lookup(B, R1)
    tier.flush()
    settle(tier)
    assert (tier.lookup(A, R1), tier.lookup(B, R1)) == (True, False)
    assert tier.stats.backend_errors == 0


def test_a_timeout_extra_resolves_a_hung_call_as_miss() -> None:
    t = SetTier(stored={A}, lookup_timeout_s=0.2)
    try:
        hold_in_flight(t, A, R1)
        settle(t)
        assert t.lookup(A, R1) is False and t.stats.timeouts == 1
    finally:
        assert t.gate is not None
        t.gate.set()
        t.shutdown()


@pytest.mark.parametrize(("groups", "b_answered"), [(None, False), (1, False), (4, True)])
def test_a_slow_group_holds_back_another_only_when_groups_run_one_at_a_time(
    groups: int | None, b_answered: bool
) -> None:
    extras = {} if groups is None else {"max_concurrent_groups": groups}
    t = SetTier(stored={A, B}, **extras)
    slow = threading.Event()

    def answer(keys: list[bytes]) -> list[bool]:
        if A in keys:
            slow.wait(10)
        return [k in t.stored for k in keys]

    t.answer = answer
    try:
        t.lookup(A, R1)
        t.flush()
        t.lookup(B, R2)
        t.flush()
        deadline = time.monotonic() + (5.0 if b_answered else 0.3)
        while t.lookup(B, R2) is None and time.monotonic() < deadline:
            time.sleep(0.005)
        assert (t.lookup(B, R2) is True) is b_answered
        assert t.lookup(A, R1) is None  # still held
    finally:
        slow.set()
        t.shutdown()


def test_the_concurrency_extra_is_checked() -> None:
    with pytest.raises(InvalidValueError, match="max_concurrent_groups"):
        SetTier(max_concurrent_groups=0)
    with pytest.raises(InvalidInputError, match="max_concurrent_groups"):
        SetTier(max_concurrent_groups="4")


def test_shutdown_closes_kvprobes_manager_and_the_tier_answers_from_the_table_it_had(tier: SetTier) -> None:
    gate = hold_in_flight(tier, A, R1)
    tier.lookup(B, R2)  # never flushed: no verdict
    gate.set()
    tier.shutdown()
    assert tier.manager.closed and len(tier.manager) == 0
    assert [tier.lookup(A, R1), tier.lookup(B, R2)] == [True, None]
    with pytest.raises(ManagerClosedError):
        tier.__enter__()  # a closed tier cannot be used in a with block
    assert issubclass(ManagerClosedError, RuntimeError)
    tier.shutdown()  # again: nothing happens
    assert tier.calls == [([A], "r1")]


def test_bad_input_is_a_typed_error_and_changes_nothing(tier: SetTier) -> None:
    with pytest.raises(InvalidInputError, match="bytes"):
        tier.lookup("not-bytes", R1)  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="single"):
        tier.mark_miss(A)
    with pytest.raises(InvalidInputError, match="string"):
        SetTier(tier_type=3)  # type: ignore[arg-type]
    assert len(tier) == 0


def test_the_base_is_abstract_in_batch_lookup() -> None:
    with pytest.raises(TypeError, match="batch_lookup"):
        AsyncLookupManager("t")  # type: ignore[abstract]


def test_a_subclass_that_overrides_lookup_keeps_its_override() -> None:
    class Counting(SetTier):
        asked = 0

        def lookup(self, key: bytes, req_context: Any) -> bool | None:
            self.asked += 1
            return super().lookup(key, req_context)

    t = Counting()
    try:
        t.lookup(A, R1)
        t.lookup(B, R1)
        assert t.asked == 2
    finally:
        t.shutdown()


def test_lookup_chain_maps_a_requests_blocks_to_vllm_result_kinds(tier: SetTier) -> None:
    blocks = [A, C, B, D]  # A, C stored; B not; D never looked at (after the miss)
    chain_retry_then_miss(tier, blocks, R1)
    tier.stored.update({B, D, E})
    tier.mark_miss([C])  # loading C failed
    assert tier.lookup_chain(blocks, R1).leading_hits == 1
    # A is resolved already: another request gets its verdict at once.
    assert tier.lookup_chain([A], R2) == ChainAnswer(1, False, False, 1)
    # B is resolved False, E is new: a miss first, so E is not looked up.
    assert tier.lookup_chain([A, B, E], R2) == ChainAnswer(1, True, False, 2)
    assert tier.manager.core.phase(E) is None
    # Unknown keys before any miss: retry, with the known leading hits.
    assert tier.lookup_chain([A, E], R2) == ChainAnswer(1, False, True, 2)
    tier.flush()
    settle(tier)
    every = tier.lookup_chain([A, E], R2)
    assert every == ChainAnswer(2, False, False, 2)
    assert as_lookup_result(every) is LookupResult.HIT
    assert tier.lookup_chain([], R2) == ChainAnswer(0, False, False, 0)
    with pytest.raises(InvalidInputError, match="single"):
        tier.lookup_chain(A, R2)


def test_repr_names_the_drop_in_and_the_native_manager_under_it(tier: SetTier) -> None:
    tier.lookup(A, R1)
    assert repr(tier) == (
        "<SetTier 'set': vLLM drop-in (kvprobe.integrations.vllm) over <AsyncLookupManager 'set' 1 states>>"
    )
    tier.shutdown()
    assert repr(tier).endswith("over <AsyncLookupManager 'set' closed>>")


def test_as_lookup_result_follows_the_given_enum() -> None:
    import enum

    class VllmLike(enum.Enum):
        MISS = 1
        HIT = 2
        HIT_PENDING = 3
        RETRY = 4

    assert [as_lookup_result(v) for v in (True, False, None)] == [
        LookupResult.HIT,
        LookupResult.MISS,
        LookupResult.RETRY,
    ]
    assert as_lookup_result(True, VllmLike) is VllmLike.HIT
    assert as_lookup_result(None, VllmLike) is VllmLike.RETRY
    assert as_lookup_result(ChainAnswer(1, True, False, 2), VllmLike) is VllmLike.MISS
    assert as_lookup_result(ChainAnswer(1, True, True, 3), VllmLike) is VllmLike.RETRY
    with pytest.raises(InvalidInputError):
        as_lookup_result(1)  # type: ignore[arg-type]
