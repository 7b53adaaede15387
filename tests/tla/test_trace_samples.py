"""The committed sample traces (tests/tla/traces): every accepted one is accepted, every rejected one rejected.

A batch check of recorded traces kept as data, the way a trace-validation
suite keeps its corpus: a change of tla/Trace.tla or tla/KVProbe.tla that
stops accepting a real behaviour, or starts accepting a corrupted one,
fails here without re-recording anything.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from kvprobe.check import EXIT_OK, EXIT_TRACE_REJECTED, main

pytestmark = [pytest.mark.tlc, pytest.mark.skipif(shutil.which("java") is None, reason="TLC needs Java")]

SAMPLES = Path(__file__).parent / "traces"
ACCEPTED = sorted((SAMPLES / "accepted").glob("*.ndjson"))
REJECTED = sorted((SAMPLES / "rejected").glob("*.ndjson"))

#: Where the README says a rejected sample goes wrong: the first event no behaviour takes.
REJECTED_AT = {
    "worker-holds-answer": "seq=5 (CallReturned)",
    "walk-skips-a-key": "seq=24 (Lookup)",
    "walk-past-window": "seq=1 (Lookup)",
}


def test_the_samples_hold_both_kinds_and_the_readme_names_each() -> None:
    assert len(ACCEPTED) >= 6 and len(REJECTED) >= 6
    readme = (SAMPLES / "README.md").read_text()
    for path in (*ACCEPTED, *REJECTED):
        assert f"`{path.stem}`" in readme, path.name


@pytest.mark.parametrize("path", ACCEPTED, ids=lambda p: p.stem)
def test_an_accepted_sample_is_accepted(path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--quiet", "--trace", str(path)]) == EXIT_OK
    assert "ACCEPTED" in capsys.readouterr().out


@pytest.mark.parametrize("path", REJECTED, ids=lambda p: p.stem)
def test_a_rejected_sample_is_rejected(path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--quiet", "--trace", str(path)]) == EXIT_TRACE_REJECTED
    out = capsys.readouterr().out
    assert "REJECTED" in out
    if path.stem in REJECTED_AT:
        assert f"none continues with event {REJECTED_AT[path.stem]}" in out
