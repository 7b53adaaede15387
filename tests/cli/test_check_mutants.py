"""``kvprobe check --mutant`` takes every mutant the model declares, spec-level ones too.

The clause meant for each spec mutant is the table of the spec-mutant tests
(tests/tla/test_tla_check.py, ``SPEC_CAUGHT_BY``); here the same mutants go
through the command line, and its report must name that clause.
"""

from __future__ import annotations

import re
import shutil
import sys
from pathlib import Path

import pytest

from kvprobe.check import EXIT_INVARIANT, EXIT_OK, EXIT_USAGE, MUTANT_SUMMARIES, MUTANTS, declared_mutants, main

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tla"))
from test_tla_check import SPEC_CAUGHT_BY


def test_declared_mutants_are_the_named_and_the_spec_ones() -> None:
    kinds = declared_mutants()
    assert kinds["named"] == list(MUTANTS)
    assert set(kinds["spec"]) == set(SPEC_CAUGHT_BY)


def test_list_shows_both_kinds_one_line_each(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--list"]) == EXIT_OK
    out = capsys.readouterr().out
    named, _, spec = out.partition("spec mutants")
    assert "named mutants" in named
    for kind, section in (("named", named), ("spec", spec)):
        for mutant in declared_mutants()[kind]:
            lines = re.findall(rf"^  {re.escape(mutant)} +(.+)$", section, re.MULTILINE)
            assert len(lines) == 1, (mutant, lines)
            assert lines[0] == MUTANT_SUMMARIES[mutant]


def test_unknown_mutant_lists_both_kinds(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--mutant", "no-such-mutant"]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert "fail-resolves-hit" in err and "double-result" in err


@pytest.mark.skipif(shutil.which("java") is None, reason="TLC needs Java")
@pytest.mark.parametrize("mutant", sorted(SPEC_CAUGHT_BY))
def test_spec_mutant_is_reported_by_its_clause(mutant: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--quiet", "--workers", "1", "--mutant", mutant]) == EXIT_INVARIANT
    out = capsys.readouterr().out
    assert f"kvprobe check default (mutant {mutant}): VIOLATED safety property {SPEC_CAUGHT_BY[mutant]}:" in out
