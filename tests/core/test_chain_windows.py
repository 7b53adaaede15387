"""``lookup_chain`` probes a chain in growing windows: what it submits, when, and what it answers.

A window's keys are looked up only once every key before the window is
known stored, and no key after a known miss is ever looked up; keys past
the current window get no state.  The walk of earlier releases (every key up
to the first known miss at once) is ``chain_window="all"``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
from test_chain_mutants import ProbeAfterMiss, WindowSkipsAhead

from kvprobe.spec.model_chain import CHAIN_INVARIANTS
from kvprobe.spec.model_state import State
from kvprobe.spec.replay import TraceDivergence
from kvprobe.statemachine import (
    AsyncLookupManager,
    ChainAnswer,
    InvalidInputError,
    InvalidValueError,
    LookupCore,
    ManualWorker,
    ReqContext,
)
from kvprobe.statemachine.windows import DEFAULT_CHAIN_WINDOW, window_end
from kvprobe.testing.stateful import GhostRecorder

CTX = ReqContext("r1")


class CountingTier:
    """Stores an explicit set of keys; records every call's keys and answers."""

    def __init__(self, stored: set[bytes]) -> None:
        self.stored = stored
        self.calls: list[tuple[tuple[bytes, ...], tuple[bool, ...]]] = []

    def batch_lookup(self, keys: Sequence[bytes], req_context: object) -> list[bool]:
        answers = [k in self.stored for k in keys]
        self.calls.append((tuple(keys), tuple(answers)))
        return answers

    @property
    def checked(self) -> list[bytes]:
        return [k for keys, _ in self.calls for k in keys]


def chain(n: int) -> list[bytes]:
    return [i.to_bytes(4, "big") * 4 for i in range(n)]


def manager(tier: CountingTier, **options: Any) -> AsyncLookupManager:
    return AsyncLookupManager(tier, worker="manual", checked=True, **options)


def step(m: AsyncLookupManager, keys: Sequence[bytes], ctx: ReqContext = CTX) -> ChainAnswer:
    """One scheduler step: walk, flush; the worker answers before the next step."""
    answer = m.lookup_chain(keys, ctx)
    m.flush()
    worker = m.worker
    assert isinstance(worker, ManualWorker)
    worker.run_all()
    return answer


def walk_until_decided(m: AsyncLookupManager, keys: Sequence[bytes], limit: int = 30) -> list[ChainAnswer]:
    answers = [step(m, keys)]
    while not answers[-1].decided:
        assert len(answers) < limit, answers
        answers.append(step(m, keys))
    return answers


def test_a_long_chain_with_ten_stored_blocks_costs_one_window_of_checks() -> None:
    # The case: 3,600 blocks, the first 10 stored.  The walk of earlier
    # releases checked all 3,600 in its first step.
    keys = chain(3600)
    tier = CountingTier(set(keys[:10]))
    with manager(tier) as m:
        answers = walk_until_decided(m, keys)
        assert answers[-1] == ChainAnswer(10, True, False, 11)
        assert len(answers) == 2  # the first window holds the stored prefix and its end
        assert tier.checked == keys[:DEFAULT_CHAIN_WINDOW]
        assert len(m) == DEFAULT_CHAIN_WINDOW


def test_the_first_call_probes_only_the_first_window() -> None:
    keys = chain(100)
    with manager(CountingTier(set(keys)), chain_window=4) as m:
        assert m.lookup_chain(keys, CTX) == ChainAnswer(0, False, True, 4)
        assert len(m) == 4 and m.stats.probes_created == 4
        assert all(m.phase(k) is None for k in keys[4:])


def test_each_window_waits_for_every_key_before_it_and_doubles() -> None:
    keys = chain(100)
    tier = CountingTier(set(keys))
    with manager(tier, chain_window=4) as m:
        # A walk while the first window is in flight submits nothing more.
        m.lookup_chain(keys, CTX)
        m.flush()
        assert m.lookup_chain(keys, CTX) == ChainAnswer(0, False, True, 4)
        assert len(m) == 4
        m.worker.run_all()  # type: ignore[attr-defined]
        answers = walk_until_decided(m, keys)
        assert [a.looked_up for a in answers] == [12, 28, 60, 100, 100]
        assert answers[-1] == ChainAnswer(100, False, False, 100)
        # One backend call per window, each the window's keys: 4, 8, 16, 32, then the last 40.
        assert [len(call) for call, _ in tier.calls] == [4, 8, 16, 32, 40]


def test_no_key_after_the_first_miss_is_ever_probed() -> None:
    keys = chain(200)
    tier = CountingTier(set(keys[:5]) | set(keys[6:]))  # key 5 is missing
    with manager(tier, chain_window=4) as m:
        answers = walk_until_decided(m, keys)
        assert answers[-1] == ChainAnswer(5, True, False, 6)
        # Keys 6..11 share key 5's window (asked with it); nothing past that window.
        assert tier.checked == keys[: window_end(4, 5)]
        for _ in range(3):
            assert step(m, keys) == answers[-1]
        assert tier.checked == keys[:12]


def test_all_is_the_walk_that_probes_every_key_up_to_the_first_known_miss() -> None:
    keys = chain(300)
    tier = CountingTier(set(keys[:10]))
    with manager(tier, chain_window="all") as m:
        assert m.chain_window == "all"
        answers = walk_until_decided(m, keys)
        assert answers == [ChainAnswer(0, False, True, 300), ChainAnswer(10, True, False, 11)]
        assert tier.checked == keys


def test_a_request_walks_each_of_its_chains_in_its_own_windows() -> None:
    # One request, two chains (as with one chain per KV-cache group): the window
    # follows from each chain's own verdicts.
    first, second = chain(40), [k + b"\x01" for k in chain(40)]
    tier = CountingTier(set(first) | set(second[:3]))
    with manager(tier, chain_window=2) as m:
        assert m.lookup_chain(first, CTX).looked_up == 2
        step(m, second)
        assert m.lookup_chain(first, CTX).looked_up == 6  # first's own second window
        assert m.lookup_chain(second, CTX).looked_up == 6
        m.flush()
        m.worker.run_all()  # type: ignore[attr-defined]
        assert m.lookup_chain(second, CTX) == ChainAnswer(3, True, False, 4)


def test_cleanup_and_shutdown_leave_nothing_of_a_walk() -> None:
    keys = chain(64)
    with manager(CountingTier(set(keys)), chain_window=2) as m:
        walk_until_decided(m, keys)
        m.cleanup("r1")
        assert len(m) == 0 and not m.core.requests
        # A new walk of the same request starts at the first window again.
        assert m.lookup_chain(keys, CTX).looked_up == 2
        m.shutdown()
        assert len(m) == 0


def test_every_key_counted_stored_was_answered_stored_by_the_backend() -> None:
    keys = chain(50)
    tier = CountingTier(set(keys[:30]))
    with manager(tier, chain_window=1) as m:
        for answer in walk_until_decided(m, keys):
            answered = {k for call, said in tier.calls for k, v in zip(call, said, strict=True) if v}
            assert set(keys[: answer.leading_hits]) <= answered


@pytest.mark.parametrize(
    ("value", "error", "message"),
    [
        (0, InvalidValueError, r"at least 1"),
        (-4, InvalidValueError, r"at least 1"),
        ("some", InvalidValueError, r"'all' or a positive int, got 'some'"),
        (True, InvalidInputError, r"got bool"),
        (2.0, InvalidInputError, r"got float"),
    ],
)
def test_a_bad_chain_window_is_refused_before_anything_starts(value: object, error: type, message: str) -> None:
    with pytest.raises(error, match=r"chain_window .*" + message):
        AsyncLookupManager(CountingTier(set()), worker="manual", chain_window=value)  # type: ignore[arg-type]


def _traced_walk(
    core: type[LookupCore], stored: set[bytes], walks: int, window: int, *, validate: bool = True
) -> GhostRecorder:
    """Walk a chain with a (mutant) core, its trace recorded (and validated, unless not); return the recorder."""
    ghosts = GhostRecorder()
    if not validate:
        ghosts.checker.feed = lambda event: None  # type: ignore[method-assign]  # record the history only
    m = type(f"Manager{core.__name__}", (AsyncLookupManager,), {"core_class": core})(
        CountingTier(stored), worker="manual", trace=ghosts, chain_window=window
    )
    ghosts.bind(m.core)
    try:
        for _ in range(walks):
            step(m, chain(6))
    finally:
        ghosts.checking = False
        m.shutdown()
    return ghosts


@pytest.mark.parametrize(
    ("core", "stored", "walks", "window", "clause"),
    [
        (WindowSkipsAhead, set(chain(6)), 1, 2, "ChainWindowWaits"),
        (ProbeAfterMiss, set(chain(6)[2:]), 2, 4, "ChainStopsAtMiss"),
    ],
)
def test_trace_validation_rejects_a_walk_that_breaks_the_window_rule(
    core: type[LookupCore], stored: set[bytes], walks: int, window: int, clause: str
) -> None:
    with pytest.raises(TraceDivergence, match=r"a chain walk of 'r1' may not look up position"):
        _traced_walk(core, stored, walks, window)
    # The history recorded from the same events breaks the clause written for it.
    ghosts = _traced_walk(core, stored, walks, window, validate=False)
    assert not CHAIN_INVARIANTS[clause](State(chain_asks=tuple(ghosts.chain_asks)))


def test_the_correct_walk_records_a_history_every_chain_clause_accepts() -> None:
    ghosts = _traced_walk(LookupCore, set(chain(6)[:4]), 5, 1)
    assert len(ghosts.chain_asks) > 6
    assert all(holds(State(chain_asks=tuple(ghosts.chain_asks))) for holds in CHAIN_INVARIANTS.values())
