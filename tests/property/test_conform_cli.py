"""``kvprobe conform``: passes the in-memory tier, fails lying tiers with a reproducible example."""

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


@pytest.mark.parametrize("factory", ["conform_targets:forgetful", "conform_targets:stale_cache"])
def test_a_lying_tier_fails_with_its_example(factory: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert conform_main([factory, "--examples", "300", "--derandomize", "--no-shrink"]) == 1
    out = capsys.readouterr().out
    assert "FAIL" in out
    # The failing example: numbered steps with short key names, the failing one marked.
    assert " 1. initial_blocks(" in out and "<- fails here" in out


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
