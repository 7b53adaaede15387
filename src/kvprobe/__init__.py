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
        BlockStore as BlockStore,
        BucketNotFoundError as BucketNotFoundError,
        FsBackend as FsBackend,
        HelperProcessError as HelperProcessError,
        InMemoryBackend as InMemoryBackend,
        Key as Key,
        NixlObjBackend as NixlObjBackend,
        NixlPosixBackend as NixlPosixBackend,
        ObjStoreUnavailableError as ObjStoreUnavailableError,
        ProcessBackend as ProcessBackend,
    )
    from kvprobe.spec.lifecycle import LookupPhase as LookupPhase
    from kvprobe.statemachine import (
        AsyncLookupManager as AsyncLookupManager,
        ChainAnswer as ChainAnswer,
        FailureKind as FailureKind,
        HasReqId as HasReqId,
        InvalidInputError as InvalidInputError,
        InvalidValueError as InvalidValueError,
        KvprobeError as KvprobeError,
        ManagerClosedError as ManagerClosedError,
        ReqContext as ReqContext,
        Stats as Stats,
        VerdictCache as VerdictCache,
        WrongThreadError as WrongThreadError,
    )

__version__ = "0.1.0"

# The public names, by the module that defines them (loaded on first use).
_EXPORTED_FROM = {
    "kvprobe.statemachine": (
        "AsyncLookupManager ChainAnswer FailureKind HasReqId InvalidInputError InvalidValueError KvprobeError"
        " ManagerClosedError ReqContext Stats VerdictCache WrongThreadError"
    ),
    "kvprobe.spec.lifecycle": "LookupPhase",
    "kvprobe.backends": (
        "Backend BlockStore BucketNotFoundError FsBackend HelperProcessError InMemoryBackend Key NixlObjBackend"
        " NixlPosixBackend ObjStoreUnavailableError ProcessBackend"
    ),
}
_EXPORTS = {name: module for module, names in _EXPORTED_FROM.items() for name in names.split()}

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
