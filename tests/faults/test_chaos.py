"""The chaos campaign's own checks: a short run passes, and it catches what it claims to.

Without the failing cases its PASS would prove nothing: these run it with a
tier that lies (answers True for every key), with a core that never
reclaims a finished request's states, and with the flatness bound applied to
a series that grows, and expect the named failures.
"""

from __future__ import annotations

import sys
from array import array
from collections.abc import Iterable, Sequence
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root, for bench/

from bench import chaos
from kvprobe.statemachine import LookupCore

# The campaign kills dispatcher threads on purpose (a SystemExit in the thread).
pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")


def test_a_short_campaign_passes(capsys: pytest.CaptureFixture[str]) -> None:
    assert chaos.main(["--seconds", "6", "--seed", "5"]) == 0
    out = capsys.readouterr().out
    assert "PASS: wrong verdicts 0" in out and "FAIL" not in out


def test_a_lying_tier_is_caught(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    def lies(self: chaos.Faulty, keys: Sequence[bytes], req_context: object) -> Iterable[bool]:
        return [True] * len(keys)

    monkeypatch.setattr(chaos.Faulty, "batch_lookup", lies)
    assert chaos.main(["--seconds", "3"]) == 1
    assert "FAIL: wrong verdicts 0" in capsys.readouterr().out


def test_a_core_that_leaks_is_caught(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(LookupCore, "cleanup", lambda self, req_id: None)
    assert chaos.main(["--seconds", "3", "--drain-bound-s", "1"]) == 1
    assert "FAIL: len(m) 0 at the end" in capsys.readouterr().out


def test_the_flatness_check_fails_on_growth() -> None:
    growing = array("d", [float(i) for i in range(40)])
    assert chaos.flat(growing, 40, slack=8.0)[2] is False
    level = array("d", [10.0] * 40)
    assert chaos.flat(level, 40, slack=8.0)[2] is True
