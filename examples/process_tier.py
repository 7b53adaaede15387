"""Scheduler loop over a filesystem tier probed in a helper process.

    python examples/process_tier.py [ROOT]

``ProcessBackend`` runs the tier's lookups in a helper process, so none of
their Python work (paths, NIXL's answers, a stat loop) holds the GIL the
scheduler thread needs.  It uses NIXL POSIX when NIXL is installed
(``pip install 'kvprobe[nixl]'``), else ``FsBackend``.  Blocks are written
through an ``FsBackend`` on the same root: the helper reads the same files.
Without ROOT a temporary directory is used.
"""

from __future__ import annotations

import sys
import tempfile
from functools import partial
from typing import Any

from _scheduler import run

from kvprobe import FsBackend, NixlPosixBackend, ProcessBackend


def lookup_backend_class(root: str) -> Any:
    """NixlPosixBackend when NIXL loads here, else FsBackend.

    Building a NIXL backend without NIXL raises ``ImportError`` naming the
    extra; one is built (and closed) here rather than in the helper, so a
    missing NIXL falls back instead of failing every helper call.
    """
    try:
        NixlPosixBackend(root).close()
    except ImportError as missing:
        print(f"NIXL not available ({str(missing)[:60]}...); the helper runs FsBackend")
        return FsBackend
    return NixlPosixBackend


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="kvprobe-process-") as tmp:
        root = sys.argv[1] if len(sys.argv) > 1 else tmp
        writer = FsBackend(root)
        with ProcessBackend(partial(lookup_backend_class(root), root)) as tier:
            print(f"tier: {tier!r}; helper pids {tier.pids}")
            run(tier, writer=writer)


if __name__ == "__main__":
    main()
