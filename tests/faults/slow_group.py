"""A slow group never delays another: the scenario the visibility tests and their mutant test share.

Two requests look up their keys: *slow*, whose backend call waits until the
test releases it, and *fast*, whose call returns at once.  Their groups are
either two groups of one flush (one batch) or the slow one's batch first and
the fast one's in a later flush.  The scenario then polls (``drain_results``
and ``lookup``, no further flush) until the fast group's verdicts are
visible, and checks, at that moment, that the slow call has not returned
and the slow keys have no verdict: a fast group's verdicts do not wait for a
slow group.  Only then does it release the slow call.

Nothing here is timed.  The slow call waits on an event (a ``threading.Event``
in this process, or a file the test creates for a call running in a
``ProcessBackend`` helper); the fast call waits until the slow one has
started, so the fast call always runs and returns while the slow call is
running, whatever the CPU gate or the scheduler of a loaded machine decides.
The bounds are failure guards only (a worker that holds the fast verdicts
back would make the scenario wait for ever).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from fault_harness import STEP_SLEEP_S, VERDICT_BOUND_S, finish, keys
from helper_backends import marker, scripted_factory

from kvprobe.backends import FsBackend, InMemoryBackend, ProcessBackend
from kvprobe.statemachine import AsyncLookupManager, ReqContext, Worker
from kvprobe.testing.lifetimes import nothing_outlives

__all__ = [
    "FAST",
    "GATES",
    "SLOW",
    "CallLog",
    "HeldBack",
    "Tier",
    "fast_group_seen_while_slow_runs",
    "poll_verdicts",
    "process_tier",
    "serving",
    "thread_tier",
]

SLOW, FAST = "slow", "fast"

#: The longest an in-process slow call waits to be released: longer than
#: everything the scenario waits for before it releases the call, so that it
#: never returns on its own while the scenario still looks.
HOLD_BOUND_S = 4 * VERDICT_BOUND_S

#: The CPU gate on (the default ``busy_call_hold_s``) and off, as options of
#: the manager or of ``ThreadedWorker``.
GATES: dict[str, dict[str, Any]] = {"gate-on": {}, "gate-off": {"busy_call_hold_s": 0.0}}

#: Each request's keys: one stored in the tier, one not.
SLOW_KEYS = [*keys("slow-stored", 1), *keys("slow-absent", 1)]
FAST_KEYS = [*keys("fast-stored", 1), *keys("fast-absent", 1)]
STORED = {SLOW_KEYS[0], FAST_KEYS[0]}


class HeldBack(AssertionError):
    """The fast group's call returned, yet its verdicts were not visible while the slow call ran."""


class CallLog:
    """Wraps a backend: records each call's request id when it starts and when it returns.

    A call of any request but :data:`SLOW` first waits until the slow
    request's call has started, so that it runs and returns while the slow
    call is running.  With ``release`` (an in-process backend) the slow call
    then waits until ``release`` is set; a ``ProcessBackend`` is held in its
    helper instead (a marker key, :func:`process_tier`).  The slow call gives
    up after ``hold_s``, any other wait after ``bound_s``, and raises
    ``TimeoutError`` (the group then fails, and the scenario fails instead
    of hanging).

    The backend's optional methods (``fit_concurrency``, ``cpu_seconds_of``,
    ``start_helpers``, ``close``) are the wrapped backend's own, so the
    worker and its CPU gate see the backend as it is.
    """

    def __init__(
        self,
        inner: Any,
        *,
        release: threading.Event | None = None,
        bound_s: float = VERDICT_BOUND_S,
        hold_s: float = HOLD_BOUND_S,
    ) -> None:
        self.inner = inner
        self.release = release
        self.bound_s = bound_s
        self.hold_s = hold_s
        self.started: list[str] = []
        self.returned: list[str] = []
        self._changed = threading.Condition()

    def batch_lookup(self, keys: Sequence[bytes], req_context: Any) -> Any:
        req = str(req_context.req_id)
        with self._changed:
            self.started.append(req)
            self._changed.notify_all()
        if req == SLOW:
            if self.release is not None and not self.release.wait(self.hold_s):
                raise TimeoutError(f"the slow call was not released within {self.hold_s} s")
        else:
            self.wait_until(lambda: SLOW in self.started, f"{req}'s call waited for the slow call to start")
        try:
            return self.inner.batch_lookup(keys, req_context)
        finally:
            with self._changed:
                self.returned.append(req)
                self._changed.notify_all()

    def wait_until(self, predicate: Callable[[], bool], what: str) -> None:
        """Wait (at most ``bound_s``) until ``predicate()`` holds; raise ``TimeoutError`` naming ``what`` if not."""
        with self._changed:
            if not self._changed.wait_for(predicate, self.bound_s):
                raise TimeoutError(f"{what}: not done within {self.bound_s} s")

    def __getattr__(self, name: str) -> Any:
        if name == "inner":  # not set yet: no recursion
            raise AttributeError(name)
        return getattr(self.inner, name)


@dataclass
class Tier:
    """A backend holding the slow request's call until :meth:`release`, and what each key holds."""

    backend: CallLog
    slow_keys: list[bytes]
    fast_keys: list[bytes]
    stored: set[bytes]
    release: Callable[[], None]  # lets the slow call return (idempotent)
    close: Callable[[], None]

    def truth(self, wanted: Sequence[bytes]) -> list[bool]:
        return [k in self.stored for k in wanted]


def thread_tier() -> Tier:
    """An ``InMemoryBackend`` whose slow call waits on a ``threading.Event``."""
    release = threading.Event()
    backend = CallLog(InMemoryBackend(STORED), release=release)
    return Tier(backend, SLOW_KEYS, FAST_KEYS, STORED, release.set, lambda: None)


def process_tier(root: Path) -> Tier:
    """A ``FsBackend`` in ``ProcessBackend`` helpers; the slow call waits in its helper until a file exists.

    The slow request's keys hold the ``wait`` marker of ``helper_backends``
    (that helper waits at most ``WAIT_BOUND_S``, 30 s, then answers anyway:
    a worker that holds the fast verdicts back longer is reported by the
    scenario as :class:`HeldBack`, the slow call having returned first).
    """
    writer = FsBackend(root / "tier")
    for key in STORED:
        writer.store(key, b"block")
    gate = root / "release-the-slow-call"
    # The default call_timeout_s (10 s) would kill the slow helper while the
    # scenario may still be waiting, on a loaded machine, for the fast call.
    inner = ProcessBackend(scripted_factory(root / "tier"), call_timeout_s=HOLD_BOUND_S)
    return Tier(CallLog(inner), [marker("wait", gate), *SLOW_KEYS], FAST_KEYS, STORED, gate.touch, inner.close)


def _known(m: AsyncLookupManager, wanted: Sequence[bytes], ctx: ReqContext) -> list[bool | None]:
    return [m.lookup(key, ctx) for key in wanted]


def poll_verdicts(
    m: AsyncLookupManager,
    wanted: Sequence[bytes],
    ctx: ReqContext,
    bound_s: float,
    *,
    only_while: Callable[[], bool] | None = None,
) -> list[bool]:
    """Drain and look up, without flushing, until every key of ``wanted`` has a verdict.

    Returns the verdicts, or [] once ``bound_s`` has passed or ``only_while()``
    (read before each round of lookups) is false: verdicts seen only after
    that do not count.
    """
    deadline = time.monotonic() + bound_s
    while True:
        holds = only_while is None or only_while()
        m.drain_results()
        seen = _known(m, wanted, ctx)
        if not holds or time.monotonic() > deadline:
            return []
        if None not in seen:
            return [v for v in seen if v is not None]
        time.sleep(STEP_SLEEP_S)


def fast_group_seen_while_slow_runs(
    m: AsyncLookupManager, tier: Tier, *, same_batch: bool, seen_within_s: float = VERDICT_BOUND_S
) -> None:
    """The scenario (module docstring): fails unless the fast verdicts are visible while the slow call runs.

    ``seen_within_s`` bounds the wait for the fast verdicts once the fast call
    has returned (a failure guard; the real worker publishes at once).
    Releases the slow call at the end, then checks the slow verdicts and that
    the manager holds nothing once both requests are cleaned up.

    Raises:
        HeldBack: the fast call returned but its verdicts were not visible
            while the slow call ran (within ``seen_within_s``, and before the
            slow call's own guard let it return).
        AssertionError: anything else went wrong (wrong verdicts or batches,
            a slow key resolved too early).
        TimeoutError: a call the scenario waits for never started or returned.
    """
    slow, fast = ReqContext(SLOW), ReqContext(FAST)
    log = tier.backend
    batches = m.stats.batches
    assert _known(m, tier.slow_keys, slow) == [None] * len(tier.slow_keys)
    if not same_batch:
        m.flush()
        log.wait_until(lambda: SLOW in log.started, "the slow group's call started")
    assert _known(m, tier.fast_keys, fast) == [None] * len(tier.fast_keys)
    m.flush()
    assert m.stats.batches == batches + (1 if same_batch else 2), "the groups are not in the batches meant"
    log.wait_until(lambda: FAST in log.returned, "the fast group's call returned")
    seen = poll_verdicts(m, tier.fast_keys, fast, seen_within_s, only_while=lambda: SLOW not in log.returned)
    if not seen:
        raise HeldBack(
            f"the fast group's call returned, but its verdicts were not visible while the slow group's call "
            f"ran ({'same batch' if same_batch else 'an earlier batch'}; "
            + ("the slow call returned first)" if SLOW in log.returned else f"waited {seen_within_s} s)")
        )
    assert _known(m, tier.slow_keys, slow) == [None] * len(tier.slow_keys), "a slow key has a verdict already"
    assert seen == tier.truth(tier.fast_keys)
    tier.release()
    assert poll_verdicts(m, tier.slow_keys, slow, VERDICT_BOUND_S) == tier.truth(tier.slow_keys)
    assert log.returned == [FAST, SLOW]
    assert finish(m, [SLOW, FAST]) == 0


@contextmanager
def serving(tier: Tier, worker: Worker | Literal["thread"] = "thread", **options: Any) -> Iterator[AsyncLookupManager]:
    """A manager on ``tier``; afterwards (also on failure) the slow call is released, everything shut down.

    When the block succeeds, every thread and helper process started for it
    must end too (``nothing_outlives``).
    """
    with nothing_outlives():
        m = AsyncLookupManager(tier.backend, worker=worker, **options)
        try:
            start_helpers = getattr(tier.backend.inner, "start_helpers", None)
            if callable(start_helpers):
                start_helpers(2)  # the slow and the fast call each need one; started ahead, not mid-scenario
            yield m
        finally:
            tier.release()
            m.shutdown()
            tier.close()
