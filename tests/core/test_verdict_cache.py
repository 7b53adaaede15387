"""The opt-in verdict cache (docs/cache.md): its configuration, the core's use of it, one manager run.

The core is driven by hand (flush, then an outcome applied), with a clock
that is a number the test advances: nothing sleeps.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path

import pytest

from kvprobe.backends import FsBackend, InMemoryBackend
from kvprobe.spec.lifecycle import LookupPhase
from kvprobe.statemachine import AsyncLookupManager, LookupCore, ReqContext, VerdictCache
from kvprobe.statemachine.types import FailureKind, GroupOutcome, InvalidInputError, InvalidValueError
from kvprobe.statemachine.verdict_cache import VerdictMemory

A, B, C = b"key-a", b"key-b", b"key-c"


class Clock:
    """A clock the test sets."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def cached_core(clock: Clock, *, max_entries: int = 8, hit_ttl_s: float = 10.0, miss_ttl_s: float = 0.0) -> LookupCore:
    core = LookupCore()
    core.memory = VerdictMemory(VerdictCache(max_entries, hit_ttl_s, miss_ttl_s), clock)
    return core


def ask(core: LookupCore, req_id: str, keys: Sequence[bytes]) -> list[bool | None]:
    return [core.lookup(key, ReqContext(req_id)) for key in keys]


def answer(core: LookupCore, verdicts: dict[bytes, bool], failure: FailureKind | None = None) -> int:
    """Flush, and apply each group's outcome (the backend's verdicts, or ``failure``); the keys probed."""
    batch = core.flush()
    if batch is None:
        return 0
    probed = 0
    for group in batch.groups:
        keys = [state.key for state in group.states]
        probed += len(keys)
        given = None if failure is not None else tuple(verdicts[k] for k in keys)
        core.apply(GroupOutcome(group, given, failure))
    core.check_invariants()
    return probed


def finish(core: LookupCore, req_id: str) -> None:
    core.cleanup(req_id)
    core.check_invariants()


# --- configuration -------------------------------------------------------------


def test_config_keeps_checked_values() -> None:
    config = VerdictCache(max_entries=3, hit_ttl_s=2, miss_ttl_s=0.5)
    assert (config.max_entries, config.hit_ttl_s, config.miss_ttl_s) == (3, 2.0, 0.5)
    assert VerdictCache(1, 1.0).miss_ttl_s == 0.0


@pytest.mark.parametrize(
    ("kwargs", "error", "named"),
    [
        ({"max_entries": 0, "hit_ttl_s": 1.0}, InvalidValueError, "max_entries"),
        ({"max_entries": True, "hit_ttl_s": 1.0}, InvalidInputError, "max_entries"),
        ({"max_entries": 2.0, "hit_ttl_s": 1.0}, InvalidInputError, "max_entries"),
        ({"max_entries": 2, "hit_ttl_s": -1.0}, InvalidValueError, "hit_ttl_s"),
        ({"max_entries": 2, "hit_ttl_s": float("inf")}, InvalidValueError, "hit_ttl_s"),
        ({"max_entries": 2, "hit_ttl_s": float("nan")}, InvalidValueError, "hit_ttl_s"),
        ({"max_entries": 2, "hit_ttl_s": "1"}, InvalidInputError, "hit_ttl_s"),
        ({"max_entries": 2, "hit_ttl_s": 1.0, "miss_ttl_s": -0.1}, InvalidValueError, "miss_ttl_s"),
        ({"max_entries": 2, "hit_ttl_s": 1.0, "miss_ttl_s": False}, InvalidInputError, "miss_ttl_s"),
        ({"max_entries": 2, "hit_ttl_s": 0.0, "miss_ttl_s": 0.0}, InvalidValueError, "both 0"),
    ],
)
def test_config_refuses_bad_values(kwargs: dict[str, object], error: type[Exception], named: str) -> None:
    with pytest.raises(error, match=named):
        VerdictCache(**kwargs)  # type: ignore[arg-type]


def test_manager_refuses_a_wrong_cache() -> None:
    with pytest.raises(InvalidInputError, match="VerdictCache"):
        AsyncLookupManager(InMemoryBackend(), worker="manual", verdict_cache={"max_entries": 2})  # type: ignore[arg-type]


# --- the core --------------------------------------------------------------------


def test_without_a_cache_every_request_probes_again() -> None:
    core = LookupCore()
    assert ask(core, "r1", [A]) == [None]
    assert answer(core, {A: True}) == 1
    finish(core, "r1")
    assert ask(core, "r2", [A]) == [None]
    assert answer(core, {A: True}) == 1


def test_a_remembered_hit_is_served_at_once_without_a_probe() -> None:
    clock = Clock()
    core = cached_core(clock)
    assert ask(core, "r1", [A, B]) == [None, None]
    assert answer(core, {A: True, B: False}) == 2
    finish(core, "r1")
    assert ask(core, "r2", [A, B]) == [True, None]  # B's miss is not remembered (miss TTL 0)
    assert core.phase(A) is LookupPhase.RESOLVED
    core.check_invariants()
    assert answer(core, {A: True, B: False}) == 1  # only B is probed
    assert core.memory is not None and core.memory.recalled == 1
    assert core.stats.probes_created == 3


def test_a_hit_past_its_ttl_is_probed_again() -> None:
    clock = Clock()
    core = cached_core(clock, hit_ttl_s=5.0)
    ask(core, "r1", [A])
    answer(core, {A: True})
    finish(core, "r1")
    clock.now += 4.9
    assert ask(core, "r2", [A]) == [True]
    finish(core, "r2")
    clock.now += 0.1  # five seconds after the answer was applied
    assert ask(core, "r3", [A]) == [None]
    assert answer(core, {A: True}) == 1
    assert core.memory is not None and core.memory.expired == 1


def test_the_miss_ttl_is_apart_from_the_hit_ttl() -> None:
    clock = Clock()
    core = cached_core(clock, hit_ttl_s=10.0, miss_ttl_s=1.0)
    ask(core, "r1", [A, B])
    answer(core, {A: True, B: False})
    finish(core, "r1")
    clock.now += 0.5
    assert ask(core, "r2", [A, B]) == [True, False]
    finish(core, "r2")
    clock.now += 0.5
    assert ask(core, "r3", [A, B]) == [True, None]
    assert answer(core, {A: True, B: False}) == 1


def test_a_miss_only_cache_remembers_no_hit() -> None:
    core = cached_core(Clock(), hit_ttl_s=0.0, miss_ttl_s=3.0)
    ask(core, "r1", [A, B])
    answer(core, {A: True, B: False})
    finish(core, "r1")
    assert ask(core, "r2", [A, B]) == [None, False]


def test_the_cache_is_bounded_in_entries_least_recently_used_first() -> None:
    core = cached_core(Clock(), max_entries=2)
    ask(core, "r1", [A, B])
    answer(core, {A: True, B: True})
    finish(core, "r1")
    assert ask(core, "r2", [A]) == [True]  # A is now the most recently used
    ask(core, "r2", [C])
    answer(core, {C: True})  # a third entry evicts B, the least recently used
    finish(core, "r2")
    memory = core.memory
    assert memory is not None and len(memory) == 2 and memory.evicted == 1
    assert ask(core, "r3", [A, B, C]) == [True, None, True]


def test_mark_miss_forgets_the_key_and_the_next_request_probes() -> None:
    core = cached_core(Clock())
    ask(core, "r1", [A])
    answer(core, {A: True})
    finish(core, "r1")
    assert ask(core, "r2", [A]) == [True]
    core.mark_miss([A])  # loading the block failed: another engine evicted it
    assert ask(core, "r2", [A]) == [False]
    finish(core, "r2")
    assert ask(core, "r3", [A]) == [None]
    assert answer(core, {A: False}) == 1
    assert core.memory is not None and core.memory.forgotten == 1


def test_mark_miss_of_a_key_without_a_state_forgets_it_too() -> None:
    core = cached_core(Clock())
    ask(core, "r1", [A])
    answer(core, {A: True})
    finish(core, "r1")
    core.mark_miss([A])
    assert ask(core, "r2", [A]) == [None]


@pytest.mark.parametrize(
    "failure",
    [FailureKind.RAISED, FailureKind.TIMEOUT, FailureKind.SATURATED, FailureKind.WORKER_DIED, FailureKind.WORKER_ERROR],
)
def test_a_failure_miss_is_never_remembered(failure: FailureKind) -> None:
    core = cached_core(Clock(), miss_ttl_s=60.0)
    ask(core, "r1", [A])
    answer(core, {}, failure)
    assert ask(core, "r1", [A]) == [False]
    finish(core, "r1")
    assert core.memory is not None and len(core.memory) == 0
    assert ask(core, "r2", [A]) == [None]


def test_a_result_dropped_after_mark_miss_is_not_remembered() -> None:
    core = cached_core(Clock())
    ask(core, "r1", [A])
    batch = core.flush()
    assert batch is not None
    core.mark_miss([A])  # the load failed while the probe was in flight
    core.apply(GroupOutcome(batch.groups[0], (True,)))  # the late "stored" is stale
    finish(core, "r1")
    assert ask(core, "r2", [A]) == [None]


def test_the_chain_walk_sees_a_remembered_verdict() -> None:
    core = cached_core(Clock())
    ask(core, "r1", [A, B])
    answer(core, {A: True, B: True})
    finish(core, "r1")
    walked = core.lookup_chain([A, B, C], ReqContext("r2"))
    assert walked.leading_hits == 2
    assert answer(core, {C: False}) == 1


def test_shutdown_forgets_everything() -> None:
    core = cached_core(Clock())
    ask(core, "r1", [A])
    answer(core, {A: True})
    core.shutdown()
    assert core.memory is not None and len(core.memory) == 0


# --- through the threaded manager and a real backend ----------------------------------


class CountingFs(FsBackend):
    """A file-system tier that counts the keys it is asked about."""

    asked = 0

    def batch_lookup(self, keys: Sequence[bytes], req_context: object) -> list[bool]:
        self.asked += len(keys)
        return list(super().batch_lookup(keys, req_context))


def settle(manager: AsyncLookupManager, req_id: str, keys: Sequence[bytes]) -> list[bool | None]:
    """The verdicts of ``keys`` for ``req_id``, flushing until none is unknown (bounded)."""
    for _ in range(2000):
        verdicts = [manager.lookup(k, ReqContext(req_id)) for k in keys]
        if None not in verdicts:
            return verdicts
        manager.flush()
        manager.drain_results()
        threading.Event().wait(0.001)
    raise AssertionError(f"{req_id} got no verdicts for {keys}")


@pytest.mark.parametrize("cached", [False, True])
def test_a_second_request_sends_the_backend_nothing_with_the_cache(tmp_path: Path, cached: bool) -> None:
    backend = CountingFs(tmp_path)
    backend.store(A)
    cache = VerdictCache(max_entries=16, hit_ttl_s=3600.0, miss_ttl_s=3600.0) if cached else None
    with AsyncLookupManager(backend, verdict_cache=cache) as manager:
        assert settle(manager, "r1", [A, B]) == [True, False]
        manager.cleanup("r1")
        assert backend.asked == 2
        assert settle(manager, "r2", [A, B]) == [True, False]
        manager.cleanup("r2")
        assert backend.asked == (2 if cached else 4)


# --- answers that are no answers (issue 39 part 3) ------------------------------


class HalfAnswering:
    """A tier that answers some keys and leaves others without an answer (shed, unanswered at its deadline).

    Like the object tier: ``False`` for both "not stored" and "no answer",
    the latter's indices marked in the :class:`Verdicts` it returns.
    """

    def __init__(self, stored: set[bytes], unanswered: set[bytes]) -> None:
        self.stored, self.unanswered = stored, unanswered
        self.asked: list[bytes] = []

    def batch_lookup(self, keys: Sequence[bytes], req_context: object) -> list[bool]:
        from kvprobe.backends.base import Verdicts

        self.asked.extend(keys)
        verdicts = [key in self.stored and key not in self.unanswered for key in keys]
        return Verdicts(verdicts, unanswered=frozenset(i for i, key in enumerate(keys) if key in self.unanswered))


def test_a_key_the_tier_left_unanswered_is_never_remembered_as_not_stored() -> None:
    backend = HalfAnswering(stored={A}, unanswered={B})
    cache = VerdictCache(max_entries=8, hit_ttl_s=60.0, miss_ttl_s=60.0)
    with AsyncLookupManager(backend, verdict_cache=cache, lookup_timeout_s=5.0) as m:
        # The second request finds A and C remembered, and B to be asked again.
        for req_id, first in (("r1", [None, None, None]), ("r2", [True, None, False])):
            ctx = ReqContext(req_id)
            assert [m.lookup(k, ctx) for k in (A, B, C)] == first
            m.flush()
            deadline = threading.Event()
            for _ in range(500):
                if all(m.lookup(k, ctx) is not None for k in (A, B, C)):
                    break
                deadline.wait(0.01)
            assert [m.lookup(k, ctx) for k in (A, B, C)] == [True, False, False]
            m.cleanup(req_id)
    # A stored and C absent were answered once and remembered; B, never answered, was asked again.
    assert sorted(backend.asked) == sorted([A, B, C, B])


def test_unanswered_marks_reach_the_core_only_for_their_keys() -> None:
    clock = Clock()
    core = cached_core(clock, miss_ttl_s=30.0)
    ask(core, "r", [A, B, C])
    batch = core.flush()
    assert batch is not None
    (group,) = batch.groups
    keys = [state.key for state in group.states]
    core.apply(GroupOutcome(group, tuple(k == A for k in keys), unanswered=frozenset({keys.index(B)})))
    core.check_invariants()
    assert core.memory is not None
    remembered = {key: verdict for key, verdict, _, _ in core.memory.entries()}
    assert remembered == {A: True, C: False}


class Marking:
    def __init__(self, result: object) -> None:
        self.result = result

    def batch_lookup(self, keys: Sequence[bytes], req_context: object) -> object:
        return self.result


@pytest.mark.parametrize(
    ("marked", "kept"),
    [
        (frozenset({1}), frozenset({1})),
        (frozenset({0, 1}), frozenset({1})),  # a hit is an answer: its mark is dropped
        (frozenset({1, 2, -1}), frozenset({1})),  # out of range
        ({1}, frozenset()),  # not a frozenset: no mark at all
        (frozenset({"1"}), frozenset()),
    ],
)
def test_the_worker_keeps_only_marks_of_false_verdicts_in_range(marked: object, kept: frozenset[int]) -> None:
    from kvprobe.backends.base import Verdicts
    from kvprobe.statemachine.worker_base import probe_group

    core = LookupCore()
    ask(core, "r", [A, B])
    batch = core.flush()
    assert batch is not None
    verdicts = Verdicts([True, False])
    verdicts.unanswered = marked  # type: ignore[assignment]
    outcome = probe_group(Marking(verdicts), batch.groups[0])
    assert outcome.failure is None and outcome.verdicts == (True, False) and outcome.unanswered == kept
