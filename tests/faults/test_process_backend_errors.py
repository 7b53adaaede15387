"""ProcessBackend: an error of the wrapped backend reaches the caller as the contract says.

Raised in the helper, an exception is raised again with its type and errno,
or becomes ``HelperProcessError`` with its text when it cannot cross the
pipe; a non-bool verdict is a ``TypeError`` naming the key; a short or long
answer keeps its length (the manager counts it).  None of these costs the
helper: the same one answers the next call.  The same faults through a
manager are in ``test_process_backend.py``.
"""

from __future__ import annotations

import errno
import sys

import pytest
from helper_backends import marker

# The *_fixture names register the module-scoped fixtures tier, fs_helper, scripted.
from process_backend_harness import (
    Tier,
    scripted_fixture as scripted_fixture,
    tier_fixture as tier_fixture,
)

from kvprobe.backends import HelperProcessError, ProcessBackend


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
