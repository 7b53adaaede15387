"""Factories for the ``kvprobe conform`` CLI tests: a correct tier and unusable ones.

The lying tiers are in tests/conform/lying_tiers.py.
"""

from __future__ import annotations

from kvprobe.backends import InMemoryBackend


def memory_tuple() -> tuple[object, object, object]:
    backend = InMemoryBackend()
    return backend, backend.store, backend.remove


def not_a_tier() -> int:
    return 42


NOT_CALLABLE = "a string"
