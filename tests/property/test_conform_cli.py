"""``kvprobe conform``: passes the in-memory tier; usage errors exit 2 (lying tiers: tests/conform)."""

from __future__ import annotations

import pytest

from kvprobe.cli import main as cli_main
from kvprobe.conform import main as conform_main


def test_memory_factory_conforms(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["conform", "kvprobe.testing.stateful:memory_factory", "--examples", "20", "--derandomize"]) == 0
    out = capsys.readouterr().out
    assert "PASS: 20 examples" in out


def test_a_tuple_factory_with_the_threaded_worker(capsys: pytest.CaptureFixture[str]) -> None:
    code = conform_main(["conform_targets:memory_tuple", "--examples", "5", "--worker", "thread", "--derandomize"])
    assert code == 0, capsys.readouterr().out


@pytest.mark.parametrize(
    "args",
    [
        ["conform_targets:not_a_tier"],
        ["conform_targets:NOT_CALLABLE"],
        ["conform_targets"],
        ["no_such_module_here:factory"],
        ["conform_targets:memory_tuple", "--examples", "0"],
        [],
    ],
)
def test_usage_errors_exit_2(args: list[str]) -> None:
    assert conform_main(args) == 2
