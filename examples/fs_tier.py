"""Scheduler loop over a filesystem tier (``FsBackend``); needs no extra.

    python examples/fs_tier.py [ROOT]

Without ROOT a temporary directory is used and removed afterwards.
"""

from __future__ import annotations

import sys
import tempfile

from _scheduler import run

from kvprobe import FsBackend


def main() -> None:
    if len(sys.argv) > 1:
        run(FsBackend(sys.argv[1]))
        return
    with tempfile.TemporaryDirectory(prefix="kvprobe-fs-") as root:
        with FsBackend(root) as backend:
            print(f"tier: {backend.root}")
            run(backend)


if __name__ == "__main__":
    main()
