"""``chain_window_growth``: how much each window of ``lookup_chain`` grows, checked against the reference model.

Window ``k`` holds ``ceil(chain_window * growth**k)`` keys.  The library
computes the window ends (``windows.window_end``), the reference model the
window starts (``model_chain.window_start``), each on its own; the walk of
the core must be the model's walk for every growth: no key after a known
miss, and a window only once every key before it is known stored.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import given, strategies as st
from test_chain_mutants import ProbeAfterMiss, WindowSkipsAhead
from test_chain_windows import CTX, CountingTier, chain, manager, walk_until_decided

from kvprobe.backends.memory import InMemoryBackend
from kvprobe.integrations.vllm import AsyncLookupManager as DropIn
from kvprobe.spec import model_chain
from kvprobe.spec.model_chain import refusal, window_start
from kvprobe.spec.replay import TraceDivergence, check_trace
from kvprobe.statemachine import AsyncLookupManager, ChainAnswer, LookupCore, ManualWorker
from kvprobe.statemachine.types import InvalidInputError, InvalidValueError, ReqContext
from kvprobe.statemachine.windows import DEFAULT_CHAIN_WINDOW_GROWTH, MAX_CHAIN_WINDOW_GROWTH, window_end

GROWTHS = st.one_of(
    st.sampled_from([1.25, 1.5, 2.0, 3.0]),
    st.floats(min_value=1.001, max_value=MAX_CHAIN_WINDOW_GROWTH, allow_nan=False),
)


def test_the_default_growth_doubles_each_window_as_before() -> None:
    assert DEFAULT_CHAIN_WINDOW_GROWTH == 2.0
    for first in (1, 3, 16):
        ends = sorted({window_end(first, i) for i in range(first * 2**9)})
        assert ends == [first * (2 ** (k + 1) - 1) for k in range(10)]
        assert all(window_end(first, i) == window_end(first, i, 2.0) for i in range(first * 2**9))


def test_a_growth_of_one_and_a_half_sizes_windows_by_the_ceiling_of_its_powers() -> None:
    ends = sorted({window_end(4, i, 1.5) for i in range(131)})
    assert ends == [4, 10, 19, 33, 54, 85, 131]  # sizes 4, 6, 9, 14, 21, 31, 46


@given(first=st.integers(1, 64), growth=GROWTHS, index=st.integers(0, 20_000))
def test_the_library_window_is_the_reference_model_window(first: int, growth: float, index: int) -> None:
    # Two implementations (ends here, starts there): the window holding index is the same one.
    start, end = window_start(first, index, growth), window_end(first, index, growth)
    assert start <= index < end
    assert window_end(first, start, growth) == end
    assert start == 0 or window_end(first, start - 1, growth) == start
    assert end - start == math.ceil(first * growth ** _window_number(first, start, growth))


def _window_number(first: int, start: int, growth: float) -> int:
    number, end = 0, window_end(first, 0, growth)
    while end <= start:
        number, end = number + 1, window_end(first, end, growth)
    return number


def test_each_window_grows_by_the_growth_asked_for() -> None:
    keys = chain(100)
    tier = CountingTier(set(keys))
    with manager(tier, chain_window=4, chain_window_growth=1.5) as m:
        assert m.chain_window_growth == 1.5
        answers = walk_until_decided(m, keys)
        assert [a.looked_up for a in answers] == [4, 10, 19, 33, 54, 85, 100, 100]
        assert answers[-1] == ChainAnswer(100, False, False, 100)
        assert [len(call) for call, _ in tier.calls] == [4, 6, 9, 14, 21, 31, 15]


def model_answer(snapshot: Sequence[bool | None], first: int, growth: float) -> ChainAnswer:
    """The reference model's walk over verdicts known before the call (a walk changes no verdict)."""
    before: list[bool | None] = []
    for verdict in snapshot:
        if refusal(before, first, growth) is not None:
            break
        before.append(verdict)
    leading = next((i for i, v in enumerate(before) if v is not True), len(before))
    stopped = False in before
    pending = None in before[: before.index(False) if stopped else len(before)]
    return ChainAnswer(leading, stopped, pending, len(before))


def walk_against_model(
    m: AsyncLookupManager, tier: CountingTier, keys: Sequence[bytes], first: int, growth: float
) -> str | None:
    """Walk ``keys`` step by step until decided; the first way the core differs from the model, or None."""
    for _ in range(len(keys) + 3):
        m.drain_results()  # as the walk's own call does first: the verdicts it will see
        snapshot = [state.verdict if (state := m.core.states.get(k)) else None for k in keys]
        want = model_answer(snapshot, first, growth)
        asked = len(tier.calls)
        got = m.lookup_chain(keys, CTX)
        m.flush()
        worker = m.worker
        assert isinstance(worker, ManualWorker)
        worker.run_all()
        if got != want:
            return f"answered {got}, the model {want}"
        allowed = set(keys[: want.looked_up])
        probed = {k for call, _ in tier.calls[asked:] for k in call}
        if not probed <= allowed:
            return f"probed {len(probed - allowed)} keys the model does not look up"
        if got.decided:
            return None
    return "never decided"


@given(
    stored=st.sets(st.integers(0, 59)),
    prefix=st.integers(0, 60),
    length=st.integers(1, 60),
    first=st.integers(1, 5),
    growth=GROWTHS,
)
def test_the_walk_is_the_reference_models_for_every_growth(
    stored: set[int], prefix: int, length: int, first: int, growth: float
) -> None:
    keys = chain(length)
    # A stored prefix (the common case) plus scattered keys after it.
    tier = CountingTier({keys[i] for i in stored | set(range(prefix)) if i < length})
    with manager(tier, chain_window=first, chain_window_growth=growth) as m:
        assert walk_against_model(m, tier, keys, first, growth) is None


@pytest.mark.parametrize("growth", [1.25, 1.5, 3.0])
@pytest.mark.parametrize(("core", "missing"), [(WindowSkipsAhead, None), (ProbeAfterMiss, 3)])
def test_the_chain_mutants_differ_from_the_model_at_every_growth(
    core: type[LookupCore], missing: int | None, growth: float
) -> None:
    keys = chain(40)
    tier = CountingTier({k for i, k in enumerate(keys) if i != missing})
    m = type(f"Manager{core.__name__}", (AsyncLookupManager,), {"core_class": core})(
        tier, worker="manual", chain_window=1, chain_window_growth=growth
    )
    with m:
        assert walk_against_model(m, tier, keys, 1, growth) is not None


@pytest.mark.parametrize(
    ("value", "error", "message"),
    [
        (True, InvalidInputError, r"got bool"),
        ("1.5", InvalidInputError, r"got str"),
        (1, InvalidValueError, r"above 1 .*got 1$"),
        (1.0, InvalidValueError, r"got 1.0"),
        (0.5, InvalidValueError, r"got 0.5"),
        (-2.0, InvalidValueError, r"got -2.0"),
        (math.nan, InvalidValueError, r"got nan"),
        (math.inf, InvalidValueError, r"got inf"),
        (-math.inf, InvalidValueError, r"got -inf"),
        (16.5, InvalidValueError, r"at most 16, got 16.5"),
        (1e300, InvalidValueError, r"got 1e\+300"),
    ],
)
def test_a_bad_growth_is_refused_before_anything_starts(value: object, error: type, message: str) -> None:
    with pytest.raises(error, match=r"chain_window_growth .*" + message):
        AsyncLookupManager(CountingTier(set()), worker="manual", chain_window_growth=value)  # type: ignore[arg-type]


@pytest.mark.parametrize(("value", "kept"), [(3, 3.0), (1.25, 1.25), (16, 16.0)])
def test_an_int_or_float_growth_is_kept_as_a_float(value: Any, kept: float) -> None:
    with manager(CountingTier(set()), chain_window_growth=value) as m:
        assert m.chain_window_growth == kept and type(m.chain_window_growth) is float


def test_the_vllm_drop_in_passes_the_growth_through() -> None:
    class Tier(DropIn):
        def batch_lookup(self, keys: Sequence[bytes], req_context: object) -> list[bool]:
            return [True] * len(keys)

    default = Tier("t", worker="manual")
    grown = Tier("t", worker="manual", chain_window_growth=1.5)
    try:
        assert default.manager.chain_window_growth == 2.0
        assert grown.manager.chain_window_growth == 1.5
    finally:
        default.shutdown()
        grown.shutdown()
    with pytest.raises(InvalidValueError, match=r"chain_window_growth .*got 0.9"):
        Tier("t", worker="manual", chain_window_growth=0.9)


def _traced_walk_with_growth(growth: float) -> list[dict[str, object]]:
    """A manual-worker walk of 8 keys, the first 5 stored, first window 1: its events."""
    keys = [bytes([i]) * 4 for i in range(8)]
    events: list[dict[str, object]] = []
    m = AsyncLookupManager(
        InMemoryBackend(keys[:5]), worker="manual", chain_window=1, chain_window_growth=growth, trace=events.append
    )
    worker = m.worker
    assert isinstance(worker, ManualWorker)
    req = ReqContext("walker")
    while not m.lookup_chain(keys, req).decided:
        m.flush()
        worker.run_all()
    m.cleanup("walker")
    m.shutdown()
    return events


def test_a_trace_records_the_growth_and_the_replay_walks_by_it() -> None:
    events = _traced_walk_with_growth(3.0)
    lookups = [e for e in events if e["action"] == "Lookup"]
    assert lookups and all(e.get("growth") == 3.0 for e in lookups)
    assert check_trace(events) is None
    # Claimed as growing by 1.25, the walk looked key 3 up while keys 1 and 2 were unknown:
    # windows [1, 3) and [3, 5) under 1.25, one window [1, 4) under 3.
    relabelled = [{**e, "growth": 1.25} if e["action"] == "Lookup" else e for e in events]
    divergence = check_trace(relabelled)
    assert isinstance(divergence, TraceDivergence)
    assert divergence.action == "Lookup"


def test_a_default_trace_does_not_mention_the_growth() -> None:
    events = _traced_walk_with_growth(2.0)
    assert all("growth" not in e for e in events)


def test_the_reference_models_growth_bound_is_the_librarys() -> None:
    # The spec restates the bound (it imports nothing above it); the two must not drift.
    assert model_chain.MAX_CHAIN_WINDOW_GROWTH == MAX_CHAIN_WINDOW_GROWTH


def test_the_replay_takes_a_growth_up_to_the_bound_and_refuses_one_above_it() -> None:
    events = _traced_walk_with_growth(MAX_CHAIN_WINDOW_GROWTH)
    assert check_trace(events) is None
    above = [{**e, "growth": MAX_CHAIN_WINDOW_GROWTH * 1.5} if e["action"] == "Lookup" else e for e in events]
    divergence = check_trace(above)
    assert isinstance(divergence, TraceDivergence)
    assert f"not a number in (1, {MAX_CHAIN_WINDOW_GROWTH:g}]" in divergence.detail
