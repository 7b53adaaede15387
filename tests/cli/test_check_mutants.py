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

from kvprobe.check import EXIT_INVARIANT, EXIT_OK, EXIT_USAGE, main
from kvprobe.tlc_mutants import KINDS, MUTANT_NAMES, MUTANTS

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tla"))
from mutant_runs import shared_tlc_runs  # noqa: F401 (a fixture)
from test_tla_check import SPEC_CAUGHT_BY


def test_the_mutants_are_the_named_and_the_spec_ones() -> None:
    assert set(KINDS) == {"named", "spec"}
    assert [m.name for m in MUTANTS] == [*MUTANT_NAMES["named"], *MUTANT_NAMES["spec"]]
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


@pytest.mark.skipif(shutil.which("java") is None, reason="TLC needs Java")
@pytest.mark.usefixtures("shared_tlc_runs")
@pytest.mark.parametrize("mutant", sorted(SPEC_CAUGHT_BY))
def test_spec_mutant_is_reported_by_its_clause(mutant: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--quiet", "--workers", "1", "--mutant", mutant]) == EXIT_INVARIANT
    out = capsys.readouterr().out
    assert f"kvprobe check default (mutant {mutant}): VIOLATED safety property {SPEC_CAUGHT_BY[mutant]}:" in out
