"""kvprobe.backends: secondary tiers the manager can probe.

``FsBackend``, ``InMemoryBackend`` and ``ProcessBackend`` (which runs any
of the others in helper processes, off the scheduler's GIL) need nothing
beyond the standard library.  The NIXL backends (``NixlPosixBackend``, ``NixlObjBackend``) are
imported lazily on first access, so ``import kvprobe.backends`` works without
the ``nixl`` extra; constructing one without NIXL raises ``ImportError``
naming ``kvprobe[nixl]``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kvprobe.backends.base import Backend, BlockStore, Key, check_key
from kvprobe.backends.fs import FsBackend
from kvprobe.backends.layout import relative_name
from kvprobe.backends.memory import InMemoryBackend
from kvprobe.backends.process import HelperProcessError, ProcessBackend

if TYPE_CHECKING:
    from kvprobe.backends.nixl_obj import BucketNotFoundError, NixlObjBackend, ObjStoreUnavailableError
    from kvprobe.backends.nixl_posix import NixlPosixBackend

__all__ = [
    "Backend",
    "BlockStore",
    "BucketNotFoundError",
    "FsBackend",
    "HelperProcessError",
    "InMemoryBackend",
    "Key",
    "NixlObjBackend",
    "NixlPosixBackend",
    "ObjStoreUnavailableError",
    "ProcessBackend",
    "check_key",
    "relative_name",
]

# These modules import no NIXL at import time (only when a backend is built),
# but loading them lazily keeps `import kvprobe.backends` minimal.
_LAZY = {
    "NixlPosixBackend": "kvprobe.backends.nixl_posix",
    "NixlObjBackend": "kvprobe.backends.nixl_obj",
    "BucketNotFoundError": "kvprobe.backends.nixl_obj",
    "ObjStoreUnavailableError": "kvprobe.backends.nixl_obj",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'kvprobe.backends' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)
