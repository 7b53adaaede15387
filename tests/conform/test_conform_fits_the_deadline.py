"""``--timeout`` holds a tier with a deadline of its own to what a manager with that timeout would.

A manager built with ``lookup_timeout_s`` hands it to a backend that has
``fit_deadline`` (the object tier), which then gives up a margin before it
and answers the keys it has.  ``kvprobe conform`` audits each call against
``--timeout`` as that manager's timeout, so the tier under audit must be
handed the same bound; otherwise the object tier keeps its own 5 s deadline
and the audit judges a tier no manager would run.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

import pytest

from kvprobe.backends import InMemoryBackend
from kvprobe.conform import main as conform_main
from kvprobe.testing.stateful import Target, run_conformance


class DeadlineTier(InMemoryBackend):
    """An honest tier that records the timeouts it is asked to fit its deadline under."""

    fitted: ClassVar[list[float]] = []

    def fit_deadline(self, lookup_timeout_s: float) -> float:
        type(self).fitted.append(lookup_timeout_s)
        return lookup_timeout_s

    def batch_lookup(self, keys: Sequence[bytes], req_context: object) -> list[bool]:
        return super().batch_lookup(keys, req_context)


def _factory() -> Target:
    tier = DeadlineTier()
    return Target(tier, tier.store, tier.remove)


def test_each_runs_tier_is_handed_the_timeout() -> None:
    DeadlineTier.fitted = []
    result = run_conformance(_factory, examples=5, derandomize=True, timeout_s=0.75)
    assert result.passed, result.failure
    # One per run, and the first call that checks the factory: every tier the audit judged was fitted.
    assert len(DeadlineTier.fitted) >= result.runs
    assert set(DeadlineTier.fitted) == {0.75}


def test_without_a_timeout_the_tier_keeps_its_deadline() -> None:
    DeadlineTier.fitted = []
    assert run_conformance(_factory, examples=3, derandomize=True, timeout_s=None).passed
    assert DeadlineTier.fitted == []


class ShortDeadlineTier(DeadlineTier):
    """Refuses a timeout above 10 s, as the object tier refuses one above an hour."""

    def fit_deadline(self, lookup_timeout_s: float) -> float:
        if lookup_timeout_s > 10:
            raise ValueError(f"lookup_timeout_s must be a number of seconds in (0, 10], got {lookup_timeout_s!r}")
        return super().fit_deadline(lookup_timeout_s)


def test_a_timeout_the_tier_refuses_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    # Refused in the first call of the factory, before any run: one line and
    # exit 2, not a failing example blamed on the tier's answers.
    assert conform_main([f"{__name__}:ShortDeadlineTier", "--timeout", "20"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "ValueError" in err[0] and "(0, 10]" in err[0], err
