"""An in-memory tier: a set of stored keys.  For examples, tests and benchmarks."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from kvprobe.backends.base import Key, check_key

__all__ = ["InMemoryBackend"]


class InMemoryBackend:
    """Blocks kept in a Python set; ``locate`` gives a ``mem://`` name.

    Thread-safe enough for the manager: ``batch_lookup`` only reads the set
    (set membership is atomic under the GIL), ``store``/``remove`` mutate it.
    ``calls`` records every ``batch_lookup`` as ``(keys, req_id)``.
    """

    def __init__(self, stored: Iterable[Key] = ()) -> None:
        self.stored: set[Key] = {check_key(k) for k in stored}
        self.calls: list[tuple[tuple[Key, ...], str | None]] = []

    def batch_lookup(self, keys: Sequence[Key], req_context: object) -> list[bool]:
        """One verdict per key.  Raises TypeError for a non-bytes key."""
        self.calls.append((tuple(keys), getattr(req_context, "req_id", None)))
        stored = self.stored
        return [check_key(k) in stored for k in keys]

    def locate(self, key: Key) -> str:
        """``mem://<hex>``.  Raises TypeError for a non-bytes key."""
        return "mem://" + check_key(key).hex()

    def store(self, key: Key, data: bytes = b"") -> None:
        """Mark the block stored (the data is not kept)."""
        del data
        self.stored.add(check_key(key))

    def remove(self, key: Key) -> None:
        """Mark the block not stored (no error if it was not)."""
        self.stored.discard(check_key(key))
