"""ProcessBackend: construction and bad input fail before any process starts, or leave none behind.

A factory that raises in the helper (also with an error that does not
pickle), a helper that exits or overstays ``start_timeout_s`` before it is
ready, a factory that cannot be pickled, limits out of range, timeouts
longer than a pipe can wait for, and keys that are not ``bytes``: each is
refused with a typed error naming the problem, and no helper outlives it.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any

import pytest
from helper_backends import ExitingFactory, SlowFactory, UnpicklableErrorFactory

# The *_fixture names register the module-scoped fixtures tier, fs_helper, scripted.
from process_backend_harness import (
    Tier,
    children,
    logged_calls,
    own_backend,
    scripted_fixture as scripted_fixture,
    tier_fixture as tier_fixture,
)

from kvprobe.backends import FsBackend, HelperProcessError, ProcessBackend


def test_a_factory_that_raises_in_the_helper_raises_from_the_constructor(tmp_path: Path) -> None:
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("a regular file, not a tier")
    before = children()
    with pytest.raises(NotADirectoryError, match="is not a directory"):
        ProcessBackend(partial(FsBackend, str(not_a_dir)))
    assert children() <= before, "the failed helper is still running"


def test_a_factory_error_that_does_not_pickle_becomes_helper_process_error() -> None:
    before = children()
    with pytest.raises(HelperProcessError, match="UnpicklableError: the factory failed"):
        ProcessBackend(UnpicklableErrorFactory())
    assert children() <= before


def test_a_helper_that_exits_before_it_is_ready_names_its_exit_code() -> None:
    before = children()
    with pytest.raises(HelperProcessError, match="exited with code 7 before it was ready"):
        ProcessBackend(ExitingFactory(7))
    assert children() <= before


def test_a_helper_slower_than_start_timeout_is_killed(tier: Tier) -> None:
    before = children()
    with pytest.raises(HelperProcessError, match=r"did not start within 0\.5 s"):
        ProcessBackend(SlowFactory(str(tier.root), 600.0), start_timeout_s=0.5)
    assert children() <= before, "the helper that did not start is still running"


def test_a_lambda_factory_is_refused_before_any_process_starts(tier: Tier) -> None:
    before = children()
    with pytest.raises(TypeError, match="pickle"):
        ProcessBackend(lambda: FsBackend(tier.root))
    with pytest.raises(TypeError, match="callable"):
        ProcessBackend(FsBackend(tier.root))  # type: ignore[arg-type]
    assert children() == before


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
    before = children()
    name = next(iter(kwargs))
    with pytest.raises(ValueError, match=name):
        ProcessBackend(partial(FsBackend, str(tier.root)), **kwargs)
    assert children() == before


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
    before = children()
    with pytest.raises(ValueError, match=rf"{name} must be positive and finite, got .* \(at most .* 2147483\.647 s\)"):
        ProcessBackend(partial(FsBackend, str(tier.root)), **{name: seconds})
    assert children() == before


def test_the_longest_timeout_the_pipe_can_wait_for_serves_calls(tier: Tier) -> None:
    with own_backend(tier, call_timeout_s=PIPE_POLL_MAX_S, start_timeout_s=PIPE_POLL_MAX_S) as backend:
        assert backend.batch_lookup(tier.mixed, None) == tier.truth(tier.mixed)


@pytest.mark.parametrize("bad", ["text", bytearray(b"ba"), memoryview(b"mv"), 7, None], ids=repr)
def test_a_non_bytes_key_raises_type_error_before_anything_is_sent(
    scripted: ProcessBackend, tier: Tier, bad: object
) -> None:
    before = logged_calls(tier.log)
    with pytest.raises(TypeError, match=f"keys must be bytes, got {type(bad).__name__}"):
        scripted.batch_lookup([tier.stored[1], bad], None)  # type: ignore[list-item]
    assert logged_calls(tier.log) == before, "a call with a bad key reached the helper"
    assert scripted.batch_lookup(tier.stored[1:3], None) == [True, True]
