"""Hypothesis profiles for the whole suite; choose one with HYPOTHESIS_PROFILE.

* ``default`` — local development: a moderate number of examples.
* ``ci`` — what ``.ci/run`` uses: derandomized (the same examples on every
  run, so CI never fails by luck and never passes by luck), bounded examples,
  no deadline (a shared CI machine's timing is not a property of the code).
* ``nightly`` — many more examples and longer stateful runs.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, settings

from kvprobe.build_info import build_info

settings.register_profile("default", max_examples=100, stateful_step_count=40, deadline=None)
settings.register_profile(
    "ci",
    max_examples=150,
    stateful_step_count=40,
    derandomize=True,
    deadline=None,
    database=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile(
    "nightly",
    max_examples=3000,
    stateful_step_count=120,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))


def pytest_report_header() -> str:
    return f"kvprobe: {build_info().describe()}"


def pytest_configure(config: pytest.Config) -> None:
    # A compiled module older than the .py beside it would be what the tests
    # import: the suite would pass on code that no longer exists.
    info = build_info()
    if info.stale:
        pytest.exit(f"kvprobe: {info.describe()}", returncode=4)


@pytest.fixture(autouse=True)
def _own_pace_dir(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test's object-tier paces (shared by the host's processes by default) in a directory of its own.

    A pace outlives the backends that used it (the file is the host's), so
    without this one test's throttled store would pace the next test's
    lookups, and the suite would leave files in ``/dev/shm``.  Processes a
    test starts inherit the directory.
    """
    monkeypatch.setenv("KVPROBE_PACE_DIR", str(tmp_path_factory.mktemp("pace")))
