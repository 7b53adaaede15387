"""A fake object store for the lookup engine's tests: answers like a NIXL OBJ query, fails a query whole."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["FakeStore"]


class FakeStore:
    """``query(names)``: one answer per name (``{}`` stored, ``None`` absent), raising when a name is failing.

    ``fail_times[name]``: how many more queries holding ``name`` fail whole,
    raising ``error()`` (NIXL's ``NIXL_ERR_BACKEND`` by default).
    Records each query's size and first name, and the peak of concurrent queries.
    """

    def __init__(
        self,
        stored: set[str],
        fail_times: dict[str, int],
        delay_s: float = 0.0,
        error: Callable[[], BaseException] = lambda: RuntimeError("NIXL_ERR_BACKEND"),
    ) -> None:
        self.stored = stored
        self.error = error
        self.fail_times = Counter(fail_times)  # how many more times a query holding the name fails
        self.delay_s = delay_s
        self.sizes: list[int] = []
        self.order: list[str] = []  # each query's first name, in the order queries started
        self.lock = threading.Lock()
        self.concurrent = 0
        self.peak = 0

    def query(self, names: Sequence[str]) -> list[Any]:
        with self.lock:
            self.sizes.append(len(names))
            self.order.append(names[0])
            self.concurrent += 1
            self.peak = max(self.peak, self.concurrent)
            failing = [n for n in names if self.fail_times[n] > 0]
            for n in failing:
                self.fail_times[n] -= 1
        try:
            if self.delay_s:
                time.sleep(self.delay_s)
            if failing:
                raise self.error()
            return [{} if n in self.stored else None for n in names]
        finally:
            with self.lock:
                self.concurrent -= 1
