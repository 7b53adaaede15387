"""The core's data layout: probe states and request registrations held by identity.

These pin down what the hot path relies on instead of table lookups (a
dropped state is marked ABSENT; a cleaned-up request is marked so; probes
created by a request that left are regrouped exactly as the reference model
does), and show that ``LookupCore.violations`` notices each kind of
corruption of that layout.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from kvprobe.statemachine import LookupCore, LookupPhase, ProbeState, ReqContext
from kvprobe.statemachine.types import GroupOutcome

P, F, R = LookupPhase.PENDING, LookupPhase.IN_FLIGHT, LookupPhase.RESOLVED
A, B, C = ReqContext("a"), ReqContext("b"), ReqContext("c")


def _groups(core: LookupCore) -> list[tuple[str, tuple[bytes, ...]]]:
    batch = core.flush()
    assert batch is not None
    return [(g.req_id, g.keys) for g in batch.groups]


def test_a_probe_whose_creator_left_goes_to_the_smallest_waiting_request() -> None:
    core = LookupCore()
    core.lookup(b"k", C)
    core.lookup(b"k", B)
    core.lookup(b"k", A)
    core.cleanup("c")
    assert _groups(core) == [("a", (b"k",))]


def test_a_creator_that_left_and_asked_again_gets_its_probe_back() -> None:
    # The reference model groups under the creator's id whenever that id waits
    # at flush; a fresh registration of the same id must count as waiting.
    core = LookupCore()
    core.lookup(b"k", B)
    core.lookup(b"k", A)
    core.cleanup("b")
    core.lookup(b"k", B)
    assert core.states[b"k"].owner.waiting is False
    assert _groups(core) == [("b", (b"k",))]


def test_the_group_carries_the_creators_context_object() -> None:
    ctx = ReqContext("a")
    core = LookupCore()
    core.lookup(b"k", ctx)
    batch = core.flush()
    assert batch is not None and batch.groups[0].req_context is ctx


def test_a_dropped_state_is_marked_absent_and_its_result_is_stale() -> None:
    core = LookupCore()
    core.lookup(b"k", A)
    batch = core.flush()
    assert batch is not None
    (group,) = batch.groups
    submitted = group.states[0]
    core.cleanup("a")  # IN_FLIGHT, nobody waits: kept
    core.mark_miss([b"k"])  # the orphan is reclaimed
    assert b"k" not in core.states and submitted.phase is None
    core.lookup(b"k", B)  # a new generation, a new object
    assert core.states[b"k"] is not submitted
    core.inbox.append(GroupOutcome(group, (True,)))
    core.drain()
    assert core.phase(b"k") is P and core.stats.stale_results_dropped == 1
    core.check_invariants()


def test_cleanup_marks_the_registration_and_shutdown_marks_everything() -> None:
    core = LookupCore()
    core.lookup(b"k1", A)
    core.lookup(b"k2", B)
    a, b = core.requests["a"], core.requests["b"]
    state = core.states[b"k2"]
    core.cleanup("a")
    assert not a.waiting and b.waiting
    core.shutdown()
    assert not b.waiting and state.phase is None


def test_probes_created_counts_the_step_batch_before_flush_and_after_shutdown() -> None:
    core = LookupCore()
    core.lookup(b"k1", A)
    core.lookup(b"k2", A)
    assert core.stats.probes_created == 2
    core.flush()
    core.lookup(b"k3", A)
    assert core.stats.probes_created == 3
    core.shutdown()
    assert core.stats.probes_created == 3


def _filled() -> LookupCore:
    core = LookupCore()
    core.lookup(b"pending", A)
    core.lookup(b"pending", B)
    core.lookup(b"flown", A)
    assert core.flush() is not None
    core.lookup(b"later", B)
    core.check_invariants()
    return core


def _under_wrong_key(core: LookupCore) -> None:
    core.states[b"elsewhere"] = core.states.pop(b"later")


def _marked_absent(core: LookupCore) -> None:
    core.states[b"later"].phase = None


def _creator_forgotten(core: LookupCore) -> None:
    core.states[b"later"].waiters.discard("b")
    core.states[b"later"].waiters.add("a")


def _listed_twice(core: LookupCore) -> None:
    request = core.requests["b"]
    request.states.append(request.states[-1])


def _registration_cleaned(core: LookupCore) -> None:
    core.requests["b"].waiting = False


def _not_queued(core: LookupCore) -> None:
    core.step_batch.clear()


def _in_flight_unsubmitted(core: LookupCore) -> None:
    core.outstanding.clear()


def _verdict_without_resolution(core: LookupCore) -> None:
    core.states[b"later"].verdict = True


CORRUPTIONS: dict[str, tuple[Callable[[LookupCore], None], str]] = {
    "state filed under another key": (_under_wrong_key, "ReverseIndexConsistent"),
    "live state marked ABSENT": (_marked_absent, "ReverseIndexConsistent"),
    "creator no longer among the waiters": (_creator_forgotten, "ReverseIndexConsistent"),
    "a request lists a state twice": (_listed_twice, "lists a state twice"),
    "registered request marked cleaned up": (_registration_cleaned, "is registered as"),
    "PENDING state missing from the step batch": (_not_queued, "NoDuplicateProbe"),
    "IN_FLIGHT state with no open group": (_in_flight_unsubmitted, "NothingLeaks"),
    "verdict on a PENDING state": (_verdict_without_resolution, "VerdictIffResolved"),
}


@pytest.mark.parametrize("name", sorted(CORRUPTIONS))
def test_violations_notice_each_corruption(name: str) -> None:
    corrupt, expected = CORRUPTIONS[name]
    core = _filled()
    corrupt(core)
    problems = list(core.violations())
    assert any(expected in p for p in problems), problems


def test_probe_state_repr_names_a_dropped_state_absent() -> None:
    core = LookupCore()
    core.lookup(b"k", A)
    state: ProbeState = core.states[b"k"]
    core.cleanup("a")
    assert repr(state).startswith("ProbeState(ABSENT, gen=1")
