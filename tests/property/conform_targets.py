"""Factories for the ``kvprobe conform`` tests: a correct tier, a lying one, an unusable one."""

from __future__ import annotations

from collections.abc import Sequence

from kvprobe.backends import InMemoryBackend
from kvprobe.testing.stateful import Target


class ForgetfulBackend(InMemoryBackend):
    """Loses every second block it stores: a tier whose verdicts do not match what was written."""

    def __init__(self) -> None:
        super().__init__()
        self._writes = 0

    def store(self, key: bytes, data: bytes = b"") -> None:
        self._writes += 1
        if self._writes % 2:
            super().store(key, data)


class StaleCacheBackend(InMemoryBackend):
    """Answers from a cache filled on first sight of a key and never invalidated."""

    def __init__(self) -> None:
        super().__init__()
        self.cache: dict[bytes, bool] = {}

    def batch_lookup(self, keys: Sequence[bytes], req_context: object) -> list[bool]:
        fresh = super().batch_lookup(keys, req_context)
        return [self.cache.setdefault(k, v) for k, v in zip(keys, fresh, strict=True)]


def memory_tuple() -> tuple[object, object, object]:
    backend = InMemoryBackend()
    return backend, backend.store, backend.remove


def forgetful() -> ForgetfulBackend:
    return ForgetfulBackend()


def stale_cache() -> Target:
    backend = StaleCacheBackend()
    return Target(backend, backend.store, backend.remove)


def not_a_tier() -> int:
    return 42


NOT_CALLABLE = "a string"
