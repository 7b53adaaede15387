"""Windows from key positions in the drop-in (issue 38, part 1).

The pure rule (:func:`kvprobe.statemachine.positions.decide`) on its own,
then through the drop-in under a vLLM-like scan (keys asked one by one in
chain order, the scan going on past a None), with a property check that
no key past a known miss of the same request is ever submitted, and named
mutants of the rule that these tests catch.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st
from position_scan import PositionedContext, chain_keys, maximal_prefix_scan, run_manual_step
from vllm_harness import ScriptedTier

from kvprobe.integrations.vllm import AsyncLookupManager
from kvprobe.statemachine.positions import (
    DEFER,
    INFERRED_HIT,
    PAST_MISS,
    PROBE,
    Decision,
    PositionBook,
    Verdicts,
    decide,
    lane_of,
)
from kvprobe.statemachine.windows import ALL, window_end

KEYS = [bytes([i]) * 8 + bytes(4) for i in range(64)]


def verdicts_of(known: dict[int, bool]) -> Verdicts:
    return lambda key: known.get(KEYS.index(key))


# --- the pure rule ------------------------------------------------------------------


def test_first_window_is_probed_and_the_rest_deferred() -> None:
    nothing = verdicts_of({})
    assert [decide(KEYS, r, nothing, 16, 2.0, False) for r in (0, 15, 16, 63)] == [PROBE, PROBE, DEFER, DEFER]


def test_window_grows_as_the_keys_before_resolve_stored() -> None:
    first_window_stored = verdicts_of(dict.fromkeys(range(16), True))
    assert decide(KEYS, 47, first_window_stored, 16, 2.0, False) is PROBE
    assert decide(KEYS, 48, first_window_stored, 16, 2.0, False) is DEFER
    assert window_end(16, 16, 2.0) == 48


def test_nothing_past_a_known_miss() -> None:
    known = {**dict.fromkeys(range(10), True), 10: False}
    assert decide(KEYS, 11, verdicts_of(known), 16, 2.0, False) is PAST_MISS
    assert decide(KEYS, 11, verdicts_of(known), ALL, 2.0, False) is PAST_MISS
    # A miss after an unknown key still bounds the walk.
    assert decide(KEYS, 12, verdicts_of({3: False}), 16, 2.0, False) is PAST_MISS


def test_one_window_probes_everything_before_a_miss() -> None:
    assert decide(KEYS, 63, verdicts_of({}), ALL, 2.0, False) is PROBE


def test_inferred_rule_follows_the_search() -> None:
    nothing = verdicts_of({})
    assert [decide(KEYS, r, nothing, 16, 2.0, True) for r in (0, 1, 5)] == [PROBE, DEFER, DEFER]
    zero_stored = verdicts_of({0: True})
    assert decide(KEYS, 1, zero_stored, 16, 2.0, True) is PROBE
    assert decide(KEYS, 2, zero_stored, 16, 2.0, True) is DEFER
    # Stored at 31 and not at 63: keys up to 31 are inferred stored, 47 (the midpoint) is probed next.
    galloped = {0: True, 1: True, 3: True, 7: True, 15: True, 31: True, 63: False}
    assert decide(KEYS, 20, verdicts_of(galloped), 16, 2.0, True) is INFERRED_HIT
    assert decide(KEYS, 47, verdicts_of(galloped), 16, 2.0, True) is PROBE
    assert decide(KEYS, 40, verdicts_of(galloped), 16, 2.0, True) is DEFER
    assert decide(KEYS, 50, verdicts_of({**galloped, 47: False}), 16, 2.0, True) is PAST_MISS


def test_a_deferred_key_reads_the_stored_prefix_and_one_window_at_most() -> None:
    chain = [i.to_bytes(4, "big") + bytes(4) for i in range(4000)]
    reads: list[bytes] = []

    def stored_below_100(key: bytes) -> bool | None:
        reads.append(key)
        return True if int.from_bytes(key[:4], "big") < 100 else None

    assert decide(chain, 3999, stored_below_100, 16, 2.0, False) is DEFER
    assert len(reads) == window_end(16, 100, 2.0)  # not 3999


def test_book_orders_keys_by_position_per_lane() -> None:
    book = PositionBook()
    other_lane = b"\x00" * 8 + (1).to_bytes(4, "big")
    assert lane_of(other_lane) != lane_of(KEYS[0])
    assert book.place(KEYS[2], 48) == ([KEYS[2]], 0)
    assert book.place(KEYS[0], 16) == ([KEYS[0], KEYS[2]], 0)
    assert book.place(other_lane, 32) == ([other_lane], 0)
    assert book.place(KEYS[1], 32) == ([KEYS[0], KEYS[1], KEYS[2]], 1)
    assert book.place(KEYS[2], 999)[1] == 2  # placed once, where first given
    assert len(book) == 4


# --- through the drop-in ------------------------------------------------------------


class CountingTier(ScriptedTier, AsyncLookupManager):
    """A set of stored keys on the drop-in; ``calls`` records every batch_lookup."""


def make_tier(stored: list[bytes], tier_class: type[CountingTier] = CountingTier, **extras: object) -> CountingTier:
    return tier_class("positions", stored=stored, worker="manual", **extras)


def scan_until_decided(tier: CountingTier, keys: list[bytes], ctx: PositionedContext, steps: int = 40) -> int:
    for _ in range(steps):
        found = maximal_prefix_scan(tier, keys, ctx)
        if found is not None:
            return found
        run_manual_step(tier)
    raise AssertionError(f"undecided after {steps} steps")


def probed(tier: CountingTier) -> list[bytes]:
    return [k for keys, _ in tier.calls for k in keys]


@pytest.mark.parametrize(("stored", "expected_probes"), [(0, 16), (10, 16), (16, 48), (40, 48), (64, 64)])
def test_scan_probes_in_windows_and_finds_the_exact_prefix(stored: int, expected_probes: int) -> None:
    keys = chain_keys(1, 64)
    tier = make_tier(keys[:stored])
    ctx = PositionedContext("r1")
    ctx.record(keys)
    assert scan_until_decided(tier, keys, ctx) == stored
    assert len(probed(tier)) == expected_probes
    assert len(set(probed(tier))) == expected_probes
    tier.cleanup("r1")
    assert tier._books == {}
    tier.shutdown()


def test_keys_without_positions_are_probed_as_before() -> None:
    keys = chain_keys(2, 64)
    tier = make_tier(keys[:5])
    ctx = PositionedContext("r1")  # nothing recorded
    assert maximal_prefix_scan(tier, keys, ctx) is None
    run_manual_step(tier)
    assert len(probed(tier)) == 64
    tier.shutdown()


def test_tier_schedule_and_inferred_mode() -> None:
    class NarrowTier(CountingTier):
        chain_schedule = (4, 1.25)

    keys = chain_keys(3, 64)
    narrow = make_tier(keys[:8], NarrowTier)
    assert (narrow.manager.chain_window, narrow.manager.chain_window_growth) == (4, 1.25)
    ctx = PositionedContext("r1")
    ctx.record(keys)
    assert scan_until_decided(narrow, keys, ctx) == 8
    assert len(probed(narrow)) == window_end(4, 8, 1.25)
    narrow.shutdown()

    inferred = make_tier(keys[:40], chain_mode="inferred")
    ctx = PositionedContext("r2")
    ctx.record(keys)
    assert scan_until_decided(inferred, keys, ctx) == 40
    assert len(probed(inferred)) <= 14  # 2 ceil(log2 64) + 2
    inferred.shutdown()


# --- the property: nothing past a known miss is submitted ---------------------------


def past_a_known_miss(rule_tier: type[CountingTier], stored: set[int], order_steps: list[bool], first: int) -> None:
    """Scan a 24-key chain with holes; each step's scan either stops at a miss (vLLM) or goes on.

    History: every answer False given to the request (position, seq) and
    every key's first lookup in each step (seq); a key submitted in a step
    must not have been first looked up in it after a False for an earlier position.
    """
    keys = chain_keys(4, 24)
    tier = make_tier([keys[i] for i in stored], rule_tier, chain_window=first)
    ctx = PositionedContext("r1")
    ctx.record(keys)
    seq = 0
    misses: list[tuple[int, int]] = []  # (position, seq) of each False answered
    for stop_at_miss in order_steps:
        first_asked: dict[bytes, int] = {}
        for position, key in enumerate(keys):
            seq += 1
            first_asked.setdefault(key, seq)
            answer = tier.lookup(key, ctx)
            if answer is False:
                misses.append((position, seq))
                if stop_at_miss:
                    break
        before = len(tier.calls)
        run_manual_step(tier)
        for submitted, _ in tier.calls[before:]:
            for key in submitted:
                position, asked = keys.index(key), first_asked[key]
                assert not any(p < position and s < asked for p, s in misses), (
                    f"key {position} submitted after a known miss at {[p for p, s in misses if s < asked]}"
                )
    tier.shutdown()


@settings(max_examples=60)
@given(
    stored=st.sets(st.integers(0, 23)),
    order_steps=st.lists(st.booleans(), min_size=1, max_size=8),
    first=st.sampled_from([1, 2, 4, 16]),
)
def test_no_key_past_a_known_miss_is_submitted(stored: set[int], order_steps: list[bool], first: int) -> None:
    past_a_known_miss(CountingTier, stored, order_steps, first)


@settings(max_examples=60)
@given(
    prefix=st.integers(0, 24),
    beyond=st.sets(st.integers(0, 23)),
    first=st.sampled_from([1, 2, 4, 16]),
    mode=st.sampled_from(["exact", "inferred"]),
)
def test_vllm_scan_decides_the_exact_prefix(prefix: int, beyond: set[int], first: int, mode: str) -> None:
    decides_the_exact_prefix(CountingTier, prefix, beyond, first, mode)


def decides_the_exact_prefix(
    tier_class: type[CountingTier], prefix: int, beyond: set[int], first: int, mode: str
) -> None:
    """Liveness and exactness: while the scan keeps asking, it decides, and finds the stored prefix.

    Exact mode gets stored keys after the first missing one too (``beyond``);
    inferred mode prefix-closed stores only (its assumption).
    """
    keys = chain_keys(6, 24)
    stored = set(range(prefix)) | ({i for i in beyond if i > prefix} if mode == "exact" else set())
    tier = make_tier([keys[i] for i in stored], tier_class, chain_window=first, chain_mode=mode)
    ctx = PositionedContext("r1")
    ctx.record(keys)
    assert scan_until_decided(tier, keys, ctx, steps=60) == prefix
    if mode == "exact":  # the windows up to the one holding the miss
        assert len(probed(tier)) == (24 if prefix == 24 else min(24, window_end(first, prefix, 2.0)))
    else:  # galloping then bisection, one key at a time
        assert len(probed(tier)) <= 2 * 5 + 2
    tier.shutdown()


# --- named mutants of the rule ------------------------------------------------------


def _probes_past_a_known_miss(
    chain: list[bytes], rank: int, verdict: Verdicts, first: int, growth: float, search: bool
) -> Decision:
    answer = decide(chain, rank, verdict, first, growth, search)
    return PROBE if answer is PAST_MISS else answer


def _never_opens_the_window(
    chain: list[bytes], rank: int, verdict: Verdicts, first: int, growth: float, search: bool
) -> Decision:
    answer = decide(chain, rank, verdict, first, growth, search)
    return DEFER if answer is PROBE and rank >= first else answer


class ProbesPastAKnownMiss(CountingTier):
    position_rule = (_probes_past_a_known_miss,)


class NeverOpensTheWindow(CountingTier):
    position_rule = (_never_opens_the_window,)


def test_mutant_probes_past_a_known_miss_is_caught() -> None:
    with pytest.raises(AssertionError, match="submitted after a known miss"):
        past_a_known_miss(ProbesPastAKnownMiss, {0, 1, 5, 6}, [False, False, False], 4)


def test_mutant_probes_past_a_known_miss_is_found_by_the_property() -> None:
    @settings(max_examples=60, derandomize=True, database=None)
    @given(stored=st.sets(st.integers(0, 23)), order_steps=st.lists(st.booleans(), min_size=1, max_size=8))
    def check(stored: set[int], order_steps: list[bool]) -> None:
        past_a_known_miss(ProbesPastAKnownMiss, stored, order_steps, 4)

    with pytest.raises(AssertionError, match="submitted after a known miss"):
        check()


def test_mutant_never_opens_the_window_is_found_by_the_property() -> None:
    @settings(max_examples=60, derandomize=True, database=None)
    @given(prefix=st.integers(0, 24), first=st.sampled_from([1, 2, 4, 16]))
    def check(prefix: int, first: int) -> None:
        decides_the_exact_prefix(NeverOpensTheWindow, prefix, set(), first, "exact")

    with pytest.raises(AssertionError, match="undecided"):
        check()


def test_mutant_never_opens_the_window_is_caught() -> None:
    keys = chain_keys(5, 64)
    tier = make_tier(keys[:40], NeverOpensTheWindow)
    ctx = PositionedContext("r1")
    ctx.record(keys)
    with pytest.raises(AssertionError, match="undecided"):
        scan_until_decided(tier, keys, ctx)
    tier.shutdown()
