"""Positioned lookups in the TLA+ model (tla/positions.cfg; issue 38): the config passes, a key is deferred.

vLLM's scan asks for a request's keys one by one and asks again while an
answer is "not known yet"; with key positions the drop-in probes a key only
within the request's window past its leading known hits, answers NOT stored
past a known miss, and defers the rest (KVProbe.tla, block "Positioned
lookups").  The two spec mutants of that block (``position-probes-past-miss``,
``position-window-never-opens``) are caught in tests/tla/test_tla_check.py
with the other spec mutants.
"""

from __future__ import annotations

import shutil

import pytest
from mutant_runs import _cached_run

from kvprobe.tlc import tla_dir
from kvprobe.tlc_mutants import root_module

pytestmark = [pytest.mark.tlc, pytest.mark.skipif(shutil.which("java") is None, reason="TLC needs Java")]


@pytest.mark.parametrize("config", ["positions", "positions-inferred"])
def test_the_positions_config_passes_and_defers(config: str) -> None:
    # positions-inferred.cfg: the inferred mode's search decides each positioned key.
    text = (tla_dir() / f"{config}.cfg").read_text()
    assert "Positioned = TRUE" in text and "SPECIFICATION PositionsSpec" in text
    assert "    PositionsStopAtMiss\n" in text and "    DeferredServed\n" in text
    result = _cached_run(tla_dir() / root_module(None), text, 1, ())
    assert result.outcome == "ok", (result.outcome, result.property, result.errors)
    assert result.coverage["Lookup"][1] > 0
    # Not vacuous: some positioned lookup is deferred.
    head = text[: text.index("INVARIANTS")].replace("SPECIFICATION PositionsSpec", "SPECIFICATION Spec")
    witness = _cached_run(tla_dir() / root_module(None), head + "INVARIANTS\n    NeverDeferred\n", 1, ())
    assert (witness.outcome, witness.property) == ("invariant", "NeverDeferred"), witness.errors
