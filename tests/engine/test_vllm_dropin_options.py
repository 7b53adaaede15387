"""The drop-in's ``chain_mode`` and ``verdict_cache``: the native manager's options, passed through.

``chain_mode="inferred"`` makes ``lookup_chain`` search a prefix-closed
tier's chain for its stored prefix's end (a few backend checks, the rest
inferred); ``verdict_cache`` remembers the backend's answers across
requests, and a failed load (``mark_miss``) forgets them.  Bad values raise
what the native manager raises, with the same message.  The defaults stay
as vLLM 0.33 expects: the exact walk, no cache (docs/vllm.md).
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from vllm_harness import SetTier

from kvprobe.backends import InMemoryBackend
from kvprobe.integrations.vllm import ChainAnswer
from kvprobe.statemachine import AsyncLookupManager as NativeManager, ReqContext, VerdictCache
from kvprobe.statemachine.types import InvalidInputError, InvalidValueError
from kvprobe.statemachine.workers import ManualWorker

DOCS = Path(__file__).resolve().parents[2] / "docs" / "vllm.md"
KEY_A = b"block-a" * 3
R1, R2, R3 = ReqContext("r1"), ReqContext("r2"), ReqContext("r3")


def chain(n: int) -> list[bytes]:
    return [b"blk" + i.to_bytes(4, "big") for i in range(n)]


def manual_tier(stored: Sequence[bytes] = (), **options: Any) -> SetTier:
    return SetTier(stored=stored, worker="manual", checked=True, **options)


def answer_step(tier: SetTier) -> None:
    """End of step: flush, the worker answers every group, the answers are applied."""
    tier.flush()
    worker = tier.manager.worker
    assert isinstance(worker, ManualWorker)
    worker.run_all()
    tier.drain_results()


def decide(tier: SetTier, keys: Sequence[bytes], ctx: ReqContext = R1, limit: int = 60) -> ChainAnswer:
    """Scheduler steps until the chain's answer is decided; returns it."""
    for _ in range(limit):
        answer = tier.lookup_chain(keys, ctx)
        if answer.decided:
            return answer
        answer_step(tier)
    raise AssertionError(f"not decided after {limit} steps: {answer}")


def checked_keys(tier: SetTier) -> list[bytes]:
    return [key for keys, _ in tier.calls for key in keys]


# --- chain_mode ------------------------------------------------------------------


@pytest.mark.parametrize(("n", "prefix"), [(200, 137), (200, 0), (200, 200), (33, 1)])
def test_inferred_mode_finds_a_prefix_closed_chains_length_with_few_checks(n: int, prefix: int) -> None:
    keys = chain(n)
    tier = manual_tier(keys[:prefix], chain_mode="inferred")
    try:
        assert tier.manager.chain_mode == "inferred"
        answer = decide(tier, keys)
        assert (answer.leading_hits, answer.stopped_at_miss) == (prefix, prefix < n)
        checked = checked_keys(tier)
        assert len(checked) <= 2 * math.ceil(math.log2(n)) + 2
        # The hits the backend did not answer are the ones counted as inferred.
        answered_stored = [k for k in checked if k in tier.stored]
        assert answer.inferred == prefix - len(answered_stored)
    finally:
        tier.shutdown()


def test_the_exact_walk_stays_the_default_and_checks_every_key_up_to_the_miss() -> None:
    keys = chain(200)
    tier = manual_tier(keys[:137])
    try:
        assert tier.manager.chain_mode == "exact"
        answer = decide(tier, keys)
        assert answer == ChainAnswer(137, True, False, 138, 0)
        # Every key up to the miss was checked (and the rest of its window, 112 to 199).
        assert checked_keys(tier) == keys
    finally:
        tier.shutdown()


def test_a_failed_load_of_an_inferred_key_makes_the_drop_in_walk_the_chain_exactly() -> None:
    keys = chain(64)
    hole = keys[20]  # the store is not prefix-closed here: every key of the first 40 but this one
    tier = manual_tier([k for k in keys[:40] if k != hole], chain_mode="inferred")
    try:
        claimed = decide(tier, keys)
        assert hole not in checked_keys(tier)  # the search did not land on the hole ...
        assert claimed.leading_hits == 40 and claimed.inferred > 0  # ... so it claims it stored
        assert tier.manager.core.phase(hole) is None  # an inferred key has no probe state
        tier.mark_miss([hole])  # loading it failed: the drop-in passes a key without a state on
        assert decide(tier, keys, R2) == ChainAnswer(20, True, False, 21, 0)
    finally:
        tier.shutdown()


# --- verdict_cache ---------------------------------------------------------------


def test_with_a_cache_a_second_request_is_answered_from_memory_and_mark_miss_forgets() -> None:
    tier = manual_tier([KEY_A], verdict_cache=VerdictCache(max_entries=8, hit_ttl_s=3600.0))
    try:
        assert tier.lookup(KEY_A, R1) is None
        answer_step(tier)
        assert tier.lookup(KEY_A, R1) is True
        tier.cleanup("r1")
        assert len(tier) == 0  # the state is reclaimed; the answer is remembered
        assert tier.lookup(KEY_A, R2) is True  # at once, no probe
        answer_step(tier)
        assert tier.calls == [([KEY_A], "r1")]
        tier.mark_miss([KEY_A])  # loading it failed: another engine evicted it
        assert tier.lookup(KEY_A, R2) is False
        tier.cleanup("r2")
        assert tier.lookup(KEY_A, R3) is None  # forgotten: probed afresh
        answer_step(tier)
        assert tier.calls == [([KEY_A], "r1"), ([KEY_A], "r3")]
        memory = tier.manager.core.memory
        assert memory is not None and (memory.recalled, memory.forgotten) == (1, 1)
    finally:
        tier.shutdown()


def test_without_a_cache_every_request_probes_again_as_in_vllm() -> None:
    tier = manual_tier([KEY_A])
    try:
        for ctx in (R1, R2):
            assert tier.lookup(KEY_A, ctx) is None
            answer_step(tier)
            assert tier.lookup(KEY_A, ctx) is True
            tier.cleanup(ctx.req_id)
        assert tier.calls == [([KEY_A], "r1"), ([KEY_A], "r2")]
        assert tier.manager.core.memory is None
    finally:
        tier.shutdown()


# --- bad values: the native manager's errors -------------------------------------


@pytest.mark.parametrize(
    ("options", "error"),
    [
        ({"chain_mode": "fast"}, InvalidValueError),
        ({"chain_mode": "Exact"}, InvalidValueError),
        ({"chain_mode": 1}, InvalidInputError),
        ({"chain_mode": None}, InvalidInputError),
        ({"verdict_cache": {"max_entries": 2, "hit_ttl_s": 1.0}}, InvalidInputError),
        ({"verdict_cache": 8}, InvalidInputError),
    ],
)
def test_bad_values_raise_the_native_managers_typed_error(options: dict[str, Any], error: type[Exception]) -> None:
    with pytest.raises(error) as native:
        NativeManager(InMemoryBackend(), name="set", worker="manual", **options)
    with pytest.raises(error) as drop_in:
        SetTier(**options)  # the default threaded worker: refused before anything starts
    assert type(drop_in.value) is type(native.value)
    assert str(drop_in.value) == str(native.value)
    assert re.search(r"chain_mode|VerdictCache", str(drop_in.value))


# --- docs/vllm.md ----------------------------------------------------------------


def test_docs_list_chain_answers_fields_as_they_are() -> None:
    text = DOCS.read_text()
    listed = re.findall(r"`ChainAnswer\(([a-z_, ]+)\)`", text)
    assert listed, "docs/vllm.md lists no ChainAnswer(...) fields"
    fields = [f.name for f in dataclasses.fields(ChainAnswer)]
    assert [[name.strip() for name in entry.split(",")] for entry in listed] == [fields] * len(listed)
    for option in ("chain_mode", "verdict_cache"):
        assert f"| `{option}` |" in text, f"docs/vllm.md's table of extras lacks {option}"
