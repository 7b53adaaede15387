"""bench.objstore.pace_cost runs both paces on the same calls and prints one row each, and refuses a run of nothing."""

from __future__ import annotations

import pytest

from bench.objstore.pace_cost import main, measure


def test_both_paces_are_measured_side_by_side(capsys: pytest.CaptureFixture[str]) -> None:
    figures = measure(rounds=2, calls=10)
    assert set(figures) == {"process", "host"} and all(len(v) == 2 and min(v) > 0 for v in figures.values())
    assert main(["--rounds", "1", "--calls", "10"]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith(("| process", "| host"))]
    assert len(rows) == 2 and rows[0].endswith("| 1x |")


def test_a_run_of_nothing_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--rounds", "0"])
    assert exited.value.code == 2 and "rounds must be >= 1" in capsys.readouterr().err
