"""Bad input: a typed error whose message names the problem, and nothing changed.

The manager's errors are :class:`InvalidInputError` (a ``TypeError``: wrong
kind of thing) and :class:`InvalidValueError` (a ``ValueError``: right kind,
value not allowed); backends raise ``TypeError`` for a non-bytes key.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
from fault_harness import calls_from_another_thread, drive, finish, keys

from kvprobe.backends import FsBackend, InMemoryBackend
from kvprobe.backends._host_pace import HostPacer
from kvprobe.backends._pacing import PaceCore
from kvprobe.statemachine import (
    AsyncLookupManager,
    InvalidInputError,
    InvalidValueError,
    KvprobeError,
    ReqContext,
    VerdictCache,
    WrongThreadError,
)

NOT_BYTES = [
    ("str", "abc"),
    ("int", 7),
    ("None", None),
    ("bytearray", bytearray(b"abc")),
    ("list", [1, 2]),
    ("tuple", (b"a",)),
]


def _snapshot(m: AsyncLookupManager) -> tuple[int, Any]:
    return len(m), m.stats


@pytest.fixture
def m() -> Any:
    manager = AsyncLookupManager(InMemoryBackend(keys("stored", 2)), worker="manual")
    yield manager
    manager.shutdown()


@pytest.mark.parametrize(("what", "key"), NOT_BYTES, ids=[n for n, _ in NOT_BYTES])
def test_lookup_rejects_non_bytes_key(m: AsyncLookupManager, what: str, key: object) -> None:
    # Also when other states exist (the table lookup must not let it through).
    m.lookup(keys("stored", 1)[0], ReqContext("r0"))
    before = _snapshot(m)
    with pytest.raises(InvalidInputError, match=r"keys must be bytes, got " + type(key).__name__):
        m.lookup(key, ReqContext("r1"))  # type: ignore[arg-type]
    assert _snapshot(m) == before


class NoReqId:
    pass


class IntReqId:
    req_id = 17


class UnhashableReqId:
    def __init__(self) -> None:
        self.req_id = ["r", "1"]


@pytest.mark.parametrize("existing", [False, True], ids=["new-key", "existing-key"])
@pytest.mark.parametrize(
    ("context", "message"),
    [
        (NoReqId(), r"must have a \.req_id attribute; NoReqId has none"),
        (None, r"must have a \.req_id attribute; NoneType has none"),
        ("r1", r"must have a \.req_id attribute; str has none"),
        (IntReqId(), r"req_id must be a str, got int"),
        (ReqContext(b"r1"), r"req_id must be a str, got bytes"),  # type: ignore[arg-type]
    ],
    ids=["no-attr", "None", "str-context", "int-req_id", "bytes-req_id"],
)
def test_lookup_rejects_bad_context(m: AsyncLookupManager, context: object, message: str, existing: bool) -> None:
    key = keys("stored", 1)[0]
    if existing:
        m.lookup(key, ReqContext("r0"))
    before = _snapshot(m)
    with pytest.raises(InvalidInputError, match=message):
        m.lookup(key, context)  # type: ignore[arg-type]
    assert _snapshot(m) == before


def test_lookup_rejects_unhashable_req_id_of_a_new_key(m: AsyncLookupManager) -> None:
    with pytest.raises(InvalidInputError, match=r"req_id must be a str, got list"):
        m.lookup(keys("stored", 1)[0], UnhashableReqId())  # type: ignore[arg-type]
    assert len(m) == 0


def test_lookup_rejects_unhashable_req_id_of_an_existing_key(m: AsyncLookupManager) -> None:
    key = keys("stored", 1)[0]
    m.lookup(key, ReqContext("r0"))
    with pytest.raises(InvalidInputError, match=r"req_id must be a str, got list"):
        m.lookup(key, UnhashableReqId())  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("keys_arg", "error", "message"),
    [
        (b"a-single-key", InvalidInputError, r"iterable of keys, got a single bytes; wrap it in a list"),
        ("a-str", InvalidInputError, r"iterable of keys, got a single str"),
        (bytearray(b"k"), InvalidInputError, r"iterable of keys, got a single bytearray"),
        (None, InvalidInputError, r"iterable of keys, got NoneType"),
        (5, InvalidInputError, r"iterable of keys, got int"),
        ([b"ok", "not-bytes"], InvalidInputError, r"keys must be bytes, got str"),
        ([b"ok", 3], InvalidInputError, r"keys must be bytes, got int"),
    ],
    ids=["bytes", "str", "bytearray", "None", "int", "mixed-str", "mixed-int"],
)
def test_mark_miss_rejects_bad_keys(
    m: AsyncLookupManager, keys_arg: object, error: type[Exception], message: str
) -> None:
    key = keys("stored", 1)[0]
    m.lookup(key, ReqContext("r0"))
    before = _snapshot(m)
    with pytest.raises(error, match=message):
        m.mark_miss(keys_arg)  # type: ignore[arg-type]
    # Nothing changed: not even the valid keys before the bad one.
    assert _snapshot(m) == before


def test_mark_miss_is_all_or_nothing(m: AsyncLookupManager) -> None:
    key = keys("stored", 1)[0]
    m.lookup(key, ReqContext("r0"))
    with pytest.raises(InvalidInputError):
        m.mark_miss([key, "bad"])  # type: ignore[list-item]
    assert m.stats.forced_misses == 0
    assert m.lookup(key, ReqContext("r0")) is None  # still PENDING, not forced to MISS


@pytest.mark.parametrize(("what", "req_id"), [("int", 1), ("None", None), ("bytes", b"r")])
def test_cleanup_rejects_non_str(m: AsyncLookupManager, what: str, req_id: object) -> None:
    before = _snapshot(m)
    with pytest.raises(InvalidInputError, match="request id string, got " + type(req_id).__name__):
        m.cleanup(req_id)  # type: ignore[arg-type]
    assert _snapshot(m) == before


TIMEOUTS = [
    (-1, InvalidValueError, r"must be positive and finite, got -1"),
    (0, InvalidValueError, r"must be positive and finite, got 0"),
    (0.0, InvalidValueError, r"must be positive and finite, got 0\.0"),
    (float("nan"), InvalidValueError, r"must be positive and finite, got nan"),
    (float("inf"), InvalidValueError, r"must be positive and finite, got inf"),
    (-float("inf"), InvalidValueError, r"must be positive and finite, got -inf"),
    ("1.0", InvalidInputError, r"must be a number of seconds, got str"),
    (True, InvalidInputError, r"must be a number of seconds, got bool"),
    ([1], InvalidInputError, r"must be a number of seconds, got list"),
    (complex(1, 0), InvalidInputError, r"must be a number of seconds, got complex"),
    (10**400, InvalidValueError, r"must be positive and finite, got 1000.* \(at most threading\.TIMEOUT_MAX"),
]


@pytest.mark.parametrize("argument", ["lookup_timeout_s", "shutdown_timeout_s"])
@pytest.mark.parametrize(("value", "error", "message"), TIMEOUTS, ids=[repr(v[0])[:12] for v in TIMEOUTS])
def test_bad_timeouts(argument: str, value: object, error: type[Exception], message: str) -> None:
    threads = threading.active_count()
    with pytest.raises(error, match=argument + " " + message):
        AsyncLookupManager(InMemoryBackend(), **{argument: value})  # type: ignore[arg-type]
    assert threading.active_count() == threads, "a rejected manager left a worker thread behind"


def test_good_timeouts_are_accepted() -> None:
    for value in (0.001, 1, 2.5, 10**6):
        AsyncLookupManager(InMemoryBackend(), lookup_timeout_s=value, shutdown_timeout_s=value).shutdown()


@pytest.mark.parametrize(
    ("value", "error", "message"),
    [
        (0, InvalidValueError, r"max_stuck_calls must be at least 1, got 0"),
        (-3, InvalidValueError, r"max_stuck_calls must be at least 1, got -3"),
        (1.5, InvalidInputError, r"max_stuck_calls must be an int, got float"),
        ("4", InvalidInputError, r"max_stuck_calls must be an int, got str"),
        (True, InvalidInputError, r"max_stuck_calls must be an int, got bool"),
    ],
)
def test_bad_max_stuck_calls(value: object, error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message):
        AsyncLookupManager(InMemoryBackend(), lookup_timeout_s=1.0, max_stuck_calls=value)  # type: ignore[arg-type]


class NoBatchLookup:
    def lookup(self, key: bytes) -> bool:
        return False


class NotCallable:
    batch_lookup = "not a method"


@pytest.mark.parametrize(
    ("backend", "name"),
    [(NoBatchLookup(), "NoBatchLookup"), (NotCallable(), "NotCallable"), (None, "NoneType"), ({}, "dict")],
    ids=["other-method", "not-callable", "None", "dict"],
)
def test_backend_without_batch_lookup(backend: object, name: str) -> None:
    with pytest.raises(InvalidInputError, match=r"callable batch_lookup\(keys, req_context\); " + name + " has none"):
        AsyncLookupManager(backend)  # type: ignore[arg-type]


def test_unknown_worker_choice() -> None:
    with pytest.raises(InvalidValueError, match=r"worker must be 'thread', 'manual' or a Worker object, got 'proc'"):
        AsyncLookupManager(InMemoryBackend(), worker="proc")  # type: ignore[arg-type]


def test_errors_are_typed_by_blame() -> None:
    assert issubclass(InvalidInputError, TypeError) and issubclass(InvalidInputError, KvprobeError)
    assert issubclass(InvalidValueError, ValueError) and issubclass(InvalidValueError, KvprobeError)
    assert issubclass(WrongThreadError, RuntimeError) and issubclass(WrongThreadError, KvprobeError)


# --- backends' own entry points ------------------------------------------------------


def _backends(tmp_path: Path) -> list[Any]:
    made: list[Any] = [InMemoryBackend(), FsBackend(tmp_path / "fs")]
    try:
        from kvprobe.backends.nixl_posix import NixlPosixBackend

        made.append(NixlPosixBackend(tmp_path / "nixl"))
    except ImportError:
        pass
    return made


@pytest.mark.parametrize(("what", "key"), NOT_BYTES, ids=[n for n, _ in NOT_BYTES])
def test_backends_reject_non_bytes_keys(tmp_path: Path, what: str, key: object) -> None:
    for backend in _backends(tmp_path):
        try:
            pattern = r"keys? must be bytes, got " + type(key).__name__
            with pytest.raises(TypeError, match=pattern):
                backend.locate(key)
            with pytest.raises(TypeError, match=pattern):
                backend.batch_lookup([b"fine", key], None)
            with pytest.raises(TypeError, match=pattern):
                backend.store(key)
        finally:
            close: Callable[[], None] | None = getattr(backend, "close", None)
            if close is not None:
                close()


def test_bytes_subclass_key_is_rejected() -> None:
    # Keys are exactly bytes: a subclass could hash and compare unlike bytes.
    class Sub(bytes):
        pass

    backend = InMemoryBackend()
    with AsyncLookupManager(backend) as m:
        key = Sub(b"k" * 16)
        with pytest.raises(InvalidInputError, match="keys must be bytes, got Sub"):
            m.lookup(key, ReqContext("r"))
        assert len(m) == 0


# --- checked mode: calls from a second thread ------------------------------------------


def test_checked_mode_rejects_a_second_thread() -> None:
    stored = keys("stored", 2)
    m = AsyncLookupManager(InMemoryBackend(stored), checked=True)
    try:
        assert drive(m, {"r1": stored}).values == [True, True]  # this thread owns it now
        before = _snapshot(m)
        calls: dict[str, Callable[[], object]] = {
            "lookup": lambda: m.lookup(stored[0], ReqContext("r2")),
            "flush": m.flush,
            "drain_results": m.drain_results,
            "cleanup": lambda: m.cleanup("r1"),
            "mark_miss": lambda: m.mark_miss(stored),
            "phase": lambda: m.phase(stored[0]),
            "shutdown": m.shutdown,
        }
        errors = calls_from_another_thread(calls)
        for name in calls:
            exc = errors[name]
            assert isinstance(exc, WrongThreadError), f"{name} from another thread: {exc!r}"
            assert "intruder" in str(exc) and "belongs to the thread that first called it" in str(exc)
        assert _snapshot(m) == before and not m.closed
        # The owner carries on.
        assert finish(m, ["r1"]) == 0
    finally:
        m.shutdown()


def test_unchecked_mode_has_no_thread_check() -> None:
    # Documented: detection is a checked-mode feature (the hot path pays nothing).
    m = AsyncLookupManager(InMemoryBackend(), worker="manual")
    result: list[object] = []
    thread = threading.Thread(target=lambda: result.append(m.lookup(b"k", ReqContext("r"))))
    thread.start()
    thread.join(10)
    assert result == [None]
    m.shutdown()


# --- input that raises something of its own while it is read -------------------------------------


class RaisingReqId:
    """A context whose ``req_id`` property raises ``KeyError`` (not a missing attribute)."""

    @property
    def req_id(self) -> str:
        raise KeyError("req_id")


class UnhashableKey:
    """A key whose ``__hash__`` raises something other than ``TypeError``."""

    def __hash__(self) -> int:
        raise RuntimeError("hash refused")


class UnhashableBytes(bytes):
    """A bytes look-alike whose ``__hash__`` raises."""

    def __hash__(self) -> int:
        raise ZeroDivisionError("hash refused")


class BrokenKeys(Sequence[bytes]):
    """A sequence of keys whose reading raises ``OSError`` (a lazily loaded list, say)."""

    def __len__(self) -> int:
        return 2

    def __getitem__(self, index: Any) -> Any:
        raise OSError(5, "read failed")


@pytest.fixture(params=[False, True], ids=["unchecked", "checked"])
def held(request: pytest.FixtureRequest) -> Any:
    """A manager (checked or not) holding one probe for request ``r0``."""
    manager = AsyncLookupManager(InMemoryBackend(keys("stored", 2)), worker="manual", checked=request.param)
    manager.lookup(keys("stored", 1)[0], ReqContext("r0"))
    yield manager
    manager.shutdown()


RAISING_LOOKUPS = [
    ("req_id-raises-KeyError", lambda key: (key, RaisingReqId()), r"req_context\.req_id raised KeyError"),
    ("key-hash-raises", lambda key: (UnhashableKey(), ReqContext("r1")), r"keys must be bytes, got UnhashableKey"),
    ("bytes-hash-raises", lambda key: (UnhashableBytes(b"k"), ReqContext("r1")), r"got UnhashableBytes"),
]


@pytest.mark.parametrize(("make", "message"), [c[1:] for c in RAISING_LOOKUPS], ids=[c[0] for c in RAISING_LOOKUPS])
def test_lookup_turns_input_that_raises_into_invalid_input(held: AsyncLookupManager, make: Any, message: str) -> None:
    key, context = make(keys("stored", 1)[0])
    before = _snapshot(held)
    with pytest.raises(InvalidInputError, match=message):
        held.lookup(key, context)
    assert _snapshot(held) == before


RAISING_CHAINS = [
    ("req_id-raises-KeyError", lambda key: ([key], RaisingReqId()), r"req_context\.req_id raised KeyError"),
    ("keys-raise-OSError", lambda key: (BrokenKeys(), ReqContext("r0")), r"could not read its keys: OSError"),
    ("key-hash-raises", lambda key: ([key, UnhashableKey()], ReqContext("r1")), r"got UnhashableKey"),
    ("held-then-hash-raises", lambda key: ([key, UnhashableBytes(b"k")], ReqContext("r0")), r"got UnhashableBytes"),
]


@pytest.mark.parametrize(("make", "message"), [c[1:] for c in RAISING_CHAINS], ids=[c[0] for c in RAISING_CHAINS])
def test_lookup_chain_turns_input_that_raises_into_invalid_input(
    held: AsyncLookupManager, make: Any, message: str
) -> None:
    chain, context = make(keys("stored", 1)[0])
    before = _snapshot(held)
    with pytest.raises(InvalidInputError, match=message):
        held.lookup_chain(chain, context)
    assert _snapshot(held) == before


# Every numeric option of the public surface, with a value that is an int too
# large for a float (and its negative): each must be refused with the typed
# error the option documents, naming it, never a bare OverflowError raised
# while it is converted.
def _manager(**kw: object) -> None:
    AsyncLookupManager(InMemoryBackend(), **kw).shutdown()  # type: ignore[arg-type]


def _verdict_cache(**kw: object) -> None:
    args: dict[str, object] = {"max_entries": 8, "hit_ttl_s": 1.0, "miss_ttl_s": 1.0} | kw
    VerdictCache(**args)  # type: ignore[arg-type]


def _pace(**kw: object) -> None:
    PaceCore(0.0, **kw)  # type: ignore[arg-type]


def _host_pace(**kw: object) -> None:
    HostPacer(Path("/nonexistent/kvprobe-pace.json"), **kw)  # type: ignore[arg-type]


FLOAT_OPTIONS = [
    (_manager, "lookup_timeout_s", InvalidValueError),
    (_manager, "shutdown_timeout_s", InvalidValueError),
    (_manager, "busy_call_hold_s", InvalidValueError),
    (_manager, "chain_window_growth", InvalidValueError),
    (_verdict_cache, "hit_ttl_s", InvalidValueError),
    (_verdict_cache, "miss_ttl_s", InvalidValueError),
    *((_pace, name, ValueError) for name in ("c", "beta", "floor", "burst_s", "window_min_s", "idle_s")),
    *((_pace, name, ValueError) for name in ("max_hold_s", "start_rate")),
    (_host_pace, "idle_reset_s", ValueError),
]


@pytest.mark.parametrize("sign", [1, -1], ids=["huge", "minus-huge"])
@pytest.mark.parametrize(
    ("make", "name", "error"), FLOAT_OPTIONS, ids=[f"{m.__name__}-{n}" for m, n, _ in FLOAT_OPTIONS]
)
def test_a_huge_int_is_refused_naming_the_option(
    make: Callable[..., None], name: str, error: type[Exception], sign: int
) -> None:
    with pytest.raises(error, match=name) as raised:
        make(**{name: sign * 10**400})
    assert not isinstance(raised.value, OverflowError)


# Integer options take any size of int (none is converted to a float): a huge
# one is a valid, if pointless, bound.
INT_OPTIONS = [
    (_manager, "max_stuck_calls"),
    (_manager, "max_concurrent_groups"),
    (_manager, "chain_window"),
    (_verdict_cache, "max_entries"),
    (_pace, "window_heads"),
    (_pace, "holdoff_max"),
]


@pytest.mark.parametrize(("make", "name"), INT_OPTIONS, ids=[f"{m.__name__}-{n}" for m, n in INT_OPTIONS])
def test_a_huge_int_bound_is_accepted(make: Callable[..., None], name: str) -> None:
    make(**{name: 10**400})
