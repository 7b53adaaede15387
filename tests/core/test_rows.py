"""One test per row of the lifecycle table (docs/lifecycle.md), manual worker."""

from __future__ import annotations

import pytest
from core_harness import Manual

from kvprobe.statemachine import FailureKind, LookupPhase, ManagerClosedError, ReqContext

P, F, R = LookupPhase.PENDING, LookupPhase.IN_FLIGHT, LookupPhase.RESOLVED
A, B = ReqContext("a"), ReqContext("b")
HIT, MISS = b"hit-1", b"nope-1"


def test_absent_lookup_creates_pending(manual: Manual) -> None:
    m = manual.m
    assert m.lookup(HIT, A) is None
    assert m.phase(HIT) is P and len(m) == 1
    assert m.stats.probes_created == 1


def test_pending_lookup_joins_without_a_second_entry(manual: Manual) -> None:
    m = manual.m
    m.lookup(HIT, A)
    m.lookup(HIT, A)
    m.lookup(HIT, B)
    m.flush()
    batch = manual.worker.take_batch()
    assert batch is not None
    assert [g.keys for g in batch.groups] == [(HIT,)]
    assert m.stats.joins == 1


def test_flush_submits_exactly_once_and_groups_by_request(manual: Manual) -> None:
    m = manual.m
    m.lookup(b"k1", A)
    m.lookup(b"k2", B)
    m.lookup(b"k3", A)
    m.flush()
    m.flush()  # nothing new: no second submission
    batch = manual.worker.take_batch()
    assert batch is not None and manual.worker.take_batch() is None
    assert {(g.req_id, g.keys) for g in batch.groups} == {("a", (b"k1", b"k3")), ("b", (b"k2",))}
    assert m.phase(b"k1") is F and m.stats.probes_submitted == 3


def test_pending_cleanup_of_last_request_is_never_probed(manual: Manual) -> None:
    m = manual.m
    m.lookup(HIT, A)
    m.cleanup("a")
    assert len(m) == 0
    m.flush()
    assert manual.worker.take_batch() is None
    assert manual.backend.calls == []
    assert m.stats.never_probed == 1


def test_flush_regroups_an_entry_whose_first_request_left(manual: Manual) -> None:
    m = manual.m
    m.lookup(HIT, A)
    m.lookup(HIT, B)
    m.cleanup("a")
    m.flush()
    batch = manual.worker.take_batch()
    assert batch is not None and [(g.req_id, g.keys) for g in batch.groups] == [("b", (HIT,))]


def test_pending_mark_miss_resolves_false_and_is_never_submitted(manual: Manual) -> None:
    m = manual.m
    m.lookup(HIT, A)
    m.mark_miss([HIT])
    assert m.phase(HIT) is R and m.lookup(HIT, A) is False
    m.flush()
    assert manual.worker.take_batch() is None


def test_in_flight_result_resolves(manual: Manual) -> None:
    m = manual.m
    m.lookup(HIT, A)
    m.lookup(MISS, A)
    m.flush()
    manual.worker.run_all()
    assert m.lookup(HIT, A) is True and m.lookup(MISS, A) is False
    assert m.phase(HIT) is R and m.stats.hits == 1 and m.stats.misses == 1


def test_in_flight_result_with_nobody_waiting_is_reclaimed(manual: Manual) -> None:
    m = manual.m
    m.lookup(HIT, A)
    m.flush()
    m.cleanup("a")
    assert m.phase(HIT) is F  # kept while in flight
    manual.worker.run_all()
    m.drain_results()
    assert len(m) == 0 and m.stats.orphans_reclaimed == 1


def test_in_flight_cleanup_keeps_state_and_new_request_reuses_probe(manual: Manual) -> None:
    m = manual.m
    m.lookup(HIT, A)
    m.flush()
    m.cleanup("a")
    assert m.lookup(HIT, B) is None
    m.flush()
    batch = manual.worker.take_batch()
    assert batch is not None and manual.worker.take_batch() is None  # no second probe
    manual.worker.complete(batch.groups[0])
    assert m.lookup(HIT, B) is True
    assert m.stats.in_flight_reuses == 1 and len(manual.backend.calls) == 1


def test_in_flight_mark_miss_drops_the_late_result(manual: Manual) -> None:
    m = manual.m
    m.lookup(HIT, A)
    m.flush()
    m.mark_miss([HIT])
    assert m.lookup(HIT, A) is False
    manual.worker.run_all()
    assert m.lookup(HIT, A) is False
    assert m.stats.stale_results_dropped == 1 and m.stats.forced_misses == 1


def test_in_flight_mark_miss_with_nobody_waiting_reclaims(manual: Manual) -> None:
    m = manual.m
    m.lookup(HIT, A)
    m.flush()
    m.cleanup("a")
    m.mark_miss([HIT])
    assert len(m) == 0
    manual.worker.run_all()
    m.drain_results()
    assert len(m) == 0 and m.stats.stale_results_dropped == 1


@pytest.mark.parametrize("failure", list(FailureKind))
def test_in_flight_failure_resolves_miss(manual: Manual, failure: FailureKind) -> None:
    m = manual.m
    m.lookup(HIT, A)
    m.flush()
    batch = manual.worker.take_batch()
    assert batch is not None
    manual.worker.fail(batch.groups[0], failure)
    assert m.lookup(HIT, A) is False
    assert m.stats.failures.get(failure.value, 0) == 1


def test_stale_generation_is_dropped(manual: Manual) -> None:
    m = manual.m
    m.lookup(HIT, A)
    m.flush()
    old = manual.worker.take_batch()
    assert old is not None
    m.mark_miss([HIT])
    m.cleanup("a")  # generation 1 reclaimed
    m.lookup(HIT, B)  # generation 2
    m.flush()
    new = manual.worker.take_batch()
    assert new is not None
    manual.worker.complete(old.groups[0], [True])  # a wrong late answer for generation 1
    assert m.lookup(HIT, B) is None and m.phase(HIT) is F
    manual.worker.complete(new.groups[0], [False])
    assert m.lookup(HIT, B) is False
    assert m.stats.stale_results_dropped == 1


def test_timeout_then_late_answer_is_dropped(manual: Manual) -> None:
    m = manual.m
    m.lookup(MISS, A)
    m.flush()
    batch = manual.worker.take_batch()
    assert batch is not None
    manual.worker.time_out(batch.groups[0])
    assert m.lookup(MISS, A) is False
    manual.worker.complete(batch.groups[0], [True])  # second result of the generation
    assert m.lookup(MISS, A) is False
    assert m.stats.timeouts == 1 and m.stats.late_results == 1 and m.stats.stale_results_dropped == 1


def test_resolved_lookup_mark_miss_and_cleanup(manual: Manual) -> None:
    m = manual.m
    m.lookup(HIT, A)
    m.lookup(HIT, B)
    m.flush()
    manual.worker.run_all()
    assert m.lookup(HIT, A) is True
    m.mark_miss([HIT])
    assert m.lookup(HIT, B) is False and m.phase(HIT) is R
    m.cleanup("a")
    assert m.phase(HIT) is R
    m.cleanup("b")
    assert len(m) == 0


def test_verdict_is_visible_to_the_first_lookup_after_the_result(manual: Manual) -> None:
    m = manual.m
    m.lookup(HIT, A)
    m.flush()
    manual.worker.run_all()
    # No flush and no drain_results in between.
    assert m.lookup(HIT, A) is True


def test_shutdown_reclaims_everything_and_later_calls_raise(manual: Manual) -> None:
    m = manual.m
    m.lookup(HIT, A)
    m.lookup(b"k2", B)
    m.flush()
    m.lookup(b"k3", A)
    m.shutdown()
    assert len(m) == 0
    for call in (
        lambda: m.lookup(HIT, A),
        m.flush,
        m.drain_results,
        lambda: m.cleanup("a"),
        lambda: m.mark_miss([HIT]),
        lambda: m.phase(HIT),
    ):
        with pytest.raises(ManagerClosedError):
            call()
    assert issubclass(ManagerClosedError, RuntimeError)
    m.shutdown()  # idempotent


def test_duck_typed_request_context(manual: Manual) -> None:
    class Request:
        def __init__(self, req_id: str) -> None:
            self.req_id = req_id
            self.prompt = "ignored"

    m = manual.m
    ctx = Request("duck")
    assert m.lookup(HIT, ctx) is None
    m.flush()
    manual.worker.run_all()
    assert m.lookup(HIT, ctx) is True
    assert manual.backend.calls == [((HIT,), "duck")]
    m.cleanup("duck")
    assert len(m) == 0


def test_trace_names_actions_as_the_model_does(manual: Manual) -> None:
    m = manual.m
    m.lookup(HIT, A)
    m.flush()
    manual.worker.run_all()
    m.lookup(HIT, A)
    m.mark_miss([HIT])
    m.cleanup("a")
    assert [e["action"] for e in manual.events] == [
        "Lookup",
        "Flush",
        "TakeBatch",  # the worker's actions are traced too
        "CompleteGroup",
        "Drain",
        "Lookup",
        "MarkMiss",
        "Cleanup",
    ]
    assert [e["seq"] for e in manual.events] == list(range(8))
