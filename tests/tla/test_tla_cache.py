"""The verdict cache in the TLA+ model: tla/cache.cfg passes, and TLC catches each cache mutant by CacheProvenance.

The cache's part of the model (KVProbe.tla: the memory variables, Lookup's
LookupRecall and LookupMemory, Drain's and MarkMiss's writes of the memory)
is inert on the other configs (CacheOn is FALSE, so the memory keeps its
initial values and those configs explore the states they explored before);
cache.cfg turns it on, chain-cache.cfg and inferred-cache.cfg with each
walk (tests/tla/test_tla_chain.py checks them).  Each cache mutant must be
reported by the clause written against it.
"""

from __future__ import annotations

import shutil

import pytest
from mutant_runs import _cached_run, mutant_run

from kvprobe.tlc import tla_dir
from kvprobe.tlc_mutants import MUTANT_NAMES, find_mutant, root_module

pytestmark = [pytest.mark.tlc, pytest.mark.skipif(shutil.which("java") is None, reason="TLC needs Java")]

#: The clause that must catch each cache mutant.
CAUGHT_BY = {
    "cache-keeps-marked-miss": "CacheProvenance",
    "cache-remembers-failure": "CacheProvenance",
    "cache-forgets-live-only": "CacheProvenance",
    # Issue 41: a late answer for a generation MarkMiss made moot (moot and told, not the memory).
    "cache-keeps-moot-answer": "CacheAnswerApplied",
}


def test_every_cache_mutant_is_checked_on_the_cache_config() -> None:
    assert set(MUTANT_NAMES["cache"]) == set(CAUGHT_BY)
    assert {find_mutant(name).config for name in CAUGHT_BY} == {"cache"}


def test_the_cache_config_passes_and_serves_from_memory() -> None:
    text = (tla_dir() / "cache.cfg").read_text()
    assert "CacheOn = TRUE" in text and "    CacheProvenance\n" in text and "    CacheAnswerApplied\n" in text
    result = _cached_run(tla_dir() / root_module(None), text, 1, ())
    assert result.outcome == "ok", (result.outcome, result.property, result.errors)
    assert result.coverage["Lookup"][1] > 0


def test_the_cache_config_reaches_a_lookup_served_from_memory() -> None:
    text = (tla_dir() / "cache.cfg").read_text()
    head, _, tail = text.partition("INVARIANTS")
    witness = head + "INVARIANTS\n    NeverServedFromMemory\n" + tail[tail.index("SYMMETRY") :]
    result = _cached_run(tla_dir() / root_module(None), witness, 1, ())
    assert (result.outcome, result.property) == ("invariant", "NeverServedFromMemory"), result.errors


#: The configs that turn the cache on: alone, and with each walk (issue 41).
CACHE_CONFIGS = {"cache.cfg", "chain-cache.cfg", "inferred-cache.cfg"}


def test_configs_without_the_cache_leave_it_off() -> None:
    for cfg in tla_dir().glob("*.cfg"):
        if cfg.name not in CACHE_CONFIGS:
            assert "CacheOn" not in cfg.read_text(), cfg.name


@pytest.mark.parametrize("mutant", sorted(CAUGHT_BY))
def test_each_cache_mutant_is_caught_by_its_clause(mutant: str) -> None:
    result = mutant_run(mutant, CAUGHT_BY[mutant])
    assert (result.outcome, result.property) == ("invariant", CAUGHT_BY[mutant]), result.errors
