"""kvprobe: a verified asynchronous batched existence-lookup manager for KV-cache tiers.

The public names a user needs are here::

    from kvprobe import AsyncLookupManager, FsBackend, ReqContext

    with AsyncLookupManager(FsBackend("/mnt/kv"), name="fs") as manager:
        manager.lookup(key, ReqContext("req-1"))   # None: ask again next step
        manager.flush()                            # end of the step

They are loaded on first use, so ``import kvprobe.spec`` (the reference
model) does not load the manager, its threads or the backends.  The
subpackages: :mod:`kvprobe.spec` (the lifecycle declaration and reference
model), :mod:`kvprobe.statemachine` (the manager, its pure core and its
workers), :mod:`kvprobe.backends` (tiers), :mod:`kvprobe.integrations`
(serving engines), :mod:`kvprobe.testing` (the stateful suite for your own
tier).  ``docs/modules.md`` maps them.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kvprobe.backends import (
        Backend as Backend,
    )
    from kvprobe.backends import (
        BlockStore as BlockStore,
    )
    from kvprobe.backends import (
        BucketNotFoundError as BucketNotFoundError,
    )
    from kvprobe.backends import (
        FsBackend as FsBackend,
    )
    from kvprobe.backends import (
        HelperProcessError as HelperProcessError,
    )
    from kvprobe.backends import (
        InMemoryBackend as InMemoryBackend,
    )
    from kvprobe.backends import (
        Key as Key,
    )
    from kvprobe.backends import (
        NixlObjBackend as NixlObjBackend,
    )
    from kvprobe.backends import (
        NixlPosixBackend as NixlPosixBackend,
    )
    from kvprobe.backends import (
        ObjStoreUnavailableError as ObjStoreUnavailableError,
    )
    from kvprobe.backends import (
        ProcessBackend as ProcessBackend,
    )
    from kvprobe.spec.lifecycle import LookupPhase as LookupPhase
    from kvprobe.statemachine import (
        AsyncLookupManager as AsyncLookupManager,
    )
    from kvprobe.statemachine import (
        ChainAnswer as ChainAnswer,
    )
    from kvprobe.statemachine import (
        FailureKind as FailureKind,
    )
    from kvprobe.statemachine import (
        HasReqId as HasReqId,
    )
    from kvprobe.statemachine import (
        InvalidInputError as InvalidInputError,
    )
    from kvprobe.statemachine import (
        InvalidValueError as InvalidValueError,
    )
    from kvprobe.statemachine import (
        KvprobeError as KvprobeError,
    )
    from kvprobe.statemachine import (
        ManagerClosedError as ManagerClosedError,
    )
    from kvprobe.statemachine import (
        ReqContext as ReqContext,
    )
    from kvprobe.statemachine import (
        Stats as Stats,
    )
    from kvprobe.statemachine import (
        WrongThreadError as WrongThreadError,
    )

__version__ = "0.1.0"

# public name -> the module that defines it
_EXPORTS = {
    **dict.fromkeys(
        [
            "AsyncLookupManager",
            "ChainAnswer",
            "FailureKind",
            "HasReqId",
            "InvalidInputError",
            "InvalidValueError",
            "KvprobeError",
            "ManagerClosedError",
            "ReqContext",
            "Stats",
            "WrongThreadError",
        ],
        "kvprobe.statemachine",
    ),
    "LookupPhase": "kvprobe.spec.lifecycle",
    **dict.fromkeys(
        [
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
        ],
        "kvprobe.backends",
    ),
}

__all__ = ["__version__", *sorted(_EXPORTS)]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'kvprobe' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return __all__
