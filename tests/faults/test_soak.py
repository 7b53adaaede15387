"""The soak's own checks: a tiny run passes, and a leak of either kind fails it.

Without the failing cases the soak's PASS would prove nothing: these run it
with a core that never reclaims a finished request's states, and with a
backend that keeps memory per call, and expect the named failures.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root, for bench/

from bench.docdata import check_doc
from bench.reliability import soak
from kvprobe.statemachine import AsyncLookupManager, LookupCore, LookupPhase

SMALL = dict(
    lookups=6_000,
    requests=600,
    concurrency=32,
    fault_rate=0.05,
    short_rate=0.05,
    abort_rate=0.1,
    miss_rate=0.1,
    lookup_timeout_s=5.0,
    verdict_bound_s=30.0,
    rss_budget_mib=4.0,
    families=40,
    seed=3,
    samples=50,
    step_sleep_s=0.0005,
)


def test_small_soak_passes() -> None:
    result = soak.run(backend_name="memory", **SMALL)  # type: ignore[arg-type]
    assert result.failures == []
    assert result.table_end == 0
    assert result.lookup_pairs >= 6_000 and result.requests >= 600
    assert result.stats["backend_errors"] > 0 and result.injected["raised"] > 0 and result.injected["short"] > 0
    assert result.stats["forced_misses"] > 0 and result.aborted > 0
    assert result.wrong_verdicts == 0


def test_small_soak_on_the_filesystem_passes(tmp_path: Path) -> None:
    result = soak.run(backend_name="fs", root=str(tmp_path), **{**SMALL, "families": 10})  # type: ignore[arg-type]
    assert result.failures == []
    assert result.table_end == 0


class ForgetfulCore(LookupCore):
    """Cleanup of the last request keeps RESOLVED states nobody waits on (a leak)."""

    def cleanup(self, req_id: str) -> None:
        request = self.requests.get(req_id)
        held = [] if request is None else request.states
        resolved = [s for s in held if s.phase is LookupPhase.RESOLVED]
        super().cleanup(req_id)
        for state in resolved:
            if state.phase is None:  # dropped: put it back
                state.phase = LookupPhase.RESOLVED
                self.states.setdefault(state.key, state)


@pytest.fixture
def forgetful(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(AsyncLookupManager, "core_class", ForgetfulCore)
    yield


@pytest.mark.long
def test_soak_fails_when_states_leak(forgetful: None) -> None:
    result = soak.run(backend_name="memory", **{**SMALL, "fault_rate": 0.0, "short_rate": 0.0})  # type: ignore[arg-type]
    assert result.table_end > 0
    assert any("probe table holds" in f for f in result.failures), result.failures


class Hoarder:
    """Keeps 64 KiB per call: memory that grows with the run."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.kept: list[bytearray] = []

    def batch_lookup(self, keys: Sequence[bytes], req_context: object) -> list[bool]:
        self.kept.append(bytearray(64 * 1024))
        return list(self.inner.batch_lookup(keys, req_context))


def test_soak_fails_when_memory_grows(monkeypatch: pytest.MonkeyPatch) -> None:
    real = soak.FaultInjector

    def hoarding(inner: Any, **kwargs: Any) -> Any:
        return real(Hoarder(inner), **kwargs)

    monkeypatch.setattr(soak, "FaultInjector", hoarding)
    result = soak.run(backend_name="memory", **SMALL)  # type: ignore[arg-type]
    assert result.table_end == 0
    assert any("RSS grew" in f for f in result.failures), (result.rss_growth_mib, result.failures)


def test_cli_exit_status_and_summary(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--backend", "memory", "--lookups", "3000", "--requests", "300", "--families", "20"]
    assert soak.main(argv) == 0
    out = capsys.readouterr().out
    assert "| probe table: peak / at end |" in out and "| verdict | PASS |" in out


def test_update_docs_writes_the_data_file_the_page_quotes(tmp_path: Path) -> None:
    result = soak.run(backend_name="memory", **SMALL)  # type: ignore[arg-type]
    page, data = tmp_path / "performance.md", tmp_path / "soak.json"
    page.write_text("# P\n\n## Soak\n\n<!-- data: soak#summary -->\n\n<!-- data: soak#series -->\n")
    soak.update_docs(result, "python -m bench.reliability.soak --lookups 3000", data, page)
    assert check_doc(page, tmp_path) == ([], {"soak"})
    text = page.read_text()
    assert "| verdict | PASS |" in text and "Command: `python -m bench.reliability.soak --lookups 3000`" in text
    assert "| command |" not in text  # the command is the provenance line's


def test_update_docs_refuses_a_page_that_quotes_neither_table(tmp_path: Path) -> None:
    result = soak.run(backend_name="memory", **SMALL)  # type: ignore[arg-type]
    page = tmp_path / "performance.md"
    page.write_text("# P\n")
    with pytest.raises(ValueError, match=r"quotes no table of soak\.json"):
        soak.update_docs(result, "python -m bench.reliability.soak", tmp_path / "soak.json", page)
