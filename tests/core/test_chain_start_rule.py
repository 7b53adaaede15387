"""``lookup_chain``'s start rule: under a backlog, walks already under way go before new ones.

While groups submitted at earlier steps are unanswered, a request that holds
no probe yet starts its walk only while those groups and the walks started
this step number fewer than ``start_backlog``; otherwise the call looks
nothing up and answers pending.  With nothing outstanding every walk starts;
a walk under way is never held.  Counted (keys asked, states held), not
timed: a backend call waits for the test's event.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence

import pytest

from kvprobe.build_info import build_info
from kvprobe.spec.lifecycle import ABSENT
from kvprobe.statemachine import AsyncLookupManager, InvalidInputError, InvalidValueError, ReqContext
from kvprobe.statemachine.windows import start_backlog_of


def chain(prompt: int, length: int = 64) -> list[bytes]:
    return [f"p{prompt}-b{i}".encode() for i in range(length)]


class HeldBackend:
    """Answers from a set; a call asking for a ``held`` key waits for ``release`` (bounded)."""

    def __init__(self, stored: Sequence[bytes], held: set[bytes], start_backlog: object = None) -> None:
        self.stored = set(stored)
        self.held = held
        self.release = threading.Event()
        self.asked: list[bytes] = []
        if start_backlog is not None:
            self.start_backlog = start_backlog

    def batch_lookup(self, keys: Sequence[bytes], req_context: object) -> list[bool]:
        self.asked.extend(keys)
        if self.held & set(keys):
            self.release.wait(120)  # the test releases it as soon as it has looked
        return [k in self.stored for k in keys]


def _manager(backend: HeldBackend, **options: object) -> AsyncLookupManager:
    return AsyncLookupManager(backend, name="walks", chain_window=4, chain_window_growth=2, **options)  # type: ignore[arg-type]


def _settle(m: AsyncLookupManager) -> None:
    """Wait (bounded by count) until every submitted group is answered and applied."""
    for _ in range(1_000_000):
        m.drain_results()
        if not m._core.outstanding:
            return
    raise AssertionError("groups still outstanding")


def _decide(m: AsyncLookupManager, chains: dict[str, list[bytes]]) -> dict[str, int]:
    """Every request's walk each step until all are decided: the stored prefixes found."""
    found: dict[str, int] = {}
    for _ in range(200):
        for req_id, keys in chains.items():
            if req_id not in found:
                answer = m.lookup_chain(keys, ReqContext(req_id))
                if answer.decided:
                    found[req_id] = answer.leading_hits
        if len(found) == len(chains):
            return found
        m.flush()
        _settle(m)
    raise AssertionError(f"undecided after 200 steps: {found}")


def test_a_new_walk_waits_while_earlier_groups_are_unanswered() -> None:
    a, b, c = chain(1), chain(2), chain(3)
    backend = HeldBackend([*a[:10], *b[:30], *c[:50]], held={a[0]})
    m = _manager(backend, start_backlog=2)
    try:
        assert m.lookup_chain(a, ReqContext("a")).pending
        assert m.lookup_chain(b, ReqContext("b")).pending
        m.flush()  # a's group is held; b's may run or wait: two outstanding
        assert len(m._core.outstanding) == 2
        held = m.lookup_chain(c, ReqContext("c"))
        assert held.pending and held.looked_up == 0 and held.leading_hits == 0
        m.flush()
        assert "c" not in m._core.requests and m.phase(c[0]) is ABSENT
        assert not set(backend.asked) & set(c) and m.walks_held == 1
        backend.release.set()
        _settle(m)
        assert _decide(m, {"a": a, "b": b, "c": c}) == {"a": 10, "b": 30, "c": 50}
    finally:
        backend.release.set()
        m.shutdown()


def test_one_outstanding_group_lets_one_new_walk_start_per_step() -> None:
    chains = [chain(p) for p in range(1, 5)]
    backend = HeldBackend([], held={chains[0][0]})
    m = _manager(backend, start_backlog=2)
    try:
        m.lookup_chain(chains[0], ReqContext("r0"))
        m.flush()  # one held group outstanding
        for i in (1, 2, 3):
            m.lookup_chain(chains[i], ReqContext(f"r{i}"))
        assert [f"r{i}" in m._core.requests for i in (1, 2, 3)] == [True, False, False]
        m.flush()  # r1's group joins the backlog: two outstanding, no new walk starts
        for i in (2, 3):
            assert m.lookup_chain(chains[i], ReqContext(f"r{i}")).looked_up == 0
    finally:
        backend.release.set()
        m.shutdown()


def test_a_walk_under_way_is_never_held() -> None:
    a, b = chain(1), chain(2)
    backend = HeldBackend(a[:20], held={b[0]})
    m = _manager(backend, start_backlog=1)
    try:
        m.lookup_chain(a, ReqContext("a"))
        m.lookup_chain(b, ReqContext("b"))
        m.flush()
        for _ in range(2000):  # a's windows go on while b's group stays outstanding (bounded: 20 s)
            answer = m.lookup_chain(a, ReqContext("a"))
            if answer.decided:
                break
            m.flush()
            time.sleep(0.01)
        assert answer.decided and answer.leading_hits == 20 and m.walks_held == 0
    finally:
        backend.release.set()
        m.shutdown()


def test_new_walks_all_start_while_the_store_keeps_up() -> None:
    backend = HeldBackend([], held=set())
    m = _manager(backend, start_backlog=2)
    chains = {f"r{i}": chain(i) for i in range(8)}
    try:
        for req_id, keys in chains.items():
            assert m.lookup_chain(keys, ReqContext(req_id)).looked_up == 4
        assert _decide(m, chains) == dict.fromkeys(chains, 0)
        assert len(backend.asked) == 8 * 4 and m.walks_held == 0
    finally:
        m.shutdown()


def test_off_by_default_and_at_zero_whatever_is_outstanding() -> None:
    for options, backend_backlog in [({}, None), ({"start_backlog": 0}, 1)]:
        a, b = chain(1), chain(2)
        backend = HeldBackend([], held={a[0]}, start_backlog=backend_backlog)
        m = _manager(backend, **options)
        try:
            assert m.start_backlog is None
            m.lookup_chain(a, ReqContext("a"))
            m.flush()
            assert m.lookup_chain(b, ReqContext("b")).looked_up == 4
        finally:
            backend.release.set()
            m.shutdown()


def test_the_backends_start_backlog_applies_unless_one_is_given() -> None:
    backend = HeldBackend([], held=set(), start_backlog=3)
    for options, expected in [({}, 3), ({"start_backlog": 5}, 5)]:
        m = _manager(backend, **options)
        assert m.start_backlog == expected
        m.shutdown()


def test_a_held_call_with_a_bad_key_is_refused_and_changes_nothing() -> None:
    a = chain(1)
    backend = HeldBackend([], held={a[0]})
    m = _manager(backend, start_backlog=1)
    try:
        m.lookup_chain(a, ReqContext("a"))
        m.flush()
        with pytest.raises(InvalidInputError):
            m.lookup_chain([b"k0", "not bytes"], ReqContext("b"))  # type: ignore[list-item]
        assert m.walks_held == 0 and "b" not in m._core.requests
    finally:
        backend.release.set()
        m.shutdown()


@pytest.mark.parametrize(
    ("asked", "tier", "error", "named"),
    [
        (-1, None, InvalidValueError, "start_backlog must be 0"),
        (1.5, None, InvalidInputError, "start_backlog must be an int"),
        (True, None, InvalidInputError, "start_backlog must be an int"),
        ("2", None, InvalidInputError, "start_backlog must be an int"),
        (None, 0, InvalidValueError, "the backend's start_backlog"),
        (None, "2", InvalidValueError, "the backend's start_backlog"),
    ],
)
def test_a_bad_start_backlog_is_refused_by_name(asked: object, tier: object, error: type, named: str) -> None:
    with pytest.raises(error, match=named):
        start_backlog_of(asked, tier)
    backend = HeldBackend([], held=set(), start_backlog=tier)
    with pytest.raises(error, match=named):
        _manager(backend, start_backlog=asked)


# --- the rule's named mutants, each caught by one of the tests above ------------------

#: Wrong versions of ``starts_walk`` (outstanding, started this step, start backlog) -> starts.
MUTANTS = {
    "always-starts": lambda outstanding, started, limit: True,
    "ignores-an-idle-store": lambda outstanding, started, limit: outstanding + started < limit,
    "ignores-walks-started-this-step": lambda outstanding, started, limit: outstanding == 0 or outstanding < limit,
}
CAUGHT_BY = {
    "always-starts": test_a_new_walk_waits_while_earlier_groups_are_unanswered,
    "ignores-an-idle-store": test_new_walks_all_start_while_the_store_keeps_up,
    "ignores-walks-started-this-step": test_one_outstanding_group_lets_one_new_walk_start_per_step,
}


@pytest.mark.skipif(build_info().kind == "compiled", reason="a compiled core binds starts_walk at build time")
@pytest.mark.parametrize("name", sorted(MUTANTS))
def test_each_named_mutant_of_the_start_rule_is_caught(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from kvprobe.statemachine import chain as walk

    assert set(MUTANTS) == set(CAUGHT_BY)
    monkeypatch.setattr(walk, "starts_walk", MUTANTS[name])
    with pytest.raises(AssertionError):
        CAUGHT_BY[name]()
