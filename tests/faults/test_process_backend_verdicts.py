"""ProcessBackend: the verdicts through a helper equal the wrapped backend's own, and helpers run niced.

FsBackend and NIXL POSIX on a real tree, keys of every length the layout
names differently, a batch far larger than a pipe buffer, the tier changing
between calls; and the helpers' priority, below the manager's so that the
scheduler keeps its core.  The shared tier and helpers are
``process_backend_harness.py``'s; the faults are in the sibling files.
"""

from __future__ import annotations

import os
import random
from functools import partial

import pytest
from fault_harness import keys, nixl_missing

# The *_fixture names register the module-scoped fixtures tier, fs_helper, scripted.
from process_backend_harness import (
    Tier,
    fs_helper_fixture as fs_helper_fixture,
    logged_calls,
    scripted_fixture as scripted_fixture,
    tier_fixture as tier_fixture,
)

from kvprobe.backends import FsBackend, ProcessBackend
from kvprobe.backends.process import DEFAULT_HELPER_NICE

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
    before = logged_calls(tier.log)
    assert before, "the logging backend recorded no call"
    assert scripted.batch_lookup([], None) == []
    assert scripted.batch_lookup((), None) == []
    assert logged_calls(tier.log) == before


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
