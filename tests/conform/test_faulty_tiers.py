"""``kvprobe conform`` reports a tier's broken calls as the tier's, and the manager's divergence whole.

A tier that raises or answers other than one bool per key is tolerated by the
manager (the group fails, its keys resolve as MISS), so the report must name
the tier's call (its number, keys and request) and what it returned or
raised, and say that the manager handled it as the contract says; not that
kvprobe diverges from its model.  When kvprobe itself diverges, the report
shows each differing part whole, first (a counter late in ``Counts`` used to
be cut off before it was reached).
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from kvprobe.conform import main as conform_main
from kvprobe.statemachine import AsyncLookupManager, LookupCore
from kvprobe.testing.stateful import memory_factory, run_conformance

CALL = r"the tier's batch_lookup\(keys=\[k\d(, k\d)*\], req='req-[ab]'\) \(call \d+ of the run\) "
HANDLED = "the manager handled it as the contract says (checked against the reference model)"


def _report(factory: str, capsys: pytest.CaptureFixture[str], *options: str) -> str:
    assert conform_main([factory, "--derandomize", *options]) == 1
    out = capsys.readouterr().out
    assert "diverges from the reference model" not in out, out  # the tier's fault, not kvprobe's
    assert HANDLED in out, out
    return out


@pytest.mark.parametrize(
    ("factory", "what"),
    [
        (
            "faulty_tiers:IntVerdicts",
            r"returned \[[01](, [01])*\] \(int, not bool\), so the manager failed the group as bad_verdict",
        ),
        (
            "faulty_tiers:SometimesRaises",
            r"raised OSError\(5, 'Input/output error'\), so the manager failed the group as raised",
        ),
        (
            "faulty_tiers:AnswersNone",
            r"returned None, not a sequence of bools, so the manager failed the group as raised_while_iterating",
        ),
        (
            "faulty_tiers:StreamBreaks",
            r"returned a generator yielding \[(True|False)\], which raised "
            r"ConnectionResetError\('connection reset by peer'\) while it was iterated, "
            r"so the manager failed the group as raised_while_iterating",
        ),
    ],
)
def test_the_report_names_the_tiers_call_and_what_it_did(
    factory: str, what: str, capsys: pytest.CaptureFixture[str]
) -> None:
    out = _report(factory, capsys)
    assert re.search("TierAnswersWellFormed: " + CALL + what, out), out


def test_the_raising_call_is_the_one_counted(capsys: pytest.CaptureFixture[str]) -> None:
    # SometimesRaises raises on every third call: the report names a third call's number.
    out = _report("faulty_tiers:SometimesRaises", capsys, "--no-shrink")
    number = re.search(r"\(call (\d+) of the run\) raised OSError", out)
    assert number is not None and int(number.group(1)) % 3 == 0, out


def test_numpy_bools_are_named_as_numpy_bools(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    np = pytest.importorskip("numpy")
    import faulty_tiers

    def numpy_verdicts(self: Any, keys: Any, req_context: object) -> list[Any]:
        return [np.bool_(k in self.stored) for k in keys]

    monkeypatch.setattr(faulty_tiers.IntVerdicts, "batch_lookup", numpy_verdicts)
    out = _report("faulty_tiers:IntVerdicts", capsys, "--no-shrink")
    assert re.search(CALL + r"returned \[.*\] \(numpy\.bool_?, not bool\)", out), out


def test_the_threaded_worker_names_the_tiers_call_too(capsys: pytest.CaptureFixture[str]) -> None:
    out = _report("faulty_tiers:SometimesRaises", capsys, "--worker", "thread", "--no-shrink")
    assert re.search("TierAnswersWellFormed: " + CALL + r"raised OSError\(5", out), out


class UncountedUnknownCleanup(LookupCore):
    """A manager-side defect: a cleanup of a request id the core does not know is not counted."""

    def cleanup(self, req_id: Any) -> None:
        if req_id in self.requests:
            super().cleanup(req_id)


class UncountingManager(AsyncLookupManager):
    core_class = UncountedUnknownCleanup


def test_a_divergence_of_the_manager_shows_the_differing_field_whole() -> None:
    result = run_conformance(memory_factory, derandomize=True, manager_class=UncountingManager)
    assert not result.passed
    assert "implementation diverges from the reference model:" in result.failure, result.failure
    # The field that differs, named and whole; not a record cut off before it.
    assert re.search(r"counts\.unknown_cleanups: model \d+, implementation \d+\n", result.failure), result.failure
    assert "probes_created" not in result.failure, result.failure
    assert "..." not in result.failure, result.failure
