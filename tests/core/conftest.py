"""Fixtures for the core tests: managers driven by the manual worker."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from core_harness import Manual


@pytest.fixture
def manual() -> Iterator[Manual]:
    made = Manual((b"hit-1", b"hit-2"))
    yield made
    made.m.shutdown()
