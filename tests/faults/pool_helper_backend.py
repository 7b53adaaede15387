"""A test backend that computes on a thread of its own while its calling thread waits.

Run in ``ProcessBackend``'s helpers (importable by name there, as
``helper_backends`` is): the helper's main thread only waits for the pool,
so a gauge that reads the main thread alone sees a waiting call.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor


def _spin(seconds: float) -> None:
    until = time.monotonic() + seconds
    while time.monotonic() < until:
        pass


class PoolSpinBackend:
    """Answers False for every key after keeping a pool thread busy ``spin_s``."""

    def __init__(self, spin_s: float) -> None:
        self.spin_s = spin_s
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="pool-spin")

    def batch_lookup(self, keys: Sequence[bytes], req_context: object) -> list[bool]:
        self._pool.submit(_spin, self.spin_s).result()
        return [False] * len(keys)

    def close(self) -> None:
        self._pool.shutdown(wait=False)
