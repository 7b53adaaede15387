"""The mutant hunt can fail: a search that finds nothing, or finds the wrong thing, is an error."""

from __future__ import annotations

import sys

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, rule

from kvprobe.testing.search import failure_messages, hunt, search_settings


class Harmless(RuleBasedStateMachine):
    @rule(n=st.integers(0, 3))
    def step(self, n: int) -> None:
        assert n <= 3


class BreaksAtThree(RuleBasedStateMachine):
    @rule(n=st.integers(0, 3))
    def step(self, n: int) -> None:
        assert n != 3, "reached three"


def test_a_machine_that_never_fails_is_a_failed_hunt() -> None:
    with pytest.raises(AssertionError, match="found nothing"):
        hunt(Harmless, ["anything"], search_settings(max_examples=20, steps=5))


def test_a_failure_for_another_reason_is_a_failed_hunt() -> None:
    with pytest.raises(AssertionError, match="unexpected reason"):
        hunt(BreaksAtThree, ["NothingLeaks"], search_settings(max_examples=200, steps=5))


def test_the_expected_failure_is_found_and_named() -> None:
    _, messages = hunt(BreaksAtThree, ["reached three"], search_settings(max_examples=200, steps=5))
    assert "AssertionError: reached three" in messages


@pytest.mark.skipif(sys.version_info < (3, 11), reason="exception groups are Python 3.11+")
def test_every_failure_of_a_group_is_listed() -> None:
    group = ExceptionGroup("two", [ValueError("a"), KeyError("b")])  # noqa: F821 (a builtin from 3.11)
    assert failure_messages(group) == "ValueError: a | KeyError: 'b'"
