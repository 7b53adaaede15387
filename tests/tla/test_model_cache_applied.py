"""CacheAnswerApplied in the reference model: the Python mirror of tla/KVProbe.tla's clause (issue 41).

The verdict cache keeps only an answer applied to its own generation's
state: never one of a generation MarkMiss made moot while it was in flight,
and always the first outcome published for its probe.  tests/tla/test_tla_cache.py
has TLC catch ``cache-keeps-moot-answer`` by the TLA+ clause; here the
Python clause holds where the reference model remembers, and breaks on the
state that mutant reaches.
"""

from __future__ import annotations

from dataclasses import replace

from kvprobe.spec import model
from kvprobe.spec.model_cache import CACHE_INVARIANTS, CacheAnswerApplied
from kvprobe.spec.model_state import CacheSpec, Remembered, State
from kvprobe.spec.model_worker import complete_group, late_answer, take_batch, time_out

KEY = b"k1"
CACHE = CacheSpec(max_entries=4, hit_ttl=60.0, miss_ttl=60.0)


def _in_flight() -> tuple[State, int]:
    """k1 looked up by r1, flushed and taken: IN_FLIGHT, its group running."""
    s, _ = model.lookup(State(cache=CACHE), KEY, "r1")
    s, _ = model.flush(s)
    s, groups = take_batch(s)
    return s, groups[0].group_id


def test_an_applied_answer_is_remembered_and_the_clause_holds() -> None:
    s, group = _in_flight()
    s = model.drain_all(complete_group(s, group, [True]))
    assert [(e.key, e.verdict) for e in s.memory] == [(KEY, True)]
    assert CacheAnswerApplied(s) and CACHE_INVARIANTS["CacheAnswerApplied"] is CacheAnswerApplied


def test_the_answer_of_a_probe_mark_miss_made_moot_is_not_remembered() -> None:
    # r1 finishes while k1 is in flight; the engine reports k1's failed load; the
    # backend's "stored" then arrives: it is dropped, and not remembered.
    s, group = _in_flight()
    s = model.mark_miss(model.cleanup(s, "r1"), [KEY])
    assert s.moot
    s = model.drain_all(complete_group(s, group, [True]))
    assert s.memory == () and CacheAnswerApplied(s)
    # What cache-keeps-moot-answer leaves behind: the moot generation's answer remembered.
    (key, gen), *_ = sorted(s.moot)
    assert not CacheAnswerApplied(replace(s, memory=(Remembered(key, True, gen, 60.0),)))


def test_a_late_answer_after_a_timeout_breaks_the_clause_if_remembered() -> None:
    # The first outcome published for the probe is the timeout's MISS: a remembered
    # late "stored" for that generation is not the answer that was applied.
    s, group = _in_flight()
    s = model.drain_all(late_answer(time_out(s, group, max_stuck=1), group, [True]))
    assert s.memory == () and CacheAnswerApplied(s)
    gen = s.probes[KEY].gen
    assert not CacheAnswerApplied(replace(s, memory=(Remembered(KEY, True, gen, 60.0),)))
