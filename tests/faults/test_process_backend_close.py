"""ProcessBackend: ``close()`` and the context manager end every helper, also one stuck in a call.

After a close every call is refused; ``start_helpers`` starts helpers
ahead of the calls that then use them, never above ``max_procs``; a caller
blocked in a stuck call gets an error at the close instead of hanging.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path

import pytest
from fault_harness import process_alive
from helper_backends import marker

# The *_fixture names register the module-scoped fixtures tier, fs_helper, scripted.
from process_backend_harness import (
    Background,
    Tier,
    logged_calls,
    own_backend,
    tier_fixture as tier_fixture,
    wait_until,
)

from kvprobe.backends import FsBackend, HelperProcessError, ProcessBackend


def test_close_ends_idle_helpers_then_refuses_calls_and_is_idempotent(tier: Tier, tmp_path: Path) -> None:
    release = tmp_path / "release"
    backend = own_backend(tier, max_procs=2)
    # Two idle helpers: hold one in a call while a second call starts another.
    stuck = Background(lambda: backend.batch_lookup([marker("wait", release)], None))
    wait_until(lambda: backend.pids == [], "the first call took the helper")
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
    backend = own_backend(tier, max_procs=3)
    try:
        assert len(backend.pids) == 1  # the constructor's
        assert backend.start_helpers(2) == 2
        assert backend.start_helpers() == 3  # max_procs
        assert backend.start_helpers(10) == 3  # never above max_procs
        started = set(backend.pids)
        assert len(started) == 3 and all(map(process_alive, started))
        # Three calls at once: each takes a started helper, none starts a process.
        calls = [Background(lambda: backend.batch_lookup([marker("wait", release)], None)) for _ in range(3)]
        wait_until(lambda: backend.pids == [], "the three calls took the three helpers")
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
    backend = own_backend(tier, max_procs=1, call_timeout_s=call_timeout_s)
    [helper] = backend.pids
    stuck = Background(lambda: backend.batch_lookup([tier.stored[1], marker("wait", release)], None))
    wait_until(lambda: backend.pids == [], "the stuck call took the helper")
    wait_until(lambda: any(pid == helper for pid, _ in logged_calls(tier.log)), "the call reached the helper")
    backend.close()
    assert not process_alive(helper), "close() left the busy helper running"
    stuck.join(bound_s=10.0)
    assert isinstance(stuck.error, HelperProcessError), f"the stuck call ended with {stuck.error!r}/{stuck.result!r}"
    with pytest.raises(RuntimeError, match="closed"):
        backend.batch_lookup(tier.stored[1:2], None)
