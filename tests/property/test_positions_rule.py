"""The shipped position rule against the reference model's deferred-key rule (issue 38).

``kvprobe.statemachine.positions.decide`` is what the vLLM drop-in runs for a
positioned key; ``kvprobe.spec.model_positions.position_rule`` states the
same rule over the verdicts a request holds.  Hypothesis drives both on the
same chains, verdicts, windows and growths; and vLLM's scan, played out in
the reference model with the shipped rule (``scan_until_settled``), must keep
``PositionsStopAtMiss`` and leave no key deferred.  Two code mutants of the
rule (probe past a known miss; never open the window) must be caught by
each check.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pytest
from hypothesis import given, settings, strategies as st

from kvprobe.spec.model_positions import PositionsStopAtMiss, deferred_served, position_rule, scan_until_settled
from kvprobe.spec.model_state import State
from kvprobe.statemachine.positions import DEFER, PAST_MISS, PROBE, Decision, decide
from kvprobe.statemachine.windows import ALL

Shipped = Callable[[list[bytes], int, Callable[[bytes], "bool | None"], int, float, bool], Decision]

VERDICTS = st.sampled_from([None, True, False])
FIRSTS = st.sampled_from([ALL, 1, 2, 3, 4, 16])
GROWTHS = st.sampled_from([2.0, 1.5, 1.25, 3.0])


def _as_rule(shipped: Shipped) -> Callable[[Sequence[bool | None], int, int | None, float, bool], str]:
    """The shipped rule's shape turned into the reference model's (verdicts per position; None: one window)."""

    def rule(verdicts: Sequence[bool | None], rank: int, first: int | None, growth: float, search: bool) -> str:
        chain = [b"k%d" % i for i in range(len(verdicts))]
        held = dict(zip(chain, verdicts, strict=True))
        return shipped(chain, rank, held.__getitem__, ALL if first is None else first, growth, search).value

    return rule


def probes_past_miss(*args: object) -> Decision:
    """Mutant: a key after a known miss is probed instead of answered not stored."""
    decision = decide(*args)  # type: ignore[arg-type]
    return PROBE if decision is PAST_MISS else decision


def never_opens(
    chain: list[bytes], rank: int, verdict: Callable[[bytes], bool | None], first: int, *rest: object
) -> Decision:
    """Mutant: every key past the first window is deferred, whatever the keys before it resolved to."""
    decision = decide(chain, rank, verdict, first, *rest)  # type: ignore[arg-type]
    return DEFER if decision is PROBE and first != ALL and rank >= first else decision


@st.composite
def cases(draw: st.DrawFn, search: bool = False) -> tuple[list[bool | None], int, int, float]:
    verdicts = draw(st.lists(VERDICTS, min_size=1, max_size=40))
    rank = draw(st.integers(0, len(verdicts) - 1))
    verdicts[rank] = None  # the request does not hold the key it asks for
    return verdicts, rank, draw(FIRSTS), draw(GROWTHS)


def _agrees(shipped: Shipped, case: tuple[list[bool | None], int, int, float], search: bool) -> None:
    verdicts, rank, first, growth = case
    want = position_rule(verdicts, rank, None if first == ALL else first, growth, search)
    assert _as_rule(shipped)(verdicts, rank, None if first == ALL else first, growth, search) == want, case


@given(cases())
def test_the_shipped_rule_is_the_reference_rule(case: tuple[list[bool | None], int, int, float]) -> None:
    _agrees(decide, case, False)


@given(cases())
def test_the_shipped_inferred_rule_is_the_reference_rule(case: tuple[list[bool | None], int, int, float]) -> None:
    _agrees(decide, case, True)


@st.composite
def scans(draw: st.DrawFn) -> tuple[int, int, int, float, bool, bool]:
    length = draw(st.integers(1, 24))
    return length, draw(st.integers(0, length)), draw(FIRSTS), draw(GROWTHS), draw(st.booleans()), draw(st.booleans())


def _scan(shipped: Shipped, case: tuple[int, int, int, float, bool, bool]) -> None:
    length, prefix, first, growth, search, stop_at_miss = case
    chain = [b"k%d" % i for i in range(length)]
    stored = set(chain[:prefix])
    s = scan_until_settled(
        State(),
        chain,
        "r",
        stored.__contains__,
        None if first == ALL else first,
        growth,
        search,
        rule=_as_rule(shipped),
        stop_at_miss=stop_at_miss,
    )
    assert PositionsStopAtMiss(s), ("PositionsStopAtMiss", case)
    assert deferred_served(s, chain), ("DeferredServed", case, sorted(s.deferred))
    found = [k for k in chain if (p := s.probes.get(k)) is not None and p.verdict]
    if not search:
        assert found == chain[:prefix], case  # the scan learns the stored prefix exactly


@settings(max_examples=60)
@given(scans())
def test_vllms_scan_with_the_shipped_rule_probes_no_key_past_a_miss_and_serves_every_deferred_key(
    case: tuple[int, int, int, float, bool, bool],
) -> None:
    _scan(decide, case)


@pytest.mark.parametrize("mutant", [probes_past_miss, never_opens])
def test_a_mutant_of_the_rule_disagrees_with_the_reference_rule(mutant: Shipped) -> None:
    check = given(cases())(lambda case: _agrees(mutant, case, False))
    with pytest.raises(AssertionError):
        check()


@pytest.mark.parametrize(
    ("mutant", "broken"), [(probes_past_miss, "PositionsStopAtMiss"), (never_opens, "DeferredServed")]
)
def test_a_mutant_of_the_rule_breaks_the_scans_properties(mutant: Shipped, broken: str) -> None:
    check = settings(max_examples=200)(given(scans())(lambda case: _scan(mutant, case)))
    with pytest.raises(AssertionError) as caught:
        check()
    assert broken in str(caught.value), caught.value
