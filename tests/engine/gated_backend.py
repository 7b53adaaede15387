"""A backend whose calls wait for a file to appear: holds a helper process busy for as long as a test needs."""

from __future__ import annotations

import os
import time
from collections.abc import Sequence

__all__ = ["GateFileBackend"]


class GateFileBackend:
    """Answers True for every key once ``gate`` exists (waits at most ``bound_s``, then raises)."""

    def __init__(self, gate: str, bound_s: float = 60.0) -> None:
        self.gate = gate
        self.bound_s = bound_s

    def batch_lookup(self, keys: Sequence[bytes], req_context: object) -> list[bool]:
        deadline = time.monotonic() + self.bound_s
        while not os.path.exists(self.gate):
            if time.monotonic() > deadline:
                raise TimeoutError(f"gate {self.gate} never opened")
            time.sleep(0.005)
        return [True] * len(keys)
