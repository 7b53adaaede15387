"""The object tier's deadline sits below the manager's lookup timeout, so a slow call answers in part, never loses all.

Issue 39: with ``lookup_timeout_s=5`` and the backend's default
``deadline_s=5`` the manager's timeout and the backend's deadline fell at
the same instant, and a slow call lost all 250 keys of its group to the
timeout, the answered ones with them.  The manager now hands its timeout to
a backend that offers ``fit_deadline``.
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from integ_harness import requires_nixl

from kvprobe.statemachine import AsyncLookupManager


class _FittedTier:
    """A tier that records the timeouts it is fitted to."""

    def __init__(self) -> None:
        self.fitted: list[float] = []

    def batch_lookup(self, keys: Sequence[bytes], req_context: object) -> list[bool]:
        return [False] * len(keys)

    def fit_deadline(self, lookup_timeout_s: float) -> float:
        self.fitted.append(lookup_timeout_s)
        return lookup_timeout_s


def test_the_manager_hands_its_timeout_to_the_tier() -> None:
    tier = _FittedTier()
    with AsyncLookupManager(tier, lookup_timeout_s=3.0, worker="manual"):
        pass
    assert tier.fitted == [3.0]


def test_without_a_timeout_the_tier_is_not_fitted() -> None:
    tier = _FittedTier()
    with AsyncLookupManager(tier, worker="manual"):
        pass
    assert tier.fitted == []


def _backend(**kwargs: object) -> object:
    from kvprobe.backends.nixl_obj import NixlObjBackend

    return NixlObjBackend(
        "deadline-bucket",
        endpoint_url="http://127.0.0.1:9",
        access_key="k",
        secret_key="s",
        check=False,
        pace_scope="process",
        **kwargs,  # type: ignore[arg-type]
    )


@requires_nixl
@pytest.mark.parametrize("timeout_s", [0.2, 1.0, 5.0, 60.0])
def test_a_managed_object_tier_gives_up_before_the_manager(timeout_s: float) -> None:
    backend = _backend(deadline_s=3600.0)
    try:
        with AsyncLookupManager(backend, lookup_timeout_s=timeout_s, worker="manual"):  # type: ignore[arg-type]
            pass
        deadline = backend.deadline_s  # type: ignore[attr-defined]
        assert 0 < deadline < timeout_s
        # The margin covers a HEAD's return and the scheduling of the answer.
        assert timeout_s - deadline >= min(0.5, timeout_s / 4) - 1e-9
    finally:
        backend.close()  # type: ignore[attr-defined]


@requires_nixl
def test_the_default_deadline_is_not_the_default_timeout() -> None:
    """The case the campaign hit: ``lookup_timeout_s=5`` with the backend's defaults."""
    backend = _backend()
    try:
        with AsyncLookupManager(backend, lookup_timeout_s=5.0, worker="manual"):  # type: ignore[arg-type]
            pass
        assert backend.deadline_s < 5.0  # type: ignore[attr-defined]
    finally:
        backend.close()  # type: ignore[attr-defined]


@requires_nixl
def test_a_shorter_deadline_of_its_own_is_kept_and_two_managers_take_the_shorter() -> None:
    backend = _backend(deadline_s=1.0)
    try:
        with AsyncLookupManager(backend, lookup_timeout_s=5.0, worker="manual"):  # type: ignore[arg-type]
            pass
        assert backend.deadline_s == 1.0  # type: ignore[attr-defined]
        with AsyncLookupManager(backend, lookup_timeout_s=1.0, worker="manual"):  # type: ignore[arg-type]
            pass
        assert backend.deadline_s == 0.75  # type: ignore[attr-defined]
    finally:
        backend.close()  # type: ignore[attr-defined]


@requires_nixl
def test_a_bad_timeout_is_refused_by_name() -> None:
    backend = _backend()
    try:
        with pytest.raises(ValueError, match="lookup_timeout_s"):
            backend.fit_deadline(float("nan"))  # type: ignore[attr-defined]
    finally:
        backend.close()  # type: ignore[attr-defined]
