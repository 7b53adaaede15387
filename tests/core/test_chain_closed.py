"""After shutdown every path into the core refuses; lookup refuses look-alike keys and ids.

Issue 12, item 3: a bound ``lookup`` taken before shutdown (the manager hands
out the core's own bound method), ``lookup_chain``, and calls racing the
shutdown from another thread all raise ``ManagerClosedError`` and leave
nothing behind.  Item 11, lookup side: a key or request id that is merely
*equal* to a held one (a ``memoryview``, a ``numpy.bytes_``, a ``str``
subclass) is refused like a new one, and a ``req_id`` property that raises is
reported as bad input; nothing changes in either case.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from test_chain import RaisingId, StrId

from kvprobe.backends import InMemoryBackend
from kvprobe.statemachine import AsyncLookupManager, InvalidInputError, ManagerClosedError, ReqContext

KEYS = tuple(bytes([0xB0 + i]) * 16 + i.to_bytes(4, "little") for i in range(4))


def fresh(**kwargs: Any) -> AsyncLookupManager:
    return AsyncLookupManager(InMemoryBackend(KEYS[:2]), worker="manual", **kwargs)


# --- item 3: closed means closed ----------------------------------------------------------------


@pytest.mark.parametrize("mode", ["plain", "checked", "traced"])
def test_bound_lookup_taken_before_shutdown_raises(mode: str) -> None:
    events: list[dict[str, object]] = []
    m = fresh(checked=mode == "checked", trace=events.append if mode == "traced" else None)
    lookup = m.lookup
    lookup_chain = m.lookup_chain
    ctx = ReqContext("r")
    assert lookup(KEYS[0], ctx) is None
    m.shutdown()
    for call in (
        lambda: lookup(KEYS[0], ctx),
        lambda: lookup(KEYS[3], ReqContext("new")),
        lambda: lookup_chain(list(KEYS), ctx),
        lambda: m.lookup(KEYS[0], ctx),
        lambda: m.lookup_chain([KEYS[1]], ctx),
    ):
        for _ in range(1000):
            with pytest.raises(ManagerClosedError, match="'tier' was shut down"):
                call()
    assert len(m) == 0
    assert m.stats.probes_created == 1  # nothing after shutdown was counted either


def test_core_methods_after_shutdown_raise() -> None:
    # Every action of the core, reached directly, refuses after shutdown.
    m = fresh()
    m.lookup(KEYS[0], ReqContext("r"))
    core = m.core
    m.shutdown()
    for call in (
        lambda: core.lookup(KEYS[0], ReqContext("r")),
        lambda: core.lookup_chain([KEYS[0]], ReqContext("r")),
        core.flush,
        core.drain,
    ):
        with pytest.raises(ManagerClosedError):
            call()
    # Observers still work: an empty table, readable counters.
    assert len(m) == 0 and len(core.states) == 0 and list(core.requests.items()) == []
    assert m.stats.probes_created == 1


@pytest.mark.parametrize("entry", ["lookup", "lookup_chain"])
def test_calls_racing_shutdown_raise_or_leave_nothing(entry: str) -> None:
    # Threads hammer a bound method while the owner shuts down: each call either
    # returns (it ran before the shutdown) or raises ManagerClosedError; any other
    # error is a defect, and after shutdown returns nothing is held and every call raises.
    answered = sum(_race_once(entry) for _ in range(20))
    assert answered > 0  # the calls really ran while the shutdown happened


def _race_once(entry: str) -> int:
    m = AsyncLookupManager(InMemoryBackend(KEYS[:2]), worker="manual")
    bound = m.lookup if entry == "lookup" else m.lookup_chain
    started = threading.Barrier(3)
    errors: list[BaseException] = []
    closed_seen = [0, 0]
    answered = [0, 0]

    def hammer(slot: int) -> None:
        started.wait()
        n = 0
        deadline = time.monotonic() + 5.0
        while True:
            n += 1
            if time.monotonic() > deadline:
                errors.append(AssertionError("still answering 5 s after shutdown began"))
                return
            key = n.to_bytes(8, "little") + bytes(12)
            ctx = ReqContext(f"r{slot}-{n % 7}")
            try:
                if entry == "lookup":
                    bound(key, ctx)  # type: ignore[arg-type]
                else:
                    bound([KEYS[0], key, KEYS[2]], ctx)  # type: ignore[arg-type]
                answered[slot] += 1
            except ManagerClosedError:
                closed_seen[slot] += 1
                if closed_seen[slot] >= 50:
                    return
            except BaseException as exc:  # anything else is a defect
                errors.append(exc)
                return

    threads = [threading.Thread(target=hammer, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    started.wait()
    time.sleep(0.002)  # let the hammers run: the shutdown lands among their calls
    m.shutdown()
    assert len(m) == 0
    for t in threads:
        t.join(10)
        assert not t.is_alive()
    assert errors == []
    assert closed_seen == [50, 50]
    assert len(m) == 0 and len(m.core.requests) == 0 and len(m.core.step_batch) == 0
    return sum(answered)


# --- item 11, lookup side: look-alikes are refused, nothing changes ----------------------------


def _snapshot(m: AsyncLookupManager) -> Any:
    core = m.core
    return (
        {k: (s.phase, s.generation, frozenset(s.waiters), s.verdict) for k, s in core.states.items()},
        {r: [s.key for s in w.states] for r, w in core.requests.items()},
        len(core.step_batch),
        m.stats,
    )


def _look_alikes() -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = [("memoryview", lambda k: memoryview(k))]
    try:
        import numpy as np

        out.append(("numpy.bytes_", lambda k: np.bytes_(k)))
    except ImportError:  # pragma: no cover - numpy comes with torch in the dev venv
        pass
    return out


@pytest.mark.parametrize("asker", ["waiting-request", "other-request", "new-request"])
@pytest.mark.parametrize(("kind", "make"), _look_alikes(), ids=[k for k, _ in _look_alikes()])
def test_lookup_refuses_a_key_equal_to_a_held_one(kind: str, make: Any, asker: str) -> None:
    m = fresh()
    held = KEYS[0]
    m.lookup(held, ReqContext("r1"))
    m.lookup(KEYS[1], ReqContext("r2"))
    before = _snapshot(m)
    look_alike = make(held)
    assert look_alike == held and hash(look_alike) == hash(held)  # it would find the state
    req = {"waiting-request": "r1", "other-request": "r2", "new-request": "r3"}[asker]
    if asker == "waiting-request":
        # Documented exception (free hot path): the request already waiting on
        # the key gets its verdict, and nothing changes.
        assert m.lookup(look_alike, ReqContext(req)) is None
    else:
        with pytest.raises(InvalidInputError, match=r"lookup\(\) keys must be bytes, got " + type(look_alike).__name__):
            m.lookup(look_alike, ReqContext(req))
    assert _snapshot(m) == before
    m.shutdown()


@pytest.mark.parametrize("key", ["key-waited-on", "key-held-by-another", "new-key"])
def test_lookup_refuses_a_str_subclass_id_equal_to_a_registered_one(key: str) -> None:
    m = fresh()
    m.lookup(KEYS[0], ReqContext("r1"))
    m.lookup(KEYS[1], ReqContext("r2"))
    before = _snapshot(m)
    asked = {"key-waited-on": KEYS[0], "key-held-by-another": KEYS[1], "new-key": KEYS[3]}[key]
    if key == "key-waited-on":
        assert m.lookup(asked, ReqContext(StrId("r1"))) is None  # the documented exception: nothing changes
    else:
        with pytest.raises(InvalidInputError, match=r"req_id must be a str, got StrId"):
            m.lookup(asked, ReqContext(StrId("r1")))
    assert _snapshot(m) == before
    m.shutdown()


@pytest.mark.parametrize("key_held", [True, False], ids=["key-held", "new-key"])
def test_lookup_names_a_req_id_property_that_raises(key_held: bool) -> None:
    m = fresh()
    m.lookup(KEYS[0], ReqContext("r1"))
    before = _snapshot(m)
    with pytest.raises(InvalidInputError, match=r"lookup\(\) req_context\.req_id raised ValueError: no id yet"):
        m.lookup(KEYS[0] if key_held else KEYS[3], RaisingId())  # type: ignore[arg-type]
    assert _snapshot(m) == before
    m.shutdown()


def test_core_shutdown_twice_is_harmless() -> None:
    # A driver that retries its shutdown may call the core's twice; the second finds
    # closed tables and leaves them closed.
    m = fresh(trace=[].append)
    m.lookup(KEYS[0], ReqContext("r"))
    m.core.shutdown("first")
    m.core.shutdown("second")
    assert len(m) == 0
    with pytest.raises(ManagerClosedError, match="second"):
        m.core.lookup(KEYS[0], ReqContext("r"))
