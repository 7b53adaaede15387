"""Trace validation with the verdict cache on: real traces are ACCEPTED, the cache mutants' are REJECTED.

A core with a verdict cache records, for every key an action touched, the
entry its memory holds (statemachine/trace.py), and ``trace_to_tla`` turns
``CacheOn`` on for such a trace; tla/Trace.tla then matches a lookup
served from memory with ``LookupRecall`` and each recorded entry with the
model's (``MemoryMatches``).  The model has no clock: an expired or
evicted entry is one the next Lookup of its key probes past.

- Runs through the manual worker and the threaded worker, several requests
  revisiting keys, a ``mark_miss`` of a recalled key, entries expiring on a
  clock the test advances, an entry evicted by the bound, a failed call, and
  (manual run) a ``mark_miss`` of a key no request holds any more whose
  "stored" is remembered: ACCEPTED.
- The same manual run on each cache mutant core of
  tests/mutants/test_cache_mutants.py (one keeps an entry ``mark_miss``
  should forget, one keeps it only for a key without a state, one remembers
  a failure's MISS): REJECTED, and the rejection names the event that shows
  the defect.
"""

from __future__ import annotations

import re
import sys
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from kvprobe.backends.memory import InMemoryBackend
from kvprobe.check import EXIT_OK, EXIT_TRACE_REJECTED
from kvprobe.spec.lifecycle import LookupPhase
from kvprobe.statemachine import AsyncLookupManager, FailureKind, LookupCore, ManualWorker, ReqContext, VerdictCache
from kvprobe.testing.search import check_trace
from kvprobe.tlc import trace_to_tla

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "mutants"))
from mutant_cores import manager_with
from test_cache_mutants import CACHE as MACHINE_CACHE, MUTANTS as CACHE_MUTANTS
from test_tla_trace_real import stateful_runs

pytestmark = pytest.mark.tlc

Events = list[dict[str, object]]
K1, K2, K3, K4 = (bytes([n]) * 4 for n in range(1, 5))
STORED = [K1, K3]
R1, R2, R3, R4 = (ReqContext(f"r{n}") for n in range(1, 5))
#: Three entries at most; a "stored" is served 10 s, a "not stored" 2 s.
CACHE = VerdictCache(max_entries=3, hit_ttl_s=10.0, miss_ttl_s=2.0)
#: Runs of the Hypothesis machine drawn (the two serving most lookups from memory are checked).
STATEFUL_RUNS = 6


class Clock:
    """The time the cache's memory reads; the test advances it."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def answer_all(m: AsyncLookupManager, w: ManualWorker, failing: Sequence[bytes] = ()) -> None:
    """Flush, answer every group (a group holding a key of ``failing`` fails), and drain."""
    m.flush()
    while (batch := w.take_batch()) is not None:
        for group in batch.groups:
            if set(group.keys) & set(failing):
                w.fail(group, FailureKind.RAISED, "backend down")
            else:
                w.complete(group)
    m.drain_results()


def manual_run(manager_class: type[AsyncLookupManager] = AsyncLookupManager) -> Events:
    """Four requests through the manual worker, revisiting keys across requests (the events recorded)."""
    events: Events = []
    m = manager_class(InMemoryBackend(STORED), worker="manual", trace=events.append, verdict_cache=CACHE)
    assert isinstance(m.worker, ManualWorker) and m.core.memory is not None
    w, clock = m.worker, Clock()
    m.core.memory.clock = clock
    m.lookup(K1, R1)
    m.lookup(K2, R1)
    m.lookup(K4, R4)  # r4's group (one group per request) fails: nothing is remembered for K4
    answer_all(m, w, failing=[K4])
    m.cleanup("r1")
    m.cleanup("r4")
    for key in (K1, K2, K4):
        m.lookup(key, R2)  # K1 and K2 from memory, K4 probed
    answer_all(m, w)
    m.mark_miss([K1])  # loading the remembered K1 failed: forgotten
    m.cleanup("r2")
    clock.now = 3.0  # K2's and K4's "not stored" expired; nothing else
    for key in (K1, K2, K3):
        m.lookup(key, R3)  # K1 forgotten, K2 expired, K3 never asked: all three probed
    answer_all(m, w)  # K3's answer evicts the least recently used entry (K4's, expired)
    m.lookup(K4, R3)  # probed
    answer_all(m, w)  # K4's answer evicts K1's
    m.cleanup("r3")
    m.lookup_chain([K3, K1], R4)  # K3 from memory, K1 probed
    answer_all(m, w)
    m.cleanup("r4")
    m.mark_miss([K3, K2])  # no state: K3's remembered "stored" (its load failed) is forgotten; K2 was evicted
    m.lookup(K3, R1)  # probed, not served from memory
    answer_all(m, w)
    m.cleanup("r1")
    m.shutdown()
    return events


def settle(m: AsyncLookupManager, keys: Sequence[bytes], timeout_s: float = 10.0) -> None:
    """Flush, then drain until none of ``keys`` is in flight (the threaded worker answers on its own)."""
    m.flush()
    for _ in range(int(timeout_s / 0.002)):
        m.drain_results()
        if all(m.phase(k) is not LookupPhase.IN_FLIGHT for k in keys):
            return
        threading.Event().wait(0.002)  # the worker answers on its own thread
    raise AssertionError("the threaded worker did not answer")


def threaded_run() -> Events:
    """Three requests through the ThreadedWorker revisiting keys: recalls, a mark_miss, an expiry."""
    events: Events = []
    m = AsyncLookupManager(InMemoryBackend(STORED), trace=events.append, verdict_cache=CACHE)
    assert m.core.memory is not None
    clock = Clock()
    m.core.memory.clock = clock
    try:
        for key in (K1, K2, K3):
            m.lookup(key, R1)
        settle(m, [K1, K2, K3])
        assert [m.lookup(k, R1) for k in (K1, K2, K3)] == [True, False, True]
        m.cleanup("r1")
        assert [m.lookup(k, R2) for k in (K1, K2, K3)] == [True, False, True]  # all from memory
        m.mark_miss([K3])
        m.cleanup("r2")
        clock.now = 3.0  # K2's "not stored" expired
        for key in (K1, K2, K3):
            m.lookup(key, R3)  # K1 from memory, K2 and K3 probed
        settle(m, [K1, K2, K3])
        assert [m.lookup(k, R3) for k in (K1, K2, K3)] == [True, False, True]
        m.cleanup("r3")
    finally:
        m.shutdown()
    return events


def recalls(events: Events) -> int:
    """The lookups a trace shows served from memory: each made a new state (a generation not seen before) RESOLVED."""
    newest = count = 0
    for event in events:
        for item in event.get("after", []):  # type: ignore[attr-defined]
            if item["gen"] > newest:
                newest = item["gen"]
                count += event["action"] == "Lookup" and item["phase"] == "RESOLVED"
    return count


@pytest.mark.parametrize("run", [manual_run, threaded_run], ids=["manual", "threaded"])
def test_a_trace_recorded_with_the_cache_is_accepted(run: Callable[[], Events], tmp_path: Path) -> None:
    events = run()
    assert recalls(events) >= 3, "the run must serve lookups from memory"
    status, output = check_trace(events, tmp_path / "cached.ndjson")
    assert status == EXIT_OK, output
    assert "ACCEPTED" in output


def test_runs_of_the_hypothesis_machine_with_the_cache_are_accepted(tmp_path: Path) -> None:
    """The shipped machine with the cache (the configuration that finds the cache mutants): its runs serving most
    lookups from memory, its clock rule ageing the entries."""
    runs = sorted(stateful_runs(STATEFUL_RUNS, verdict_cache=MACHINE_CACHE), key=recalls, reverse=True)[:2]
    assert all(recalls(events) >= 1 for events in runs), "the sample must serve lookups from memory"
    for n, events in enumerate(runs):
        status, output = check_trace(events, tmp_path / f"stateful-{n}.ndjson")
        assert status == EXIT_OK, output


def test_the_manual_run_exercises_the_cache() -> None:
    """What the accepted manual run is claimed to hold: recalls, a forgetting, an expiry, an eviction."""
    events = manual_run()
    after = {(e["seq"], a["key"]): a for e in events for a in e.get("after", [])}  # type: ignore[attr-defined]
    mark = next(e for e in events if e["action"] == "MarkMiss")
    assert after[(mark["seq"], K1.hex())]["remembered"] is None  # forgotten
    failed = next(e for e in events if e["action"] == "Drain" and e["failure"] == "raised")
    assert all(after[(failed["seq"], k)]["remembered"] is None for k in failed["keys"])  # type: ignore[attr-defined]
    probed_again = [e for e in events if e["action"] == "Lookup" and e["req"] == "r3" and e["phase"] == "PENDING"]
    assert {e["key"] for e in probed_again} == {K1.hex(), K2.hex(), K3.hex(), K4.hex()}
    chain = [e for e in events if e["action"] == "Lookup" and "index" in e]  # the walk's lookups
    assert [(e["key"], e["phase"]) for e in chain] == [(K3.hex(), "RESOLVED"), (K1.hex(), "PENDING")]
    unheld = next(e for e in events if e["action"] == "MarkMiss" and e["keys"] == [K3.hex(), K2.hex()])
    last = next(e for e in reversed(events[: events.index(unheld)]) if (e["seq"], K3.hex()) in after)
    assert last["action"] == "Cleanup"  # K3 lost its state there, its "stored" still remembered
    k3_then, k3_marked = after[(last["seq"], K3.hex())], after[(unheld["seq"], K3.hex())]
    assert (k3_then["phase"], k3_then["remembered"]) == ("ABSENT", True)
    assert (k3_marked["phase"], k3_marked["remembered"]) == ("ABSENT", None)  # forgotten
    asked = [e for e in events[events.index(unheld) :] if e["action"] == "Lookup"]
    assert [(e["key"], e["phase"]) for e in asked] == [(K3.hex(), "PENDING")]


def test_a_cached_trace_sets_cache_on_and_an_uncached_one_does_not() -> None:
    _, cached = trace_to_tla(manual_run())
    assert "CacheOn = TRUE" in cached
    events: Events = []
    m = AsyncLookupManager(InMemoryBackend(STORED), worker="manual", trace=events.append)
    m.lookup(K1, R1)
    m.shutdown()
    assert "remembered" not in events[0]["after"][0]  # type: ignore[index]
    assert "CacheOn" not in trace_to_tla(events)[1]


def test_a_recall_of_another_verdict_is_rejected(tmp_path: Path) -> None:
    """A corrupted trace: r2's lookup of K1 served "not stored" from memory, where the backend said stored."""
    events = manual_run()
    asked = ("Lookup", "r2", K1.hex())
    index = next(i for i, e in enumerate(events) if (e["action"], e.get("req"), e.get("key")) == asked)
    event = events[index]
    assert event["verdict"] is True and event["phase"] == "RESOLVED"
    after = [{**a, "verdict": False} for a in event["after"]]  # type: ignore[attr-defined]
    events[index] = {**event, "verdict": False, "after": after}
    status, output = check_trace(events, tmp_path / "bad.ndjson")
    assert status == EXIT_TRACE_REJECTED, output
    assert f"seq={event['seq']} (Lookup)" in output


#: Per cache mutant, the event whose recorded entry shows the defect.
CULPRIT = {
    "cache-keeps-marked-miss": lambda e: e["action"] == "MarkMiss",
    "cache-forgets-live-only": lambda e: e["action"] == "MarkMiss" and e["keys"] == [K3.hex(), K2.hex()],
    "cache-remembers-failure": lambda e: e["action"] == "Drain" and e["failure"] is not None,
}


def test_every_cache_mutant_has_a_culprit() -> None:
    assert set(CULPRIT) == set(CACHE_MUTANTS)


@pytest.mark.parametrize("mutant", sorted(CULPRIT))
def test_a_cache_mutant_core_trace_is_rejected_at_its_defect(mutant: str, tmp_path: Path) -> None:
    core: type[LookupCore] = CACHE_MUTANTS[mutant]
    correct = manual_run()
    status, output = check_trace(correct, tmp_path / "correct.ndjson")
    assert status == EXIT_OK, output
    broken = manual_run(manager_with(core))
    culprit = next(e for e in broken if CULPRIT[mutant](e))
    status, output = check_trace(broken, tmp_path / f"{mutant}.ndjson")
    assert status == EXIT_TRACE_REJECTED, output
    named = re.search(r"none continues with event seq=(\d+) \((\w+)\)", output)
    assert named is not None, output
    assert (int(named[1]), named[2]) == (culprit["seq"], culprit["action"])
