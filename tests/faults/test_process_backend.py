"""ProcessBackend: a backend run in spawned helper processes, tested with real helpers.

``ProcessBackend`` moves a backend's work into helper processes and forwards
each ``batch_lookup`` over a pipe, so it adds failures a backend in the
manager's own process cannot have: the helper can die mid-call, hang, be
busy, fail to start, or raise something that does not survive pickling.
Its contract (``backends/process.py``) says what the caller sees in each
case, and that the next call gets a working helper again.  These tests hold
it to that with real ``spawn`` helpers and nothing mocked:

* the verdicts through a helper equal the wrapped backend's own (FsBackend
  and NIXL POSIX on a real tree, keys of many lengths, a large batch);
* each fault raised in the helper reaches the caller as the contract says,
  and through an ``AsyncLookupManager`` it resolves the group as MISS, is
  counted, and the same manager then gives a stored key a true verdict;
* a helper that dies or overstays ``call_timeout_s`` is killed and replaced,
  ``max_procs`` fails a call at once instead of queueing, bad arguments fail
  before any process starts, and ``close()`` ends every helper (also one
  stuck in a call, whose caller then gets an error instead of hanging).

The misbehaving backends run inside the helper, so they live in
``helper_backends.py`` (the helper imports it by name) and are switched on
by marker keys: a group that holds ``marker("oserror")`` raises, one
without it is answered honestly.  A module-scoped ``ProcessBackend`` serves
the tests that neither kill nor close a helper; the others build their own.
"""

from __future__ import annotations

import errno
import multiprocessing
import os
import random
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from fault_harness import Reliability, counters, drive, finish, keys, nixl_missing, process_alive, still_serves
from helper_backends import (
    ExitingFactory,
    SlowFactory,
    UnpicklableErrorFactory,
    marker,
    scripted_factory,
)

from kvprobe.backends import FsBackend, HelperProcessError, ProcessBackend
from kvprobe.backends.process import DEFAULT_HELPER_NICE
from kvprobe.statemachine import AsyncLookupManager, FailureKind

#: Bound on anything a test waits for (a helper starting, a thread returning);
#: generous, the machine is shared.  Nothing asserts how fast it happens.
BOUND_S = 20.0


def _children() -> set[int]:
    """Pids of this process's live multiprocessing children (helpers included)."""
    return {p.pid for p in multiprocessing.active_children() if p.pid is not None}


def _wait_until(predicate: Callable[[], bool], what: str, bound_s: float = BOUND_S) -> None:
    deadline = time.monotonic() + bound_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not true after {bound_s} s")
        time.sleep(0.005)


def _calls(log: Path) -> list[tuple[int, int]]:
    """``(helper pid, number of keys)`` of every call that reached a ScriptedFsBackend."""
    if not log.exists():
        return []
    return [(int(pid), int(n)) for pid, n in (line.split() for line in log.read_text().splitlines())]


class Background:
    """One ``batch_lookup`` call on its own thread; keeps its result or its exception."""

    def __init__(self, call: Callable[[], list[bool]]) -> None:
        self.result: list[bool] | None = None
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(call,), name="stuck-call", daemon=True)
        self._thread.start()

    def _run(self, call: Callable[[], list[bool]]) -> None:
        try:
            self.result = call()
        except BaseException as exc:
            self.error = exc

    def join(self, bound_s: float = BOUND_S) -> None:
        self._thread.join(bound_s)
        assert not self._thread.is_alive(), f"the call is still running after {bound_s} s"


def _key(tag: str, length: int) -> bytes:
    """A deterministic key of ``length`` bytes (hash bytes, repeated as needed)."""
    seed = keys(tag, 1)[0]
    return (seed * (length // len(seed) + 1))[:length]


#: Key lengths the layout names differently: empty, shorter than a shard,
#: one shard, hex-named (up to 64 bytes), digest-named (longer).
LENGTHS = (1, 2, 3, 20, 36, 64, 65, 100, 1000)


@dataclass
class Tier:
    """The module's file tier: written here through ``writer``, read by the helpers."""

    root: Path
    writer: FsBackend
    stored: list[bytes]
    absent: list[bytes]
    directory: bytes  # a key whose path is a directory: not a block
    log: Path  # calls of the module's ScriptedFsBackend helper

    @property
    def mixed(self) -> list[bytes]:
        """Stored, absent and directory keys interleaved, with a repeated key."""
        out = [k for pair in zip(self.stored, self.absent, strict=False) for k in pair]
        return [*out, self.directory, *self.stored[len(self.absent) :], self.stored[0]]

    def truth(self, wanted: Sequence[bytes]) -> list[bool]:
        stored = set(self.stored)
        return [k in stored for k in wanted]

    def fresh(self, tag: str, n: int) -> list[bytes]:
        """``n`` new keys, stored now."""
        new = keys(tag, n)
        for k in new:
            self.writer.store(k)
        return new


@pytest.fixture(scope="module")
def tier(tmp_path_factory: pytest.TempPathFactory) -> Tier:
    root = tmp_path_factory.mktemp("process-tier")
    writer = FsBackend(root / "tier")
    stored = [b"", *(_key(f"stored-{n}", n) for n in LENGTHS)]
    absent = [_key(f"absent-{n}", n) for n in LENGTHS]
    for k in stored:
        writer.store(k, b"block")
    directory = _key("directory", 20)
    os.makedirs(writer.locate(directory))
    return Tier(root / "tier", writer, stored, absent, directory, root / "calls.log")


@pytest.fixture(scope="module")
def fs_helper(tier: Tier) -> Iterator[ProcessBackend]:
    """``FsBackend`` in a helper, for the tests that neither kill nor close it."""
    with ProcessBackend(partial(FsBackend, str(tier.root))) as backend:
        yield backend


@pytest.fixture(scope="module")
def scripted(tier: Tier) -> Iterator[ProcessBackend]:
    """``ScriptedFsBackend`` in a helper (logging its calls), for faults that keep the helper."""
    with ProcessBackend(scripted_factory(tier.root, log=tier.log)) as backend:
        yield backend


def _own(tier: Tier, **kwargs: Any) -> ProcessBackend:
    """A ProcessBackend of this test's own (for tests that kill, hang or close helpers)."""
    return ProcessBackend(scripted_factory(tier.root, log=tier.log), **kwargs)


# --- priority --------------------------------------------------------------------------


def _nice_of(pid: int) -> int:
    return os.getpriority(os.PRIO_PROCESS, pid)


def test_helpers_run_helper_nice_below_the_managers_priority(tier: Tier, fs_helper: ProcessBackend) -> None:
    # The scheduler keeps its core only if every helper, the first and those
    # started later for concurrent calls, is niced.
    assert fs_helper.helper_nice == DEFAULT_HELPER_NICE > 0
    fs_helper.start_helpers(2)
    pids = fs_helper.helper_pids
    assert len(pids) == 2
    assert {_nice_of(pid) for pid in pids} == {min(19, _nice_of(0) + DEFAULT_HELPER_NICE)}


@pytest.mark.parametrize("nice", [0, 3])
def test_helper_nice_is_what_the_caller_asked(tier: Tier, nice: int) -> None:
    with ProcessBackend(partial(FsBackend, str(tier.root)), helper_nice=nice) as backend:
        (pid,) = backend.helper_pids
        assert _nice_of(pid) == min(19, _nice_of(0) + nice)
        assert backend.batch_lookup([tier.stored[1]], None) == [True]


# --- verdicts ------------------------------------------------------------------------


def test_fs_verdicts_through_a_helper_equal_fs_backends_own(tier: Tier, fs_helper: ProcessBackend) -> None:
    wanted = tier.mixed
    expected = tier.truth(wanted)
    assert True in expected and False in expected
    assert tier.writer.batch_lookup(wanted, None) == expected
    assert fs_helper.batch_lookup(wanted, None) == expected
    # One key at a time, too (the smallest message).
    assert [fs_helper.batch_lookup([k], None)[0] for k in wanted] == expected


def test_a_large_batch_of_mixed_lengths_crosses_the_pipe_intact(tier: Tier, fs_helper: ProcessBackend) -> None:
    # Far larger than a pipe buffer both ways, every key length from 0 to 130 bytes.
    rng = random.Random(20240601)
    wanted = [rng.randbytes(rng.randrange(0, 131)) for _ in range(6000)]
    stored = {k for k in wanted[::2] if k}
    for k in stored:
        tier.writer.store(k)
    expected = tier.writer.batch_lookup(wanted, None)
    assert expected == [k in stored or k in tier.stored for k in wanted]
    assert fs_helper.batch_lookup(wanted, None) == expected


def test_each_call_sees_the_tier_as_it_is_now(tier: Tier, fs_helper: ProcessBackend) -> None:
    # Nothing is remembered between calls: a block stored or removed in this
    # process is seen by the helper's next call of the very same group.
    changing = keys("changing", 1)[0]
    group = [changing, tier.stored[1]]
    assert fs_helper.batch_lookup(group, None) == [False, True]
    tier.writer.store(changing)
    assert fs_helper.batch_lookup(group, None) == [True, True]
    tier.writer.remove(changing)
    assert fs_helper.batch_lookup(group, None) == [False, True]


def test_the_helper_builds_the_backend_from_this_folders_module(scripted: ProcessBackend, tier: Tier) -> None:
    # The description is the repr the *helper* sends back once its backend is
    # built: the spawned child imported helper_backends by name (sys.path
    # came from the parent) and unpickled the factory.
    assert repr(scripted).startswith(f"ProcessBackend(ScriptedFsBackend({str(tier.root)!r})")
    assert scripted.batch_lookup(tier.mixed, None) == tier.truth(tier.mixed)


def test_an_empty_key_list_returns_empty_without_a_call(scripted: ProcessBackend, tier: Tier) -> None:
    scripted.batch_lookup(tier.stored[:1], None)
    before = _calls(tier.log)
    assert before, "the logging backend recorded no call"
    assert scripted.batch_lookup([], None) == []
    assert scripted.batch_lookup((), None) == []
    assert _calls(tier.log) == before


@pytest.mark.skipif(nixl_missing() is not None, reason=f"NIXL not importable: {nixl_missing()}")
def test_nixl_posix_verdicts_through_a_helper_equal_its_own(tier: Tier) -> None:
    from kvprobe.backends.nixl_posix import NixlPosixBackend

    wanted = tier.mixed
    expected = tier.truth(wanted)
    with ProcessBackend(partial(NixlPosixBackend, str(tier.root))) as backend:
        assert repr(backend).startswith("ProcessBackend(NixlPosixBackend(")
        assert backend.batch_lookup(wanted, None) == expected
    with NixlPosixBackend(tier.root) as local:
        assert local.batch_lookup(wanted, None) == expected


# --- faults of the wrapped backend, seen by the caller ---------------------------------


def test_an_exception_is_raised_again_with_its_type_and_errno(scripted: ProcessBackend, tier: Tier) -> None:
    helpers = sorted(scripted.pids)
    with pytest.raises(OSError) as info:
        scripted.batch_lookup([tier.stored[1], marker("oserror")], None)
    assert type(info.value) is OSError
    assert info.value.errno == errno.EIO
    assert "Input/output error (injected)" in str(info.value)
    if sys.version_info >= (3, 11):
        assert any("in helper process" in note for note in info.value.__notes__), info.value.__notes__
    # A backend error costs no helper: the same one answers the next call.
    assert sorted(scripted.pids) == helpers
    assert scripted.batch_lookup(tier.stored[:2], None) == [True, True]


def test_an_error_while_the_answer_is_iterated_is_raised_at_the_call(scripted: ProcessBackend, tier: Tier) -> None:
    # The helper iterates the answer itself, so the caller sees the error when
    # it calls (the manager counts it as RAISED, not RAISED_WHILE_ITERATING).
    with pytest.raises(ConnectionResetError, match="while the result was iterated"):
        scripted.batch_lookup([tier.stored[1], tier.absent[0], marker("raise_iter")], None)


def test_an_unpicklable_exception_becomes_helper_process_error_with_its_text(
    scripted: ProcessBackend, tier: Tier
) -> None:
    with pytest.raises(HelperProcessError, match=r"UnpicklableError: this error cannot cross a pipe \(injected\)"):
        scripted.batch_lookup([marker("unpicklable")], None)
    assert scripted.batch_lookup(tier.stored[:1], None) == [True]


def test_an_exception_that_cannot_be_rebuilt_becomes_helper_process_error(scripted: ProcessBackend, tier: Tier) -> None:
    with pytest.raises(HelperProcessError, match="could not be read back"):
        scripted.batch_lookup([tier.stored[1], marker("unreadable")], None)
    assert scripted.batch_lookup(tier.stored[:1], None) == [True]


def test_a_non_bool_verdict_raises_type_error_naming_the_key(scripted: ProcessBackend, tier: Tier) -> None:
    with pytest.raises(TypeError, match="non-bool for key 2"):
        scripted.batch_lookup([tier.stored[1], tier.absent[0], marker("non_bool"), tier.stored[2]], None)


@pytest.mark.parametrize(("mode", "extra"), [("short", -1), ("long", +1)])
def test_a_short_or_long_answer_keeps_its_length(scripted: ProcessBackend, tier: Tier, mode: str, extra: int) -> None:
    wanted = [tier.stored[1], tier.absent[0], tier.stored[2], marker(mode)]
    got = scripted.batch_lookup(wanted, None)
    assert len(got) == len(wanted) + extra
    assert got[:3] == [True, False, True]


# --- the same faults through the manager ---------------------------------------------------


@dataclass(frozen=True)
class ManagerCase:
    name: str
    marker: bytes
    kind: FailureKind
    kills_helper: bool = False
    call_timeout_s: float | None = None


MANAGER_CASES = [
    ManagerCase("backend raises OSError", marker("oserror"), FailureKind.RAISED),
    ManagerCase("backend raises an unpicklable exception", marker("unpicklable"), FailureKind.RAISED),
    ManagerCase("backend raises while its answer is iterated", marker("raise_iter"), FailureKind.RAISED),
    # ProcessBackend itself raises TypeError for a non-bool: RAISED, not BAD_VERDICT.
    ManagerCase("backend answers a non-bool verdict", marker("non_bool"), FailureKind.RAISED),
    ManagerCase("backend answers short", marker("short"), FailureKind.SHORT_RESULT),
    ManagerCase("backend answers long", marker("long"), FailureKind.LONG_RESULT),
    ManagerCase("helper exits mid-call (code 3)", marker("exit", 3), FailureKind.RAISED, kills_helper=True),
    ManagerCase("helper killed by SIGKILL mid-call", marker("sigkill"), FailureKind.RAISED, kills_helper=True),
    ManagerCase(
        "helper hangs past call_timeout_s=2",
        marker("sleep", 600),
        FailureKind.RAISED,
        kills_helper=True,
        call_timeout_s=2.0,
    ),
]


@pytest.mark.parametrize("case", MANAGER_CASES, ids=[c.name for c in MANAGER_CASES])
def test_a_fault_in_the_helper_is_a_counted_miss_and_the_manager_keeps_serving(
    case: ManagerCase, tier: Tier, scripted: ProcessBackend, reliability: Reliability
) -> None:
    tag = "-".join(case.name.split())
    stored = tier.fresh(f"mgr-{tag}", 3)
    healthy = tier.fresh(f"mgr-healthy-{tag}", 1)
    # Two requests, one batch, two groups: only the group with the marker fails.
    wants = {"faulty": [*stored, case.marker, *keys(f"mgr-absent-{tag}", 2)], "healthy": healthy}
    backend = _own(tier, call_timeout_s=case.call_timeout_s) if case.kills_helper else scripted
    try:
        with AsyncLookupManager(backend) as m:
            result = drive(m, wants)
            assert [result.of("faulty", k) for k in wants["faulty"]] == [False] * 6, "a failed group must be a MISS"
            assert result.of("healthy", healthy[0]) is True
            stats = m.stats
            assert stats.backend_errors == 1
            assert stats.failures == {case.kind.value: 1}
            assert stats.hits == 1
            leaked = finish(m, list(wants))
            assert leaked == 0
            still_serves(m, tier.writer.store, key=keys(f"mgr-fresh-{tag}", 1)[0])
            reliability.record(
                case.name,
                "FsBackend in a ProcessBackend helper process",
                delivered=len(result.verdicts),
                asked=7,
                seconds=result.seconds,
                leaked=leaked,
                counters=counters(m, "backend_errors"),
            )
    finally:
        if backend is not scripted:
            backend.close()


def test_a_helper_stuck_past_the_managers_timeout_leaves_a_second_helper_serving(tier: Tier, tmp_path: Path) -> None:
    # The reason max_procs defaults to 2: the manager runs the next call while
    # an earlier one is stuck past lookup_timeout_s; it must get its own helper.
    release = tmp_path / "release"
    stored = tier.fresh("stuck-mgr", 1)
    with _own(tier, max_procs=2) as backend, AsyncLookupManager(backend, lookup_timeout_s=2.0) as m:
        result = drive(m, {"stuck": [*stored, marker("wait", release)]})
        assert result.values == [False, False]
        assert m.stats.timeouts == 1 and m.stats.failures == {"timeout": 1}
        assert finish(m, ["stuck"]) == 0
        assert backend.pids == []  # the only helper is still in the stuck call
        still_serves(m, tier.writer.store, key=keys("stuck-mgr-fresh", 1)[0])
        assert len(backend.pids) == 1  # a second helper served it
        release.touch()
        deadline = time.monotonic() + BOUND_S
        while m.stats.late_results < 1 and time.monotonic() < deadline:
            m.drain_results()
            time.sleep(0.005)
        assert m.stats.late_results == 1
        assert m.stats.backend_errors == 0 and len(m) == 0
        _wait_until(lambda: len(backend.pids) == 2, "both helpers idle again")


# --- helpers that die, hang, or are all busy ----------------------------------------------


@pytest.mark.parametrize(("mode", "exit_code"), [(marker("exit", 3), 3), (marker("sigkill"), -9)], ids=["exit", "kill"])
def test_a_helper_that_dies_mid_call_is_named_and_replaced(tier: Tier, mode: bytes, exit_code: int) -> None:
    with _own(tier, max_procs=1) as backend:
        [first] = backend.pids
        with pytest.raises(HelperProcessError, match=rf"helper process {first} .*\(exit code {exit_code}\)"):
            backend.batch_lookup([tier.stored[1], mode], None)
        assert not process_alive(first)
        assert backend.pids == []  # the dead helper is not put back
        assert backend.batch_lookup([tier.stored[1], tier.absent[1]], None) == [True, False]
        [second] = backend.pids
        assert second != first and process_alive(second)


def test_a_call_past_call_timeout_kills_its_helper_and_the_next_call_works(tier: Tier) -> None:
    with _own(tier, max_procs=1, call_timeout_s=0.5) as backend:
        [first] = backend.pids
        calls_before = len(_calls(tier.log))
        # The helper would sleep 600 s; raising at all means the timeout fired.
        with pytest.raises(HelperProcessError, match=r"call_timeout_s=0\.5"):
            backend.batch_lookup([tier.stored[1], marker("sleep", 600)], None)
        assert (first, 2) in _calls(tier.log)[calls_before:], "the call never reached the helper"
        assert not process_alive(first), "the hung helper was left running"
        assert backend.batch_lookup([tier.stored[1], tier.absent[1]], None) == [True, False]
        [second] = backend.pids
        assert second != first


def test_max_procs_busy_fails_at_once_and_service_resumes(tier: Tier, tmp_path: Path) -> None:
    release = tmp_path / "release"
    with _own(tier, max_procs=1) as backend:
        [helper] = backend.pids
        stuck = Background(lambda: backend.batch_lookup([tier.stored[1], marker("wait", release)], None))
        _wait_until(lambda: backend.pids == [], "the stuck call took the helper")
        # Not queued behind the stuck call (which waits for `release` up to
        # 30 s, so a queued call would return instead of raising).
        with pytest.raises(RuntimeError, match="busy") as info:
            backend.batch_lookup([tier.stored[1]], None)
        assert not isinstance(info.value, HelperProcessError)
        release.touch()
        stuck.join()
        assert stuck.error is None and stuck.result == [True, False]
        assert backend.batch_lookup([tier.stored[1], tier.absent[1]], None) == [True, False]
        assert backend.pids == [helper]  # the same helper: busy is not broken


# --- construction and bad input -----------------------------------------------------------


def test_a_factory_that_raises_in_the_helper_raises_from_the_constructor(tmp_path: Path) -> None:
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("a regular file, not a tier")
    before = _children()
    with pytest.raises(NotADirectoryError, match="is not a directory"):
        ProcessBackend(partial(FsBackend, str(not_a_dir)))
    assert _children() <= before, "the failed helper is still running"


def test_a_factory_error_that_does_not_pickle_becomes_helper_process_error() -> None:
    before = _children()
    with pytest.raises(HelperProcessError, match="UnpicklableError: the factory failed"):
        ProcessBackend(UnpicklableErrorFactory())
    assert _children() <= before


def test_a_helper_that_exits_before_it_is_ready_names_its_exit_code() -> None:
    before = _children()
    with pytest.raises(HelperProcessError, match="exited with code 7 before it was ready"):
        ProcessBackend(ExitingFactory(7))
    assert _children() <= before


def test_a_helper_slower_than_start_timeout_is_killed(tier: Tier) -> None:
    before = _children()
    with pytest.raises(HelperProcessError, match=r"did not start within 0\.5 s"):
        ProcessBackend(SlowFactory(str(tier.root), 600.0), start_timeout_s=0.5)
    assert _children() <= before, "the helper that did not start is still running"


def test_a_lambda_factory_is_refused_before_any_process_starts(tier: Tier) -> None:
    before = _children()
    with pytest.raises(TypeError, match="pickle"):
        ProcessBackend(lambda: FsBackend(tier.root))
    with pytest.raises(TypeError, match="callable"):
        ProcessBackend(FsBackend(tier.root))  # type: ignore[arg-type]
    assert _children() == before


@pytest.mark.parametrize(
    "kwargs",
    [
        {"max_procs": 0},
        {"max_procs": -1},
        {"max_procs": True},
        {"max_procs": 1.5},
        {"call_timeout_s": 0},
        {"call_timeout_s": -1.0},
        {"call_timeout_s": float("inf")},
        {"call_timeout_s": float("nan")},
        {"call_timeout_s": "1"},
        {"call_timeout_s": True},
        {"start_timeout_s": 0.0},
        {"start_timeout_s": float("inf")},
        {"helper_nice": -1},
        {"helper_nice": 20},
        {"helper_nice": 2.0},
        {"helper_nice": True},
    ],
    ids=repr,
)
def test_bad_limits_raise_value_error_before_any_process_starts(tier: Tier, kwargs: dict[str, Any]) -> None:
    before = _children()
    name = next(iter(kwargs))
    with pytest.raises(ValueError, match=name):
        ProcessBackend(partial(FsBackend, str(tier.root)), **kwargs)
    assert _children() == before


#: The longest a pipe's poll can wait (its timeout becomes a C int of milliseconds): 24.8 days.
PIPE_POLL_MAX_S = (2**31 - 1) / 1000


@pytest.mark.parametrize("name", ["call_timeout_s", "start_timeout_s"])
@pytest.mark.parametrize(
    "seconds",
    [PIPE_POLL_MAX_S + 0.001, 30 * 86400.0, 1e300, 10**400],
    ids=["just-above", "30-days", "1e300", "10**400"],
)
def test_a_timeout_the_pipe_cannot_wait_for_is_refused(tier: Tier, name: str, seconds: float) -> None:
    # Accepted, it would make every call fail (the poll overflows), kill the
    # healthy helper each time and answer MISS for stored keys for ever.
    before = _children()
    with pytest.raises(ValueError, match=rf"{name} must be positive and finite, got .* \(at most .* 2147483\.647 s\)"):
        ProcessBackend(partial(FsBackend, str(tier.root)), **{name: seconds})
    assert _children() == before


def test_the_longest_timeout_the_pipe_can_wait_for_serves_calls(tier: Tier) -> None:
    with _own(tier, call_timeout_s=PIPE_POLL_MAX_S, start_timeout_s=PIPE_POLL_MAX_S) as backend:
        assert backend.batch_lookup(tier.mixed, None) == tier.truth(tier.mixed)


@pytest.mark.parametrize("bad", ["text", bytearray(b"ba"), memoryview(b"mv"), 7, None], ids=repr)
def test_a_non_bytes_key_raises_type_error_before_anything_is_sent(
    scripted: ProcessBackend, tier: Tier, bad: object
) -> None:
    before = _calls(tier.log)
    with pytest.raises(TypeError, match=f"keys must be bytes, got {type(bad).__name__}"):
        scripted.batch_lookup([tier.stored[1], bad], None)  # type: ignore[list-item]
    assert _calls(tier.log) == before, "a call with a bad key reached the helper"
    assert scripted.batch_lookup(tier.stored[1:3], None) == [True, True]


# --- close ----------------------------------------------------------------------------------


def test_close_ends_idle_helpers_then_refuses_calls_and_is_idempotent(tier: Tier, tmp_path: Path) -> None:
    release = tmp_path / "release"
    backend = _own(tier, max_procs=2)
    # Two idle helpers: hold one in a call while a second call starts another.
    stuck = Background(lambda: backend.batch_lookup([marker("wait", release)], None))
    _wait_until(lambda: backend.pids == [], "the first call took the helper")
    assert backend.batch_lookup(tier.stored[1:2], None) == [True]
    release.touch()
    stuck.join()
    assert stuck.result == [False]
    helpers = backend.pids
    assert len(helpers) == 2 and all(map(process_alive, helpers))
    backend.close()
    assert [pid for pid in helpers if process_alive(pid)] == []
    assert backend.pids == []
    with pytest.raises(RuntimeError, match="closed"):
        backend.batch_lookup(tier.stored[1:2], None)
    backend.close()
    with pytest.raises(RuntimeError, match="closed"):
        backend.batch_lookup(tier.stored[1:2], None)
    with pytest.raises(RuntimeError, match="closed"):
        backend.batch_lookup([], None)


def test_start_helpers_starts_them_before_any_call_and_calls_use_them(tier: Tier, tmp_path: Path) -> None:
    release = tmp_path / "release"
    backend = _own(tier, max_procs=3)
    try:
        assert len(backend.pids) == 1  # the constructor's
        assert backend.start_helpers(2) == 2
        assert backend.start_helpers() == 3  # max_procs
        assert backend.start_helpers(10) == 3  # never above max_procs
        started = set(backend.pids)
        assert len(started) == 3 and all(map(process_alive, started))
        # Three calls at once: each takes a started helper, none starts a process.
        calls = [Background(lambda: backend.batch_lookup([marker("wait", release)], None)) for _ in range(3)]
        _wait_until(lambda: backend.pids == [], "the three calls took the three helpers")
        assert set(backend.helper_pids) == started
        release.touch()
        for call in calls:
            call.join()
            assert call.result == [False]
        for bad in (0, -1, True, 1.5, "2"):
            with pytest.raises(ValueError, match="count must be a positive int"):
                backend.start_helpers(bad)  # type: ignore[arg-type]
        assert set(backend.helper_pids) == started
    finally:
        backend.close()
    assert [pid for pid in started if process_alive(pid)] == []
    with pytest.raises(RuntimeError, match="closed"):
        backend.start_helpers()


def test_the_context_manager_closes(tier: Tier) -> None:
    with ProcessBackend(partial(FsBackend, str(tier.root))) as backend:
        assert backend.batch_lookup(tier.stored[1:3], None) == [True, True]
        helpers = backend.pids
        assert helpers and all(map(process_alive, helpers))
    assert [pid for pid in helpers if process_alive(pid)] == []
    with pytest.raises(RuntimeError, match="closed"):
        backend.batch_lookup(tier.stored[1:2], None)


@pytest.mark.parametrize("call_timeout_s", [None, 60.0], ids=["no-call-timeout", "call-timeout"])
def test_close_during_a_stuck_call_fails_that_call_instead_of_hanging(
    tier: Tier, tmp_path: Path, call_timeout_s: float | None
) -> None:
    # Without call_timeout_s the caller blocks in a read, with it in a poll
    # (60 s, longer than the bound): close() must end both promptly.
    release = tmp_path / "release"  # never created: the call would wait 30 s
    backend = _own(tier, max_procs=1, call_timeout_s=call_timeout_s)
    [helper] = backend.pids
    stuck = Background(lambda: backend.batch_lookup([tier.stored[1], marker("wait", release)], None))
    _wait_until(lambda: backend.pids == [], "the stuck call took the helper")
    _wait_until(lambda: any(pid == helper for pid, _ in _calls(tier.log)), "the call reached the helper")
    backend.close()
    assert not process_alive(helper), "close() left the busy helper running"
    stuck.join(bound_s=10.0)
    assert isinstance(stuck.error, HelperProcessError), f"the stuck call ended with {stuck.error!r}/{stuck.result!r}"
    with pytest.raises(RuntimeError, match="closed"):
        backend.batch_lookup(tier.stored[1:2], None)
