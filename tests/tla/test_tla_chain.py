"""The chain walk in the TLA+ model: the chain configs pass, and TLC catches each chain mutant.

The walk's part of Lookup (KVProbe.tla, block "The chain walk") is inert on
the other configs (their chain is empty); the chain configs put a chain of
every key in its place.  Each chain mutant must be reported by the clause
written against it, on the config kvprobe.tlc_mutants names for it.  The
inferred walk (block "The store and the inferred walk") is checked on
chain-inferred.cfg, a prefix-closed store; on chain-inferred-holes.cfg, a
store with holes (the assumption broken), InferredStored must fail.  Each
walk is checked with the verdict cache on too (chain-cache.cfg,
inferred-cache.cfg): a key served from memory is judged by the generation
it was recalled from, as the reference model judges it (docs/cache.md).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from mutant_runs import _cached_run, mutant_run

from kvprobe.tlc import tla_dir
from kvprobe.tlc_mutants import MUTANT_NAMES, find_mutant, root_module

pytestmark = [pytest.mark.tlc, pytest.mark.skipif(shutil.which("java") is None, reason="TLC needs Java")]

#: The clause that must catch each chain mutant.
CAUGHT_BY = {
    "window-skips-ahead": "ChainWindowWaits",
    "probe-after-miss": "ChainStopsAtMiss",
    "window-presumed-stored": "ChainHitsAnswered",
    "search-infers-unverified": "InferredBoundaryVerified",
    "search-skips-exact-rewalk": "RefutedWalkedExactly",
    # Issue 41: each caught by a fact the action under check cannot write.
    "walk-skips-a-key": "ChainWalksInOrder",
    "search-ignores-earlier-miss": "InferredAnswerNoKnownMiss",
    "cleanup-drops-refuted": "RefutedWalkedExactly",
}


#: The config each chain mutant is caught on (``kvprobe check --mutant NAME`` picks it).
CONFIGS = {
    "window-skips-ahead": "chain",
    "probe-after-miss": "chain-window",
    "window-presumed-stored": "chain",
    "search-infers-unverified": "chain-inferred",
    "search-skips-exact-rewalk": "chain-inferred",
    "walk-skips-a-key": "chain",
    "search-ignores-earlier-miss": "chain-inferred",
    "cleanup-drops-refuted": "chain-inferred",
}


def test_every_chain_mutant_has_its_chain_config_and_a_clause() -> None:
    assert set(MUTANT_NAMES["chain"]) == set(CAUGHT_BY) == set(CONFIGS)
    assert {name: find_mutant(name).config for name in CONFIGS} == CONFIGS


@pytest.mark.parametrize("config", sorted(set(CONFIGS.values())))
def test_the_chain_configs_pass(config: str) -> None:
    text = (tla_dir() / f"{config}.cfg").read_text()
    assert "Chain <- ChainOfKeys" in text
    for clause in CAUGHT_BY.values():
        assert f"    {clause}\n" in text, clause
    result = _cached_run(tla_dir() / root_module(None), text, 1, ())
    assert result.outcome == "ok", (result.outcome, result.property, result.errors)
    assert result.coverage["Lookup"][1] > 0


def test_a_store_with_holes_breaks_the_inferred_walk() -> None:
    # The assumption broken: a key is stored while one before it is not.
    # The walk infers the missing key stored: the expected counterexample.
    text = (tla_dir() / "chain-inferred-holes.cfg").read_text()
    assert "PrefixClosed = FALSE" in text and "    InferredStored\n" in text
    result = _cached_run(tla_dir() / root_module(None), text, 1, ())
    assert (result.outcome, result.property) == ("invariant", "InferredStored"), result.errors


@pytest.mark.parametrize("mutant", sorted(CAUGHT_BY))
def test_each_chain_mutant_is_caught_by_its_clause(mutant: str) -> None:
    result = mutant_run(mutant, CAUGHT_BY[mutant])
    assert (result.outcome, result.property) == ("invariant", CAUGHT_BY[mutant]), result.errors


#: Each walk with the verdict cache on (issue 41).
COMBINED = ("chain-cache", "inferred-cache")


@pytest.mark.parametrize("config", COMBINED)
def test_each_walk_with_the_cache_passes_and_serves_from_memory(config: str) -> None:
    text = (tla_dir() / f"{config}.cfg").read_text()
    assert "Chain <- ChainOfKeys" in text and "CacheOn = TRUE" in text
    for clause in (*CAUGHT_BY.values(), "CacheProvenance", "CacheAnswerApplied"):
        assert f"    {clause}\n" in text, clause
    result = _cached_run(tla_dir() / root_module(None), text, 1, ())
    assert result.outcome == "ok", (result.outcome, result.property, result.errors)
    # Not vacuous: some Lookup is served from memory there.
    head, _, tail = text.partition("INVARIANTS")
    rest = tail[tail.index("SYMMETRY") :] if "SYMMETRY" in tail else ""
    witness = _cached_run(tla_dir() / root_module(None), head + "INVARIANTS\n    NeverServedFromMemory\n" + rest, 1, ())
    assert (witness.outcome, witness.property) == ("invariant", "NeverServedFromMemory"), witness.errors


@pytest.mark.long
@pytest.mark.parametrize(
    ("config", "clause", "judged"),
    [
        (
            "chain-cache",
            "ChainHitsAnswered",
            ("<<k, SourceAfter(k)>> \\in backendHit", "<<k, gen'[k]>> \\in backendHit"),
        ),
        (
            "inferred-cache",
            "InferredBoundaryVerified",
            ("<<Chain[b], Source(Chain[b])>> \\in backendHit", "<<Chain[b], gen[Chain[b]]>> \\in backendHit"),
        ),
    ],
)
def test_a_walk_judging_a_recalled_key_by_its_new_generation_fails_the_combined_config(
    config: str, clause: str, judged: tuple[str, str], tmp_path: Path
) -> None:
    # The reference model judges a recalled key by the generation it was recalled from;
    # the model judging it by its new state's generation (no call was made for that one)
    # fails the correct walk on the combined config.
    folder = tmp_path / "tla"
    shutil.copytree(tla_dir(), folder)
    model = (folder / "KVProbe.tla").read_text()
    assert model.count(judged[0]) == 1, judged[0]
    (folder / "KVProbe.tla").write_text(model.replace(*judged))
    result = _cached_run(folder / root_module(None), (folder / f"{config}.cfg").read_text(), 1, ())
    assert (result.outcome, result.property) == ("invariant", clause), result.errors
