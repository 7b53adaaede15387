"""Scheduler loop over a filesystem tier probed by NIXL POSIX (``pip install 'kvprobe[nixl]'``).

    python examples/nixl_posix_tier.py [ROOT]

Each request group is one ``query_memory`` call that stats in C++ with the
GIL released.  Without ROOT a temporary directory is used.
"""

from __future__ import annotations

import sys
import tempfile

from _scheduler import run

from kvprobe import NixlPosixBackend


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="kvprobe-posix-") as tmp:
        root = sys.argv[1] if len(sys.argv) > 1 else tmp
        with NixlPosixBackend(root) as backend:
            print(f"tier: {backend.root}; NIXL agent {backend.agent_names[0]}")
            run(backend)


if __name__ == "__main__":
    main()
