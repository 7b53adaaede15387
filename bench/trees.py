"""A throw-away block tree for the filesystem benchmarks.

Files are written straight to the paths the backends' shared layout gives
(``locate``), without ``FsBackend.store``'s atomic rename: the tree is built
once per run, before any clock starts, and tens of thousands of temporary
files would only slow that down.
"""

from __future__ import annotations

import os
import random
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager

from kvprobe.backends.fs import FsBackend

__all__ = ["block_tree"]


@contextmanager
def block_tree(n_keys: int, stored_fraction: float = 0.5, seed: int = 3) -> Iterator[tuple[str, list[bytes]]]:
    """Yield ``(root, keys)``: ``n_keys`` random 20-byte keys, about half stored."""
    rng = random.Random(seed)
    keys = [rng.randbytes(16) + rng.randrange(4).to_bytes(4, "little") for _ in range(n_keys)]
    root = tempfile.mkdtemp(prefix="kvprobe-bench-")
    try:
        fs = FsBackend(root)
        made: set[str] = set()
        for key in keys:
            if rng.random() >= stored_fraction:
                continue
            path = fs.locate(key)
            parent = os.path.dirname(path)
            if parent not in made:
                os.makedirs(parent, exist_ok=True)
                made.add(parent)
            with open(path, "wb"):
                pass
        yield root, keys
    finally:
        shutil.rmtree(root, ignore_errors=True)
