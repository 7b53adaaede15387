"""Trace validation checks a chain walk's windows (issue 41).

An exact walk records its Lookups with the key's index and the window
schedule; ``tla/Trace.tla`` requires each to be the walk's next key and
allowed by the window rule (no key before it known NOT stored, every key
before its window known stored).  The walks of the real core are ACCEPTED,
with the default growth and with another; the mutant ``WindowSkipsAhead``
(tests/core/test_chain_mutants.py: it looks up the next window while the
current one is unanswered) is REJECTED at the first key past its window, and
so is a walk whose indices skip a key.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

from kvprobe.backends.memory import InMemoryBackend
from kvprobe.check import EXIT_OK, EXIT_TRACE_REJECTED
from kvprobe.statemachine import AsyncLookupManager, LookupCore, ManualWorker, ReqContext
from kvprobe.testing.search import check_trace

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "core"))
from test_chain_mutants import WindowSkipsAhead

pytestmark = [pytest.mark.tlc, pytest.mark.skipif(shutil.which("java") is None, reason="TLC needs Java")]

Events = list[dict[str, object]]
KEYS = [bytes([0xC0 + i]) * 4 for i in range(6)]
R1 = ReqContext("r1")


def walk(core: type[LookupCore], window: int | str, growth: float = 2.0, stored: int = 4) -> Events:
    """Walk KEYS step by step until the walk is decided; the first ``stored`` keys are stored."""
    manager = type(f"Manager{core.__name__}", (AsyncLookupManager,), {"core_class": core})
    events: Events = []
    m = manager(
        InMemoryBackend(KEYS[:stored]),
        worker="manual",
        trace=events.append,
        chain_window=window,
        chain_window_growth=growth,
    )
    w = m.worker
    assert isinstance(w, ManualWorker)
    for _ in range(len(KEYS) + 1):
        if not m.lookup_chain(KEYS, R1).pending:
            break
        m.flush()
        w.run_all()
    m.cleanup("r1")
    m.shutdown()
    return events


def walk_events(events: Events) -> list[tuple[int, int]]:
    """(seq, index) of each walk Lookup."""
    return [(int(str(e["seq"])), int(str(e["index"]))) for e in events if "index" in e]


@pytest.mark.parametrize(
    ("window", "growth"), [(1, 2.0), (2, 1.5), ("all", 2.0)], ids=["first-1", "first-2-growth-1.5", "all"]
)
def test_a_real_walk_is_accepted(window: int | str, growth: float, tmp_path: Path) -> None:
    events = walk(LookupCore, window, growth)
    assert max(index for _, index in walk_events(events)) >= 4  # the first key not stored is looked up
    status, output = check_trace(events, tmp_path / "walk.ndjson")
    assert status == EXIT_OK, output


def test_a_walk_past_its_window_is_rejected_there(tmp_path: Path) -> None:
    events = walk(WindowSkipsAhead, 1)
    # The first walk looks up key 0 (its window) and, the mutant's defect, key 1
    # while key 0 is still unanswered.
    (past,) = [seq for seq, index in walk_events(events)[:2] if index == 1]
    status, output = check_trace(events, tmp_path / "ahead.ndjson")
    assert status == EXIT_TRACE_REJECTED, output
    assert f"none continues with event seq={past} (Lookup)" in output


def test_a_walk_that_skips_a_key_is_rejected(tmp_path: Path) -> None:
    events = walk(LookupCore, "all")
    walked = walk_events(events)
    # The last walk looks up keys 0..4 in one call: renumber its key 2 as 3.
    seq = next(s for s, index in reversed(walked) if index == 2)
    events[seq]["index"] = 3
    status, output = check_trace(events, tmp_path / "skips.ndjson")
    assert status == EXIT_TRACE_REJECTED, output
    assert f"none continues with event seq={seq} (Lookup)" in output
