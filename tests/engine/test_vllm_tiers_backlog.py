"""kvprobe's vLLM tiers under a store that cannot keep up: walks already started go first.

The object tier's lookup calls run one at a time, each waiting for the
store's pace.  When the calls submitted at earlier steps are still
unanswered (a backlog), a request that has not started its walk is held back
(its positioned keys answer None, no probe) while ``start_backlog`` or more
calls are outstanding, so that the walks already under way are not shared
out among ever more requests until none finishes by its deadline.  With no
backlog nothing changes.  Counted (keys asked, states held), not timed.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

import pytest
from position_scan import PositionedContext, chain_keys, maximal_prefix_scan

from kvprobe.integrations.vllm.tiers.lookup import TierLookupManager
from kvprobe.integrations.vllm.tiers.options import TierConfigError, tier_lookup_options
from kvprobe.statemachine.windows import window_end

_OPTIONS = tier_lookup_options(
    chain_mode="exact",
    lookup_timeout_s=3600,  # a held call must stay outstanding: only the release may end it
    default_timeout_s=30.0,
    cache_hit_ttl_s=0,
    cache_miss_ttl_s=0,
    cache_max_entries=None,
)


class HeldBackend:
    """The object backend's schedule, answering from a set; a call asking for a ``held`` key waits for ``release``."""

    chain_schedule = (4, 1.25)

    def __init__(self, stored: Sequence[bytes], held: set[bytes]) -> None:
        self.stored = set(stored)
        self.held = held
        self.release = threading.Event()
        self.asked: list[bytes] = []

    def batch_lookup(self, keys: Sequence[bytes], req_context: object) -> list[bool]:
        self.asked.extend(keys)
        if self.held & set(keys):
            self.release.wait(120)  # bounded: the test releases it as soon as it has looked
        return [k in self.stored for k in keys]


def _request(name: str, prompt: int, tier: TierLookupManager) -> tuple[list[bytes], PositionedContext]:
    keys = chain_keys(prompt, 64)
    ctx = PositionedContext(name)
    ctx.record(keys)
    return keys, ctx


def _settle(tier: TierLookupManager) -> None:
    """Wait (polling the core, bounded by count) until every submitted call is answered."""
    for _ in range(1_000_000):
        tier.drain_results()
        if not tier.manager.core.outstanding:
            return
    raise AssertionError("calls still outstanding")


def _decide(tier: TierLookupManager, requests: list[tuple[list[bytes], PositionedContext]]) -> list[int]:
    """vLLM's scan of every request each step until all are decided; the counts."""
    found: dict[str, int] = {}
    for _ in range(400):
        for keys, ctx in requests:
            if ctx.req_id not in found:
                count = maximal_prefix_scan(tier, keys, ctx)
                if count is not None:
                    found[ctx.req_id] = count
        if len(found) == len(requests):
            return [found[ctx.req_id] for _, ctx in requests]
        tier.flush()
        _settle(tier)
    raise AssertionError(f"undecided after 400 steps: {found}")


def test_a_new_walk_waits_while_earlier_calls_are_unanswered() -> None:
    tier_keys = [chain_keys(p, 64) for p in (1, 2, 3)]
    backend = HeldBackend([*tier_keys[0][:10], *tier_keys[1][:30], *tier_keys[2][:50]], held={tier_keys[0][0]})
    tier = TierLookupManager(backend, "obj-held", _OPTIONS, start_backlog=2)
    a, b, c = (_request(name, p, tier) for name, p in (("a", 1), ("b", 2), ("c", 3)))
    try:
        assert maximal_prefix_scan(tier, *a) is None
        assert maximal_prefix_scan(tier, *b) is None
        tier.flush()  # a's call starts and is held; b's waits behind it: two outstanding
        assert len(tier.manager.core.outstanding) == 2
        assert maximal_prefix_scan(tier, *c) is None
        tier.flush()
        # c has not started: it holds no probe and the store was asked none of its keys.
        assert "c" not in tier.manager.core.requests
        assert not set(backend.asked) & set(c[0])
        backend.release.set()
        _settle(tier)
        assert _decide(tier, [a, b, c]) == [10, 30, 50]
        # Held back, c still walked the object schedule's windows, no more.
        assert len([k for k in backend.asked if k in set(c[0])]) == window_end(4, 50, 1.25)
    finally:
        backend.release.set()
        tier.shutdown()


def test_one_outstanding_call_lets_one_new_walk_start_per_step() -> None:
    keys = [chain_keys(p, 64) for p in range(1, 5)]
    backend = HeldBackend([], held={keys[0][0]})
    tier = TierLookupManager(backend, "obj-held", _OPTIONS, start_backlog=2)
    first, *later = (_request(f"r{i}", i + 1, tier) for i in range(4))
    try:
        assert maximal_prefix_scan(tier, *first) is None
        tier.flush()  # one held call outstanding
        for request in later:
            assert maximal_prefix_scan(tier, *request) is None
        assert [ctx.req_id in tier.manager.core.requests for _, ctx in later] == [True, False, False]
    finally:
        backend.release.set()
        tier.shutdown()


def test_new_walks_all_start_while_the_store_keeps_up() -> None:
    backend = HeldBackend([], held=set())
    tier = TierLookupManager(backend, "obj-quick", _OPTIONS, start_backlog=2)
    requests = [_request(f"r{i}", i + 1, tier) for i in range(8)]
    try:
        for request in requests:
            assert maximal_prefix_scan(tier, *request) is None
        assert all(ctx.req_id in tier.manager.core.requests for _, ctx in requests)
        assert _decide(tier, requests) == [0] * 8
        assert len(backend.asked) == 8 * 4  # each walk's first window, nothing else
    finally:
        tier.shutdown()


def test_keys_without_positions_are_never_held_back() -> None:
    keys = [chain_keys(p, 8) for p in (1, 2, 3)]
    backend = HeldBackend(keys[2][:3], held={keys[0][0], keys[1][0]})
    tier = TierLookupManager(backend, "obj-held", _OPTIONS, start_backlog=2)
    try:
        for i in range(2):
            assert tier.lookup(keys[i][0], PositionedContext(f"held{i}")) is None  # no positions recorded
        tier.flush()
        plain = PositionedContext("plain")
        assert tier.lookup(keys[2][0], plain) is None
        assert "plain" in tier.manager.core.requests  # probed as without the backlog rule
    finally:
        backend.release.set()
        tier.shutdown()


def test_without_a_start_backlog_new_walks_start_whatever_is_outstanding() -> None:
    keys = [chain_keys(p, 64) for p in (1, 2, 3)]
    backend = HeldBackend([], held={keys[0][0]})
    tier = TierLookupManager(backend, "obj-held", _OPTIONS)
    a, b, c = (_request(name, p, tier) for name, p in (("a", 1), ("b", 2), ("c", 3)))
    try:
        maximal_prefix_scan(tier, *a)
        maximal_prefix_scan(tier, *b)
        tier.flush()
        maximal_prefix_scan(tier, *c)
        assert "c" in tier.manager.core.requests
    finally:
        backend.release.set()
        tier.shutdown()


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "2"])
def test_a_start_backlog_that_is_not_a_positive_int_is_refused(bad: object) -> None:
    with pytest.raises(TierConfigError, match="start_backlog"):
        TierLookupManager(HeldBackend([], set()), "obj", _OPTIONS, start_backlog=bad)  # type: ignore[arg-type]


# --- the rule's named mutants, each caught by one of the tests above ------------------

#: Wrong versions of :func:`starts_walk` (outstanding, started this step, start backlog) -> starts.
MUTANTS = {
    "always-starts": lambda outstanding, started, limit: True,  # no backlog rule at all
    "ignores-an-idle-store": lambda outstanding, started, limit: outstanding + started < limit,
    "ignores-walks-started-this-step": lambda outstanding, started, limit: outstanding == 0 or outstanding < limit,
}
CAUGHT_BY = {
    "always-starts": test_a_new_walk_waits_while_earlier_calls_are_unanswered,
    "ignores-an-idle-store": test_new_walks_all_start_while_the_store_keeps_up,
    "ignores-walks-started-this-step": test_one_outstanding_call_lets_one_new_walk_start_per_step,
}


@pytest.mark.parametrize("name", sorted(MUTANTS))
def test_each_named_mutant_of_the_start_rule_is_caught(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from kvprobe.integrations.vllm.tiers import lookup

    assert set(MUTANTS) == set(CAUGHT_BY)
    monkeypatch.setattr(lookup, "starts_walk", MUTANTS[name])
    with pytest.raises(AssertionError):
        CAUGHT_BY[name]()
