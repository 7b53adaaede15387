"""``kvprobe conform`` fails every lying tier, on the derandomized default run (the CI case).

The measured power over random seeds (how often, how fast) is in
docs/checkers.md, produced by bench/checks/conform_power.py from the same tiers.
"""

from __future__ import annotations

import pytest
from lying_tiers import LYING_TIERS

from kvprobe.conform import main as conform_main


def test_at_least_eight_lying_tiers() -> None:
    assert len(LYING_TIERS) >= 8


#: Tiers whose failing run takes about a minute (the slow tier's lie shows
#: only once its answers come late): they run under ``make test-long``.
LONG_RUNS = {"slow"}


@pytest.mark.parametrize(
    "name", [pytest.param(n, marks=pytest.mark.long) if n in LONG_RUNS else n for n in sorted(LYING_TIERS)]
)
def test_default_derandomized_run_fails_the_tier(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    factory, _ = LYING_TIERS[name]
    assert conform_main([factory, "--derandomize"]) == 1
    out = capsys.readouterr().out
    assert "FAIL" in out
    # The tier's own answer is named as the cause, not a symptom further down.
    assert "TierAnswersTruthfully: the tier" in out, out
    report = out.splitlines()
    # One screen: a bounded report, short key names, the failing step marked once.
    assert len(report) <= 40, out
    assert sum("<- fails here" in line for line in report) == 1
    assert "k1" in out and "\\x" not in out
    assert not any(line.strip().startswith("contract()") for line in report)


def test_the_report_shows_both_sides(capsys: pytest.CaptureFixture[str]) -> None:
    factory, _ = LYING_TIERS["always-true"]
    assert conform_main([factory, "--derandomize"]) == 1
    out = capsys.readouterr().out
    assert "the tier answered k" in out and "= hit, but it holds k" in out and "= miss" in out


def test_the_correct_tier_passes_the_same_run(capsys: pytest.CaptureFixture[str]) -> None:
    # The same settings pass an honest tier: the failures above are the lies, not the machine.
    assert conform_main(["kvprobe.testing.stateful:memory_factory", "--derandomize"]) == 0
    assert "PASS: 100 examples" in capsys.readouterr().out


def test_a_seed_reproduces_a_failure(capsys: pytest.CaptureFixture[str]) -> None:
    factory, _ = LYING_TIERS["stale-cache"]
    assert conform_main([factory, "--seed", "7", "--no-shrink"]) == 1
    first = capsys.readouterr().out
    assert "Reproduce: kvprobe conform lying_tiers:StaleNegativeCache --seed 7" in first
    assert conform_main([factory, "--seed", "7", "--no-shrink"]) == 1
    again = capsys.readouterr().out
    assert first.split("FAIL after")[1].split("\n", 1)[1] == again.split("FAIL after")[1].split("\n", 1)[1]


def test_the_threaded_worker_also_fails_a_lying_tier(capsys: pytest.CaptureFixture[str]) -> None:
    # The audit runs on the worker thread there; the failure is still reported on the test's.
    factory, _ = LYING_TIERS["permuted"]
    assert conform_main([factory, "--worker", "thread", "--derandomize", "--no-shrink"]) == 1
    assert "TierAnswersTruthfully: the tier answered" in capsys.readouterr().out
