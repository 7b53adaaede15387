"""``lookup_chain`` in inferred mode: a gallop-then-bisect search for the stored prefix's end.

On a prefix-closed store (a block is stored only if the blocks before it
are) the walk finds the exact prefix with at most ``2 ceil(log2 n) + 2``
backend checks, verifies the boundary (key ``p - 1`` answered stored, key
``p`` answered NOT stored), never checks a key after a known miss, and
says how many of its hits it inferred.  On a store with a hole the answer
claims the hole; the engine's failed load (``mark_miss``) makes the chain
walked exactly, which finds the true prefix.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from test_chain_windows import CountingTier, chain, step

from kvprobe.backends.fs import FsBackend
from kvprobe.statemachine import (
    AsyncLookupManager,
    ChainAnswer,
    InvalidInputError,
    InvalidValueError,
    LookupCore,
    ReqContext,
)
from kvprobe.statemachine.inferred import REFUTED_MEMORY, next_position, refute

CTX = ReqContext("r1")


def manager(tier: CountingTier, *, checked: bool = True, **options: Any) -> AsyncLookupManager:
    return AsyncLookupManager(tier, worker="manual", checked=checked, chain_mode="inferred", **options)


def decide(m: AsyncLookupManager, keys: Sequence[bytes], ctx: ReqContext = CTX, limit: int = 60) -> ChainAnswer:
    """Steps until the answer is decided; returns it."""
    for _ in range(limit):
        answer = step(m, keys, ctx)
        if answer.decided:
            return answer
    raise AssertionError(f"not decided after {limit} steps: {answer}")


def bound(n: int) -> int:
    return 2 * math.ceil(math.log2(n)) + 2 if n > 1 else 2


LENGTHS = [1, 2, 3, 4, 5, 7, 8, 9, 16, 17, 33, 100, 1000, 3600]


def prefixes(n: int) -> list[int]:
    return sorted({0, 1, 2, n // 3, n // 2, n - 2, n - 1, n} & set(range(n + 1)))


@pytest.mark.parametrize("n", LENGTHS)
def test_the_exact_prefix_is_found_in_logarithmically_many_checks(n: int) -> None:
    keys = chain(n)
    for p in prefixes(n):
        tier = CountingTier(set(keys[:p]))
        m = manager(tier, checked=n <= 100)
        answer = decide(m, keys)
        assert (answer.leading_hits, answer.stopped_at_miss) == (p, p < n), (n, p)
        checked = tier.checked
        assert len(checked) <= bound(n), (n, p, len(checked))
        assert len(set(checked)) == len(checked), "a key was checked twice"
        # The boundary was verified by the backend: key p-1 stored, key p not.
        answered = {k: v for keys_, answers in tier.calls for k, v in zip(keys_, answers, strict=True)}
        if p > 0:
            assert answered[keys[p - 1]] is True
        if p < n:
            assert answered[keys[p]] is False
        # Every hit not checked was inferred; every checked hit was answered stored.
        verified = sum(1 for k in keys[:p] if answered.get(k) is True)
        assert answer.inferred == p - verified
        m.shutdown()


def test_one_key_per_step_and_none_after_a_known_miss() -> None:
    keys = chain(3600)
    for p in (0, 5, 1000, 2047, 2048, 3599):
        tier = CountingTier(set(keys[:p]))
        m = manager(tier, checked=False)
        decide(m, keys)
        first_miss = len(keys)
        for call_keys, answers in tier.calls:
            assert len(call_keys) == 1  # a search probes one position per step
            position = keys.index(call_keys[0])
            assert position < first_miss, f"key {position} checked after the miss at {first_miss}"
            if not answers[0]:
                first_miss = min(first_miss, position)
        m.shutdown()


def test_the_gallop_positions_then_the_midpoints() -> None:
    # 0, 1, 3, 7, ... while no miss is known; the midpoint after one.
    assert [next_position(lo, 100, 100) for lo in (-1, 0, 1, 3, 7, 63)] == [0, 1, 3, 7, 15, 99]
    assert next_position(7, 15, 100) == 11
    assert next_position(-1, 1, 100) == 0
    keys = chain(100)
    tier = CountingTier(set(keys[:10]))
    decide(manager(tier), keys)
    assert [keys.index(k) for k in tier.checked] == [0, 1, 3, 7, 15, 11, 9, 10]


def test_a_pending_answer_counts_the_prefix_so_far_and_asks_again() -> None:
    keys = chain(20)
    m = manager(CountingTier(set(keys[:12])))
    assert step(m, keys) == ChainAnswer(0, False, True, 1, 0)
    assert step(m, keys) == ChainAnswer(1, False, True, 2, 0)  # key 0 read, key 1 asked
    assert step(m, keys) == ChainAnswer(2, False, True, 3, 0)  # keys 0, 1 read, key 3 asked
    answer = step(m, keys)  # key 3 stored: keys 0..3 inferred up to it, key 2 not checked
    assert answer == ChainAnswer(4, False, True, 4, 1)


def test_a_hole_is_claimed_until_its_load_fails_then_the_chain_is_walked_exactly() -> None:
    # Not prefix-closed: key 2 of 8 is missing, the rest stored.
    keys = chain(8)
    tier = CountingTier(set(keys) - {keys[2]})
    m = manager(tier)
    answer = decide(m, keys)
    assert (answer.leading_hits, answer.inferred) == (8, 4)  # 0, 1, 3, 7 checked: 2, 4, 5, 6 inferred
    assert keys[2] not in tier.checked
    # The engine's load of key 2 fails: the contract's mark_miss.
    m.mark_miss([keys[2]])
    answer = decide(m, keys)
    assert answer == ChainAnswer(2, True, False, 3, 0)  # the exact walk: keys 0, 1 stored, key 2 not
    assert keys[2] in tier.checked
    # Another request's walk of the same chain is exact too: the store is not prefix-closed there.
    other = decide(m, keys, ReqContext("r2"))
    assert (other.leading_hits, other.inferred) == (2, 0)


def test_a_refuted_key_in_another_chain_does_not_stop_inference_elsewhere() -> None:
    keys = chain(40)
    tier = CountingTier(set(keys[:30]))
    m = manager(tier)
    m.mark_miss([b"elsewhere-------"])
    answer = decide(m, keys[:20])
    assert answer.inferred > 0 and answer.leading_hits == 20


def test_the_refuted_memory_keeps_the_latest_keys() -> None:
    core = LookupCore()
    refute(core, [bytes([i % 256, i // 256]) for i in range(REFUTED_MEMORY + 5)])
    assert len(core.refuted_keys) == REFUTED_MEMORY
    assert bytes([0, 0]) not in core.refuted_keys
    assert bytes([(REFUTED_MEMORY + 4) % 256, (REFUTED_MEMORY + 4) // 256]) in core.refuted_keys


def test_exact_mode_is_the_default_and_infers_nothing() -> None:
    keys = chain(8)
    m = AsyncLookupManager(CountingTier(set(keys)), worker="manual")
    assert m.chain_mode == "exact"
    answers = [step(m, keys), step(m, keys)]
    assert answers[-1] == ChainAnswer(8, False, False, 8, 0)
    core = LookupCore()
    assert core.chain_mode == "exact"
    core.mark_miss([keys[3]])
    assert core.refuted_keys == {}  # exact mode remembers nothing


@pytest.mark.parametrize("bad", ["Inferred", "prefix", ""])
def test_a_bad_chain_mode_string_is_a_value_error_naming_it(bad: str) -> None:
    with pytest.raises(InvalidValueError, match=f"chain_mode must be 'exact' or 'inferred', got {bad!r}"):
        AsyncLookupManager(CountingTier(set()), worker="manual", chain_mode=bad)  # type: ignore[arg-type]
    assert issubclass(InvalidValueError, ValueError)


def test_a_chain_mode_that_is_not_a_string_is_refused() -> None:
    with pytest.raises(InvalidInputError, match="chain_mode must be 'exact' or 'inferred', got int"):
        AsyncLookupManager(CountingTier(set()), worker="manual", chain_mode=1)  # type: ignore[arg-type]


def test_bad_keys_are_refused_before_anything_changes() -> None:
    m = manager(CountingTier(set()))
    with pytest.raises(InvalidInputError, match="keys must be bytes"):
        m.lookup_chain([b"a" * 16, "b"], CTX)  # type: ignore[list-item]
    assert len(m) == 0
    assert m.lookup_chain([], CTX) == ChainAnswer(0, False, False, 0, 0)


def test_through_the_threaded_manager_on_a_file_tree(tmp_path: Path) -> None:
    keys = chain(3600)
    backend = FsBackend(tmp_path)
    for key in keys[:700]:
        backend.store(key)
    m = AsyncLookupManager(backend, chain_mode="inferred")
    try:
        deadline = time.monotonic() + 60
        steps = 0
        answer = m.lookup_chain(keys, CTX)
        while not answer.decided:
            assert time.monotonic() < deadline, answer
            m.flush()
            steps += 1
            time.sleep(0.002)  # the worker's thread answers meanwhile
            answer = m.lookup_chain(keys, CTX)
        assert (answer.leading_hits, answer.stopped_at_miss) == (700, True)
        assert m.stats.probes_created <= bound(3600)
        assert answer.inferred >= 700 - bound(3600)  # all but the checked hits
    finally:
        m.shutdown()


def test_the_search_decides_every_prefix_of_short_chains_within_the_bound() -> None:
    # Exhaustive over the stored prefix, on the search's own rule: the
    # position it probes next given what it knows.
    for n in range(1, 130):
        for p in range(n + 1):
            lo, hi, probes = -1, n, 0
            while hi > lo + 1:
                position = next_position(lo, hi, n)
                assert lo < position < hi
                probes += 1
                lo, hi = (position, hi) if position < p else (lo, position)
            assert (lo + 1, probes <= bound(n)) == (p, True), (n, p, probes)


def test_a_refuted_key_answered_stored_again_is_forgiven_and_the_chain_searched_again() -> None:
    keys = chain(8)
    tier = CountingTier(set(keys) - {keys[2]})
    m = manager(tier)
    assert decide(m, keys).inferred == 4
    m.mark_miss([keys[2]])
    assert decide(m, keys).leading_hits == 2  # exact: the hole found
    m.cleanup("r1")
    tier.stored.add(keys[2])  # the engine wrote the block back
    exact = decide(m, keys, ReqContext("r2"))
    assert (exact.leading_hits, exact.inferred, exact.looked_up) == (8, 0, 8)  # still exact: the key was refuted
    searched = decide(m, keys, ReqContext("r3"))  # the backend answered it stored: forgiven
    assert (searched.leading_hits, searched.inferred) == (8, 4)
