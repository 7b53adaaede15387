"""The CPU gate: a further group starts beside running calls only while they wait.

Calls that compute (on a caller thread, or in the helper process serving
it) run one after another unless one has run ``busy_call_hold_s``; calls
that wait overlap up to ``max_concurrent_groups``.  What is measured here is
the most calls inside the backend at once, and the order verdicts arrive in;
nothing asserts a duration.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Sequence
from functools import partial
from pathlib import Path

import pytest
from fault_harness import drive, finish, keys
from helper_backends import marker, scripted_factory
from pool_helper_backend import PoolSpinBackend

from kvprobe.backends import InMemoryBackend, ProcessBackend
from kvprobe.statemachine import AsyncLookupManager, InvalidInputError, InvalidValueError, ThreadedWorker
from kvprobe.statemachine.cpu_gate import JUDGE_S, WARM_UP_S, BusyClock, CpuGate, thread_busy_clock
from kvprobe.testing.lifetimes import nothing_outlives

# These judge helpers by the CPU they get: `make test` runs them alone (marker `quiet`),
# since a TLC run beside them starves a spinning helper into looking idle.
pytestmark = pytest.mark.quiet


def _spin(seconds: float) -> None:
    until = time.monotonic() + seconds
    while time.monotonic() < until:
        pass


def _spin_outside_the_gil(seconds: float) -> None:
    # Busy on a CPU but not holding the GIL (hashlib releases it for large
    # inputs): the thread's busy clock counts it as computing all the same.
    data = bytes(1 << 20)
    until = time.monotonic() + seconds
    while time.monotonic() < until:
        hashlib.sha256(data).digest()


class Overlap:
    """Counts the calls inside ``inner`` at once; ``spin`` or ``sleep`` per call first.

    ``gil_free=True`` spins in C without the GIL: four calls spinning in
    Python hand the GIL to the dispatcher only every switch interval, so
    starting a call then takes tens to hundreds of milliseconds on a loaded
    machine, whatever the gate decided (a limit of GIL-bound calls that
    docs/worker.md states); a test of the gate's timing uses the C spin.
    """

    def __init__(self, inner: object, *, spin_s: float = 0.0, sleep_s: float = 0.0, gil_free: bool = False) -> None:
        self.inner = inner
        self.spin_s = spin_s
        self.sleep_s = sleep_s
        self.spin = _spin_outside_the_gil if gil_free else _spin
        self.lock = threading.Lock()
        self.inside = 0
        self.peak = 0
        self.finished: list[str] = []  # request ids in the order their calls returned
        self.entered: list[float] = []  # time.monotonic() as each call began

    def batch_lookup(self, keys: Sequence[bytes], req_context: object) -> list[bool]:
        with self.lock:
            self.inside += 1
            self.peak = max(self.peak, self.inside)
            self.entered.append(time.monotonic())
        try:
            seconds = self.slow_s if getattr(req_context, "req_id", "") == "slow" else self.spin_s
            self.spin(seconds)
            time.sleep(self.sleep_s)
            return list(self.inner.batch_lookup(keys, req_context))  # type: ignore[attr-defined]
        finally:
            with self.lock:
                self.inside -= 1
                self.finished.append(str(getattr(req_context, "req_id", "")))

    slow_s = 0.0

    def cpu_seconds_of(self, thread_id: int) -> float:
        gauge = getattr(self.inner, "cpu_seconds_of", None)
        return float(gauge(thread_id)) if callable(gauge) else 0.0

    def fit_concurrency(self, calls: int) -> None:
        fit = getattr(self.inner, "fit_concurrency", None)
        if callable(fit):
            fit(calls)


def _wants(groups: int, per_group: int = 4) -> dict[str, list[bytes]]:
    return {f"r{g}": keys(f"g{g}", per_group) for g in range(groups)}


# --- the gate alone -------------------------------------------------------------


class _Call:
    def __init__(self, thread: threading.Thread, started: float) -> None:
        assert thread.ident is not None
        self.thread_id = thread.ident
        self.clock = thread_busy_clock(thread)
        self.started = started


def _run_for(target: object, seconds: float) -> threading.Thread:
    thread = threading.Thread(target=target, args=(seconds,), daemon=True)  # type: ignore[arg-type]
    thread.start()
    return thread


def _judge(gate: CpuGate, calls: Sequence[_Call]) -> float:
    """Ask until the gate has judged the calls on one window; its verdict then."""
    assert gate.wait_s(calls, time.monotonic()) > 0, "a fresh set of calls is sampled before it is judged"
    time.sleep(WARM_UP_S * 2)
    counting = time.monotonic()
    assert gate.wait_s(calls, counting) > 0, "the warm-up is over: busy time counts from now"
    time.sleep(JUDGE_S / 2)
    now = time.monotonic()
    if now - counting < JUDGE_S:  # a thread holding the GIL may have made the sleep longer
        assert gate.wait_s(calls, now) > 0, "too short a span is not judged"
    time.sleep(JUDGE_S)
    return gate.wait_s(calls, time.monotonic())


def test_gate_admits_at_once_with_nothing_running_or_no_hold() -> None:
    assert CpuGate(0.25).wait_s([], time.monotonic()) == 0.0
    thread = _run_for(_spin, 0.5)
    assert CpuGate(0.0).wait_s([_Call(thread, time.monotonic())], time.monotonic()) == 0.0
    thread.join()


def test_gate_tells_a_waiting_call_from_a_computing_one() -> None:
    sleeper = _run_for(time.sleep, 1.0)
    assert _judge(CpuGate(10.0), [_Call(sleeper, time.monotonic())]) == 0.0
    spinner = _run_for(_spin, 1.0)
    assert _judge(CpuGate(10.0), [_Call(spinner, time.monotonic())]) > 0
    sleeper.join()
    spinner.join()


def test_gate_counts_the_cpu_a_backend_spends_for_a_waiting_thread() -> None:
    sleeper = _run_for(time.sleep, 1.0)
    call = _Call(sleeper, time.monotonic())
    began = time.monotonic()
    helper_busy = CpuGate(10.0, backend_cpu=lambda tid: time.monotonic() - began if tid == call.thread_id else 0.0)
    assert _judge(helper_busy, [call]) > 0
    other_thread = CpuGate(10.0, backend_cpu=lambda tid: time.monotonic() - began if tid != call.thread_id else 0.0)
    assert _judge(other_thread, [call]) == 0.0
    sleeper.join()


def test_groups_started_beside_waiting_calls_fill_the_slots_at_once() -> None:
    sleepers = [_run_for(time.sleep, 1.0) for _ in range(3)]
    gate = CpuGate(10.0)
    first = _Call(sleepers[0], time.monotonic())
    assert _judge(gate, [first]) == 0.0  # judged waiting
    second = _Call(sleepers[1], time.monotonic())
    assert gate.wait_s([first, second], time.monotonic()) == 0.0, "started beside a waiting call: presumed waiting"
    third = _Call(sleepers[2], time.monotonic())
    assert gate.wait_s([first, second, third], time.monotonic()) == 0.0
    alone = CpuGate(10.0)
    assert alone.wait_s([second], time.monotonic()) > 0, "a call started alone is judged before others start"
    for sleeper in sleepers:
        sleeper.join()


def test_a_presumed_call_judged_computing_holds_others_back() -> None:
    sleeper = _run_for(time.sleep, 1.0)
    gate = CpuGate(10.0)
    waiting = _Call(sleeper, time.monotonic())
    assert _judge(gate, [waiting]) == 0.0
    spinner = _run_for(_spin, 1.0)
    computing = _Call(spinner, time.monotonic())
    # Presumed waiting until judged, then judged on its own busy time.
    assert gate.wait_s([waiting, computing], time.monotonic()) == 0.0
    time.sleep(WARM_UP_S * 2)
    assert gate.wait_s([waiting, computing], time.monotonic()) == 0.0
    time.sleep(JUDGE_S * 2)
    assert gate.wait_s([waiting, computing], time.monotonic()) > 0
    sleeper.join()
    spinner.join()


def test_a_computing_call_holds_others_back_at_most_hold_s() -> None:
    spinner = _run_for(_spin, 2.0)
    call = _Call(spinner, time.monotonic())
    gate = CpuGate(0.5)
    assert _judge(gate, [call]) > 0
    time.sleep(0.5)
    assert gate.wait_s([call], time.monotonic()) == 0.0
    spinner.join()


def test_a_clock_that_goes_back_is_not_taken_for_a_waiting_call() -> None:
    # ProcessBackend stops counting a call's helper the moment the call
    # returns; until the dispatcher hears of it, its busy time reads lower.
    sleeper = _run_for(time.sleep, 1.0)
    call = _Call(sleeper, time.monotonic())
    readings = iter([5.0, 0.0])
    assert _judge(CpuGate(10.0, backend_cpu=lambda tid: next(readings, 0.0)), [call]) > 0
    sleeper.join()


def test_a_group_started_beside_a_computing_call_past_hold_s_is_judged_alone() -> None:
    spinner = _run_for(_spin, 2.0)
    gate = CpuGate(0.3)
    computing = _Call(spinner, time.monotonic())
    assert _judge(gate, [computing]) > 0
    time.sleep(0.3)
    assert gate.wait_s([computing], time.monotonic()) == 0.0  # past hold_s: one more may start
    # Nothing else was pending (a group pending all along would be let in
    # now by the bound: hold_s from its free slot).  A group asked for later:
    gate.no_demand()
    next_spinner = _run_for(_spin, 2.0)
    started = _Call(next_spinner, time.monotonic())
    assert gate.wait_s([computing, started], time.monotonic()) > 0, "not presumed waiting: judged first"
    spinner.join()
    next_spinner.join()


class _Computing:
    """A call busy all the time since ``started``, on the simulated clock ``now``."""

    def __init__(self, started: float, now: list[float]) -> None:
        self.started = started
        self.thread_id = id(self)
        self.clock: BusyClock = lambda: now[0] - started


def _admit(gate: CpuGate, groups: int, running: list[_Computing], now: list[float]) -> list[float]:
    """Ask ``gate`` as the dispatcher does (computing calls, slots for all); when each group starts.

    Time moves on by the wait the gate asks for, at least a microsecond (a
    real wait always lets some time pass; a rounding-sized one would not).
    """
    starts: list[float] = []
    for _ in range(100_000):
        if len(starts) == groups:
            return starts
        wait = gate.wait_s(running, now[0])
        if wait > 0:
            now[0] += max(wait, 1e-6)
            continue
        starts.append(now[0])
        running.append(_Computing(now[0], now))
    raise AssertionError(f"after 100,000 questions only {len(starts)} of {groups} groups started: {starts}")


def test_every_computing_group_starts_within_hold_s_of_its_free_slot() -> None:
    # Four computing groups, four free slots: the hold of one does not add
    # to the next one's (0, 0.25, 0.5, 0.75 s before).
    now = [100.0]
    starts = _admit(CpuGate(0.25), 4, [], now)
    assert starts[0] == 100.0
    assert max(starts) - 100.0 <= 0.25 + 1e-5, starts


def test_the_hold_counts_from_the_free_slot_not_from_an_earlier_demand() -> None:
    now = [100.0]
    gate = CpuGate(0.25)
    running: list[_Computing] = []
    assert _admit(gate, 2, running, now)[1] <= 100.25 + 1e-5
    gate.no_demand()  # nothing else pending: the dispatcher stops asking
    running.pop(0)  # the first call ends
    now[0] = asked = running[0].started + 0.05  # the second, computing, has run 50 ms
    wait = gate.wait_s(running, now[0])
    assert wait > 0, "a group asked for now is held back: its slot has been free for no time"
    assert _admit(gate, 1, running, now)[0] <= asked + 0.25 + 1e-5


def test_gate_never_raises_for_an_ended_thread_or_a_failing_gauge() -> None:
    ended = _run_for(time.sleep, 0.0)
    call = _Call(ended, time.monotonic())
    ended.join()

    def broken(thread_id: int) -> float:
        raise RuntimeError("gauge broke")

    assert _judge(CpuGate(10.0, backend_cpu=broken), [call]) == 0.0


# --- the threaded worker --------------------------------------------------------


def test_computing_calls_run_one_after_another() -> None:
    backend = Overlap(InMemoryBackend(), spin_s=0.05)
    with nothing_outlives():
        m = AsyncLookupManager(backend, busy_call_hold_s=10.0)
        wants = _wants(6)
        assert drive(m, wants).values == [False] * 24
        assert finish(m, list(wants)) == 0
        m.shutdown()
    assert backend.peak == 1


def test_waiting_calls_overlap_up_to_max_concurrent_groups() -> None:
    backend = Overlap(InMemoryBackend(), sleep_s=0.3)
    with nothing_outlives():
        m = AsyncLookupManager(backend, busy_call_hold_s=10.0, max_concurrent_groups=3)
        wants = _wants(6)
        drive(m, wants)
        assert finish(m, list(wants)) == 0
        m.shutdown()
    assert backend.peak == 3


def test_waiting_calls_shorter_than_the_judging_window_overlap() -> None:
    # 20 ms calls end before the gate's first judgment (about 27 ms): judged
    # on the readings taken while they ran, the later ones are presumed to
    # wait as well and run together (one after another before).
    backend = Overlap(InMemoryBackend(), sleep_s=0.02)
    with nothing_outlives():
        m = AsyncLookupManager(backend, busy_call_hold_s=10.0, max_concurrent_groups=4)
        wants = _wants(40, per_group=1)
        drive(m, wants)
        assert finish(m, list(wants)) == 0
        m.shutdown()
    assert backend.peak >= 3


def test_computing_groups_all_start_within_hold_s_of_their_free_slots() -> None:
    # Four calls computing 2 s each, four slots, hold 0.4 s: each starts within
    # 0.4 s of the batch (0, 0.4, 0.8, 1.2 s when holds added up).  The margin
    # (0.9 s) is generous: it only tells one hold from three.  The calls
    # compute without the GIL, so that what is timed is the gate's decision,
    # not the interpreter handing the GIL to the dispatcher.
    backend = Overlap(InMemoryBackend(), spin_s=2.0, gil_free=True)
    with nothing_outlives():
        m = AsyncLookupManager(backend, busy_call_hold_s=0.4, max_concurrent_groups=4)
        wants = _wants(4, per_group=1)
        drive(m, wants, bound_s=30.0)
        assert finish(m, list(wants)) == 0
        m.shutdown()
    assert len(backend.entered) == 4
    assert max(backend.entered) - min(backend.entered) < 0.9, backend.entered


def test_hold_zero_starts_computing_calls_together() -> None:
    backend = Overlap(InMemoryBackend(), spin_s=0.3)
    with nothing_outlives():
        m = AsyncLookupManager(backend, busy_call_hold_s=0, max_concurrent_groups=3)
        wants = _wants(3)
        drive(m, wants)
        assert finish(m, list(wants)) == 0
        m.shutdown()
    assert backend.peak == 3


def test_a_slow_computing_group_holds_a_fast_one_back_only_hold_s() -> None:
    backend = Overlap(InMemoryBackend())
    backend.slow_s = 3.0
    with nothing_outlives():
        m = AsyncLookupManager(backend, busy_call_hold_s=0.05)
        wants = {"slow": keys("slow", 2), "fast": keys("fast", 2)}
        drive(m, wants)
        assert finish(m, list(wants)) == 0
        m.shutdown()
    assert backend.finished == ["fast", "slow"]
    assert backend.peak == 2


@pytest.mark.parametrize(
    ("value", "error", "message"),
    [
        (-0.1, InvalidValueError, "0 or more"),
        (float("nan"), InvalidValueError, "0 or more"),
        (float("inf"), InvalidValueError, "finite"),
        (1e300, InvalidValueError, "TIMEOUT_MAX"),
        ("1", InvalidInputError, "number of seconds, got str"),
        (True, InvalidInputError, "got bool"),
    ],
)
def test_bad_hold_is_a_typed_error(value: object, error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message):
        AsyncLookupManager(InMemoryBackend(), busy_call_hold_s=value)  # type: ignore[arg-type]
    with pytest.raises(error, match=message):
        ThreadedWorker(busy_call_hold_s=value)  # type: ignore[arg-type]


# --- helper processes -----------------------------------------------------------


def _helper_cpu_during_call(backend: ProcessBackend, keys: list[bytes]) -> list[float]:
    """``backend.cpu_seconds_of`` its caller, read while a call of ``keys`` runs, until it passes 0.1 s."""
    assert backend.cpu_seconds_of(threading.get_ident()) == 0.0  # no call made
    seen: list[float] = []
    caller = threading.Thread(target=backend.batch_lookup, args=(keys, None))
    caller.start()
    assert caller.ident is not None
    for _ in range(50):
        seen.append(backend.cpu_seconds_of(caller.ident))
        if seen[-1] > 0.1:
            break
        time.sleep(0.02)
    caller.join()
    assert backend.cpu_seconds_of(caller.ident) == 0.0  # the call is over
    return seen


def test_process_backend_reports_the_cpu_its_helper_spends_on_a_call(tmp_path: Path) -> None:
    backend = ProcessBackend(scripted_factory(tmp_path))
    try:
        seen = _helper_cpu_during_call(backend, [marker("spin", 0.6)])
        assert seen[-1] > 0.1, f"the helper spun, yet its CPU read {seen}"
    finally:
        backend.close()


def test_process_backend_counts_every_thread_of_its_helper() -> None:
    # The helper's main thread waits while a pool thread of the tier computes.
    backend = ProcessBackend(partial(PoolSpinBackend, 0.6))
    try:
        seen = _helper_cpu_during_call(backend, [b"k"])
        assert seen[-1] > 0.1, f"the helper's pool thread spun, yet its CPU read {seen}"
    finally:
        backend.close()


def test_computing_helpers_run_one_after_another_waiting_ones_overlap(tmp_path: Path) -> None:
    for mode, argument, peak in (("spin", 0.1, 1), ("sleep", 0.3, 3)):
        backend = Overlap(ProcessBackend(scripted_factory(tmp_path)))
        with nothing_outlives():
            m = AsyncLookupManager(backend, busy_call_hold_s=10.0, max_concurrent_groups=3)
            backend.inner.start_helpers()  # type: ignore[attr-defined]
            # Each group its own marker key (an equal one would join the first group's probe).
            wants = {f"r{g}": [marker(mode, argument + g / 1000), *keys(f"g{g}", 2)] for g in range(5)}
            drive(m, wants)
            assert finish(m, list(wants)) == 0
            m.shutdown()
            backend.inner.close()  # type: ignore[attr-defined]
        assert backend.peak == peak, mode
