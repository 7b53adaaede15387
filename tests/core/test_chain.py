"""``lookup_chain`` is exactly the sequence of single lookups, stopping after the first MISS or the window.

Two managers on equal tiers are driven in lockstep: one asks each request's
keys with ``lookup_chain``, the other with single ``lookup`` calls stopping
after the first False or at the first key its window does not allow yet
(every key before the key's window known stored).  Answers, tables,
counters, backend calls and the traces must be equal after every operation.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import given, settings, strategies as st

from kvprobe.backends import InMemoryBackend
from kvprobe.spec.model_chain import refusal
from kvprobe.statemachine import (
    AsyncLookupManager,
    ChainAnswer,
    InvalidInputError,
    LookupPhase,
    ManualWorker,
    ReqContext,
)
from kvprobe.statemachine.core import COMPILED

KEYS = tuple(bytes([0xA0 + i]) * 8 + i.to_bytes(4, "big") for i in range(6))
REQS = ("r1", "r2", "r3")


def manager(
    stored: Sequence[bytes], *, trace: list[dict[str, object]] | None = None, window: int | str = 16
) -> AsyncLookupManager:
    return AsyncLookupManager(
        InMemoryBackend(stored),
        worker="manual",
        checked=True,
        trace=None if trace is None else trace.append,
        chain_window=window,  # type: ignore[arg-type]
    )


def single_lookups(m: AsyncLookupManager, keys: Sequence[bytes], ctx: ReqContext, window: int | str) -> ChainAnswer:
    """The reference: the chain's contract, spelled out with single lookups.

    Key ``i`` is looked up while no earlier answer was False and every key
    before ``i``'s window answered True (the reference model's rule); the
    first key that may not be is where the walk ends.
    """
    verdicts: list[bool | None] = []
    first = None if window == "all" else int(window)
    for key in keys:
        if refusal(verdicts, first) is not None:
            break
        verdict = m.lookup(key, ctx)
        verdicts.append(verdict)
        if verdict is False:
            break
    leading = 0
    while leading < len(verdicts) and verdicts[leading] is True:
        leading += 1
    stopped = bool(verdicts) and verdicts[-1] is False
    before_stop = verdicts[:-1] if stopped else verdicts
    # A walk cut at a window's end had an unknown key before it: pending, as it says.
    return ChainAnswer(leading, stopped, any(v is None for v in before_stop), len(verdicts))


def table(m: AsyncLookupManager) -> Any:
    """Everything the core holds, by value (generations included)."""
    core = m.core
    return (
        {k: (s.phase, s.generation, frozenset(s.waiters), s.verdict, s.owner.req_id) for k, s in core.states.items()},
        {r: [s.key for s in w.states] for r, w in core.requests.items()},
        [(s.key, s.generation) for s in core.step_batch],
        m.stats,
    )


def pump(m: AsyncLookupManager) -> None:
    worker = m.worker
    assert isinstance(worker, ManualWorker)
    worker.run_all()


def without_seq(events: list[dict[str, object]], *also: str) -> list[dict[str, object]]:
    dropped = {"seq", *also}
    return [{k: v for k, v in e.items() if k not in dropped} for e in events]


OPS = st.lists(
    st.one_of(
        # (key, copied): a copied key is equal to the pool's but another object, as
        # when an engine rebuilds its keys each step.
        st.tuples(
            st.just("chain"),
            st.sampled_from(REQS),
            st.lists(st.tuples(st.sampled_from(KEYS), st.booleans()), max_size=8),
        ),
        st.tuples(
            st.just("chain"),
            st.sampled_from(REQS),
            st.lists(st.tuples(st.sampled_from(KEYS), st.booleans()), max_size=8),
        ),
        st.tuples(st.just("flush")),
        st.tuples(st.just("pump")),
        st.tuples(st.just("cleanup"), st.sampled_from(REQS)),
        st.tuples(st.just("mark_miss"), st.lists(st.sampled_from(KEYS), max_size=2)),
    ),
    max_size=30,
)


@settings(max_examples=150, deadline=None)
@given(stored=st.sets(st.sampled_from(KEYS)), ops=OPS, window=st.sampled_from([1, 2, 3, "all"]))
def test_chain_equals_single_lookups(stored: set[bytes], ops: list[tuple[Any, ...]], window: int | str) -> None:
    chain_events: list[dict[str, object]] = []
    single_events: list[dict[str, object]] = []
    chained = manager(sorted(stored), trace=chain_events, window=window)
    single = manager(sorted(stored), trace=single_events, window=window)
    plain = manager(sorted(stored), window=window)  # the core's walk without the tracing layer
    try:
        for op in ops:
            if op[0] == "chain":
                ctx = ReqContext(op[1])
                keys = [bytes(bytearray(k)) if copied else k for k, copied in op[2]]
                mark = len(chain_events)
                got = chained.lookup_chain(keys, ctx)
                assert plain.lookup_chain(keys, ctx) == got
                want = single_lookups(single, keys, ctx, window)
                assert got == want, (op, got, want)
                # The walk's events say where each key is in the chain, and the window.
                walk = [(e["index"], e["window"]) for e in chain_events[mark:] if e["action"] == "Lookup"]
                assert walk == [(i, window) for i in range(got.looked_up)]
            else:
                for m in (chained, single, plain):
                    if op[0] == "flush":
                        m.flush()
                    elif op[0] == "pump":
                        pump(m)
                    elif op[0] == "cleanup":
                        m.cleanup(op[1])
                    else:
                        m.mark_miss(op[1])
            assert table(chained) == table(single) == table(plain), op
            assert chained.backend.calls == single.backend.calls == plain.backend.calls  # type: ignore[attr-defined]
        # The chain's trace is the single lookups' trace, event for event (plus the walk's fields).
        assert without_seq(chain_events, "index", "window") == without_seq(single_events)
    finally:
        for m in (chained, single, plain):
            m.shutdown()


def test_answer_fields_on_a_known_mix() -> None:
    hit, hit2, gone, later = KEYS[:4]
    m = manager([hit, hit2])
    ctx = ReqContext("r1")
    assert m.lookup_chain([hit, hit2, gone, later], ctx) == ChainAnswer(0, False, True, 4)
    m.flush()
    pump(m)
    # hit, hit2 stored; gone is not: the walk stops there and never asks about `later` again.
    assert m.lookup_chain([hit, hit2, gone, later], ctx) == ChainAnswer(2, True, False, 3)
    # An unknown key before the miss: pending, and the leading hits stop at it.
    fresh = KEYS[4]
    assert m.lookup_chain([hit, fresh, hit2, gone, later], ctx) == ChainAnswer(1, True, True, 4)
    assert m.lookup_chain([], ctx) == ChainAnswer(0, False, False, 0)
    m.shutdown()


def test_stop_at_miss_creates_nothing_after_it() -> None:
    first, miss, *after = KEYS
    m = manager([first])
    ctx = ReqContext("r1")
    m.lookup(miss, ReqContext("r0"))  # someone else's probe of `miss`
    m.flush()
    pump(m)
    assert m.lookup(miss, ReqContext("r0")) is False
    answer = m.lookup_chain([first, miss, *after], ctx)
    assert answer == ChainAnswer(0, True, True, 2)
    for key in after:
        assert m.phase(key) is None
    assert len(m) == 2
    calls_before = list(m.backend.calls)  # type: ignore[attr-defined]
    m.flush()
    pump(m)
    # Only `first` was probed for r1: nothing after the miss reached the backend.
    assert m.backend.calls[len(calls_before) :] == [((first,), "r1")]  # type: ignore[attr-defined]
    assert set(m.core.requests["r1"].states) == {m.core.states[first], m.core.states[miss]}
    m.shutdown()


def test_chain_is_answered_from_results_published_before_it() -> None:
    # Results the worker published are applied before the first key (as lookup does).
    key = KEYS[0]
    m = manager([key])
    ctx = ReqContext("r1")
    m.lookup_chain([key], ctx)
    m.flush()
    pump(m)  # published, not applied yet
    assert m.core.inbox
    assert m.lookup_chain([key], ctx) == ChainAnswer(1, False, False, 1)
    m.shutdown()


def test_chain_accepts_any_sequence() -> None:
    m = manager(KEYS[:2])
    ctx = ReqContext("r1")
    # a range-like sequence of keys: not a list or tuple, read once
    view = _KeySeq(KEYS[:3])
    assert m.lookup_chain(view, ctx) == ChainAnswer(0, False, True, 3)
    assert len(m) == 3
    m.shutdown()


class _KeySeq(Sequence[bytes]):
    def __init__(self, keys: Sequence[bytes]) -> None:
        self._keys = tuple(keys)

    def __getitem__(self, index: Any) -> Any:
        return self._keys[index]

    def __len__(self) -> int:
        return len(self._keys)


# --- errors: the same as lookup's, checked before anything changes -------------------------------


class StrId(str):
    pass


class RaisingId:
    @property
    def req_id(self) -> str:
        raise ValueError("no id yet")


class Sub(bytes):
    pass


def _np_key(key: bytes) -> object:
    np = pytest.importorskip("numpy")
    return np.bytes_(key)


BAD_KEYS: list[tuple[str, Any, str]] = [
    ("single-bytes", lambda: KEYS[0], r"takes a sequence of keys, got a single bytes; wrap it in a list"),
    ("single-str", lambda: "abc", r"takes a sequence of keys, got a single str"),
    ("not-a-sequence", lambda: {KEYS[0]}, r"takes a sequence of keys, got set"),
    ("None", lambda: None, r"takes a sequence of keys, got NoneType"),
    ("str-element-last", lambda: [*KEYS[:4], "k"], r"keys must be bytes, got str"),
    ("memoryview-of-held-key", lambda: [KEYS[0], memoryview(KEYS[1])], r"keys must be bytes, got memoryview"),
    ("numpy-bytes-of-held-key", lambda: [KEYS[0], _np_key(KEYS[1])], r"keys must be bytes, got bytes_"),
    ("bytes-subclass-new", lambda: [KEYS[0], KEYS[5], Sub(KEYS[4])], r"keys must be bytes, got Sub"),
    ("bytearray-first", lambda: [bytearray(KEYS[0])], r"keys must be bytes, got bytearray"),
]


@pytest.mark.parametrize(("what", "make", "message"), BAD_KEYS, ids=[b[0] for b in BAD_KEYS])
def test_chain_rejects_bad_keys_and_changes_nothing(what: str, make: Any, message: str) -> None:
    m = manager(KEYS[:2])
    ctx = ReqContext("r1")
    m.lookup_chain(KEYS[:2], ctx)  # r1 already waits on the first two keys
    m.flush()
    pump(m)  # published, not applied: an erroneous call must not apply them either
    before = table(m)
    inbox = len(m.core.inbox)
    with pytest.raises(InvalidInputError, match=message):
        m.lookup_chain(make(), ctx)
    with pytest.raises(InvalidInputError, match=message):
        m.lookup_chain(make(), ReqContext("r2"))  # a request that waits on nothing yet
    assert table(m) == before and len(m.core.inbox) == inbox
    m.shutdown()


BAD_CONTEXTS: list[tuple[str, Any, str]] = [
    ("no-req_id", object(), r"must have a \.req_id attribute; object has none"),
    ("int-req_id", ReqContext(7), r"req_id must be a str, got int"),  # type: ignore[arg-type]
    ("str-subclass-of-held-id", ReqContext(StrId("r1")), r"req_id must be a str, got StrId"),
    ("raising-property", RaisingId(), r"req_context\.req_id raised ValueError: no id yet"),
    ("unhashable", ReqContext(["r1"]), r"req_id must be a str, got list"),  # type: ignore[arg-type]
]


@pytest.mark.parametrize(("what", "ctx", "message"), BAD_CONTEXTS, ids=[b[0] for b in BAD_CONTEXTS])
def test_chain_rejects_bad_context_and_changes_nothing(what: str, ctx: Any, message: str) -> None:
    m = manager(KEYS[:2])
    m.lookup_chain(KEYS[:3], ReqContext("r1"))
    before = table(m)
    with pytest.raises(InvalidInputError, match=r"lookup_chain\(\) .*" + message):
        m.lookup_chain(KEYS[:3], ctx)
    assert table(m) == before
    m.shutdown()


def test_unchecked_manager_hands_out_the_core_walk() -> None:
    # Without checked mode or a trace, m.lookup_chain is the core's own bound method
    # (no manager layer on the hot path), like m.lookup.
    m = AsyncLookupManager(InMemoryBackend(), worker="manual")
    assert m.lookup_chain.__self__ is m.core  # type: ignore[attr-defined]
    # Equal bound methods: same object, same function (a compiled core's
    # methods are C functions, so there is no __func__ to compare).
    assert m.lookup_chain == m.core.lookup_chain
    assert m.lookup == m.core.lookup
    m.shutdown()


@pytest.mark.parametrize("how", ["lookup", "lookup_chain"])
def test_a_new_probe_sets_every_slot_to_what_the_lookup_action_makes(how: str) -> None:
    # lookup and lookup_chain make a state in one place (LookupCore._new_probe),
    # which sets each slot itself: ProbeState has no __init__.  Every slot must
    # be set (an unset one would raise at its first read) to the model's new
    # state: PENDING, the next generation, its creator the one waiter, no verdict.
    # A compiled ProbeState is a native class: its attributes are listed in
    # __mypyc_attrs__ instead of __slots__.
    from kvprobe.statemachine.records import ProbeState

    m = AsyncLookupManager(InMemoryBackend(), worker="manual")
    m.lookup(KEYS[1], ReqContext("r0"))  # the generation counter is past its start
    ctx = ReqContext("r1")
    if how == "lookup":
        m.lookup(KEYS[0], ctx)
    else:
        m.lookup_chain([KEYS[0]], ctx)
    made = m.core.states[KEYS[0]]
    owner = m.core.requests["r1"]
    slots = ProbeState.__mypyc_attrs__ if COMPILED else ProbeState.__slots__  # type: ignore[attr-defined]
    assert set(slots) == {"phase", "generation", "waiters", "verdict", "key", "owner"}
    want = {"phase": LookupPhase.PENDING, "generation": 2, "waiters": {"r1"}, "verdict": None, "key": KEYS[0]}
    assert {slot: getattr(made, slot) for slot in sorted(want)} == want
    assert made.owner is owner and type(made) is ProbeState
    assert owner.states == [made] and m.core.step_batch[-1] is made
    m.shutdown()


@pytest.mark.parametrize("make", [memoryview, _np_key, Sub], ids=["memoryview", "numpy.bytes_", "bytes-subclass"])
def test_a_waiting_request_re_walking_with_a_look_alike_key_is_refused(make: Any) -> None:
    # The walk of a request that already waits on its keys reads its own states
    # first (no table lookup); a key equal to the listed one but not exactly bytes
    # must still be refused there, with no results waiting to force the full check.
    m = manager(KEYS[:2])
    ctx = ReqContext("r1")
    m.lookup_chain(KEYS[:3], ctx)
    m.flush()
    pump(m)
    m.lookup_chain(KEYS[:3], ctx)  # applies the results
    assert not m.core.inbox
    before = table(m)
    with pytest.raises(InvalidInputError, match=r"keys must be bytes, got "):
        m.lookup_chain([KEYS[0], make(KEYS[1]), KEYS[2]], ctx)
    assert table(m) == before
    m.shutdown()


def test_compiled_flag_tells_which_build_is_loaded() -> None:
    # COMPILED is what a user (and the compiled CI job) reads to know the
    # build; it must agree with the file the core was actually loaded from.
    import kvprobe.statemachine.chain as chain
    import kvprobe.statemachine.core as core
    import kvprobe.statemachine.inputs as inputs
    import kvprobe.statemachine.records as records
    import kvprobe.statemachine.rules as rules

    assert core.COMPILED is (not core.__file__.endswith(".py"))
    # The hot-path modules are compiled together or not at all (setup.py).
    hot_path = (records, rules, inputs, chain, core)
    assert {str(module.__file__).endswith(".py") for module in hot_path} == {not core.COMPILED}
