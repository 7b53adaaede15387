"""``kvprobe check --mutant`` takes every mutant of kvprobe.tlc_mutants, spec-level ones too.

The clause meant for each spec mutant is the table of the spec-mutant tests
(tests/tla/test_tla_check.py, ``SPEC_CAUGHT_BY``); here the same mutants go
through the command line, and its report must name that clause.  TLC runs
are shared with those tests (tests/tla/mutant_runs.py): the command line
writes the same config, so TLC checks each mutant once per session.
"""

from __future__ import annotations

import re
import shutil
import sys
from pathlib import Path

import pytest

from kvprobe.check import EXIT_INVARIANT, EXIT_LIVENESS, EXIT_OK, EXIT_UNREACHED, EXIT_USAGE, main, reach_config
from kvprobe.tlc import tla_dir
from kvprobe.tlc_mutants import KINDS, MUTANT_NAMES, MUTANTS, find_mutant

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tla"))
from mutant_runs import shared_tlc_runs  # noqa: F401 (a fixture)
from test_tla_check import LIVENESS_CAUGHT, SPEC_CAUGHT_BY


def test_the_mutants_are_the_named_and_the_spec_ones() -> None:
    assert set(KINDS) == {"named", "spec", "chain", "cache"}
    assert [m.name for m in MUTANTS] == [
        *MUTANT_NAMES["named"],
        *MUTANT_NAMES["spec"],
        *MUTANT_NAMES["chain"],
        *MUTANT_NAMES["cache"],
    ]
    assert len(MUTANT_NAMES["named"]) == 7
    assert set(MUTANT_NAMES["spec"]) == set(SPEC_CAUGHT_BY)


def test_list_shows_both_kinds_one_line_each(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--list"]) == EXIT_OK
    out = capsys.readouterr().out
    named, _, spec = out.partition("spec mutants")
    assert "named mutants" in named
    for mutant in MUTANTS:
        section = named if mutant.kind == "named" else spec
        lines = re.findall(rf"^  {re.escape(mutant.name)} +(.+)$", section, re.MULTILINE)
        assert lines == [mutant.summary], (mutant.name, lines)


def test_unknown_mutant_lists_both_kinds(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--mutant", "no-such-mutant"]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert "fail-resolves-hit" in err and "double-result" in err


#: The spec mutants an invariant catches (the others remove a reachability witness,
#: or break a liveness property: below).
INVARIANT_CAUGHT = sorted(m for m in SPEC_CAUGHT_BY if find_mutant(m).config != "reach" and m not in LIVENESS_CAUGHT)

#: The spec mutants of tla/reach.cfg: each removes a reachability witness.
REACH_CAUGHT = sorted(m for m in SPEC_CAUGHT_BY if find_mutant(m).config == "reach")


# Marked tlc: in the TLC stage's process these reuse the runs of
# tests/tla/test_tla_check.py (shared_tlc_runs caches per process), so the
# clause check costs no TLC run of its own.
@pytest.mark.skipif(shutil.which("java") is None, reason="TLC needs Java")
@pytest.mark.tlc
@pytest.mark.usefixtures("shared_tlc_runs")
@pytest.mark.parametrize("mutant", INVARIANT_CAUGHT)
def test_spec_mutant_is_reported_by_its_clause(mutant: str, capsys: pytest.CaptureFixture[str]) -> None:
    # Without --config, the mutant's own config is checked (tla/vllm.cfg for a flavour's mutant).
    assert main(["--quiet", "--workers", "1", "--mutant", mutant]) == EXIT_INVARIANT
    out = capsys.readouterr().out
    config = find_mutant(mutant).config
    assert f"kvprobe check {config} (mutant {mutant}): VIOLATED safety property {SPEC_CAUGHT_BY[mutant]}:" in out
    # The account says what went wrong in words, not the bare fallback (tests/cli/test_explain.py runs every kind).
    assert f"What went wrong ({SPEC_CAUGHT_BY[mutant]}): " in out
    assert f"the property {SPEC_CAUGHT_BY[mutant]} does not hold." not in out


@pytest.mark.skipif(shutil.which("java") is None, reason="TLC needs Java")
@pytest.mark.tlc
@pytest.mark.usefixtures("shared_tlc_runs")
@pytest.mark.parametrize("mutant", sorted(LIVENESS_CAUGHT))
def test_liveness_spec_mutant_is_reported_as_a_liveness_violation(
    mutant: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # A lasso, not a finite trace: the command line exits with the liveness code and says so.
    assert main(["--quiet", "--workers", "1", "--mutant", mutant]) == EXIT_LIVENESS
    out = capsys.readouterr().out
    config = find_mutant(mutant).config
    assert f"kvprobe check {config} (mutant {mutant}): VIOLATED liveness property" in out
    assert f"the property {SPEC_CAUGHT_BY[mutant]} does not hold." not in out


@pytest.mark.skipif(shutil.which("java") is None, reason="TLC needs Java")
@pytest.mark.usefixtures("shared_tlc_runs")
@pytest.mark.tlc
@pytest.mark.long
@pytest.mark.parametrize("mutant", REACH_CAUGHT)
def test_reach_mutant_removes_its_witness(
    mutant: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # A reachability config of the one witness the mutant removes (as `--config reach` runs
    # each property): the mutant's overrides reach every run, and the witness is missing.
    # Only a mutant of tla/reach.cfg can remove a witness; any other would pass for no reason.
    assert find_mutant(mutant).config == "reach", mutant
    folder = tmp_path / "tla"
    shutil.copytree(tla_dir(), folder)
    prop = SPEC_CAUGHT_BY[mutant]
    reach = (folder / "reach.cfg").read_text()
    (folder / "reach1.cfg").write_text(reach_config(reach, prop))
    monkeypatch.setenv("KVPROBE_TLA_DIR", str(folder))
    # (The witness exists on the model: tests/tla/test_tla_check.py, test_reachability_witnesses_exist.)
    assert main(["--quiet", "--config", "reach1", "--mutant", mutant]) == EXIT_UNREACHED
    out = capsys.readouterr().out
    assert f"kvprobe check reach1: UNREACHED: no witness for {prop}" in out
