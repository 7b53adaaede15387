"""kvprobe's own secondary tiers for vLLM 0.33: ``ObjTier`` and ``FsTier``.

vLLM loads them by its out-of-tree mechanism, with no patch::

    {"type": "ObjTier", "module_path": "kvprobe.integrations.vllm.tiers", "store_config": {...}}

or, with kvprobe installed in vLLM's environment, by the short names
``kvprobe-obj`` and ``kvprobe-fs`` that :func:`register_tiers` (the
``vllm.general_plugins`` entry point) registers.  Each stores and loads
exactly as vLLM's own ``obj`` / ``fs`` tier (it subclasses it: same names
of objects and files, so one fleet may mix them) and looks blocks up through
kvprobe's manager and backends.  Their keys and defaults: docs/vllm.md.

How a lookup goes: vLLM's scheduler calls the tier's ``lookup(key,
req_context)`` per key; the tier asks :class:`TierLookupManager` (kvprobe's
vLLM drop-in), which answers from its table or queues the key for the
step's batch, as vLLM's own tiers do through the drop-in.  Whatever the
drop-in does with the key positions the scheduler records in
``req_context`` applies here unchanged; the tier adds nothing of its own.

The tier classes import vLLM when first asked for (``from
kvprobe.integrations.vllm.tiers import ObjTier``); this package itself, the
entry point and the config checks import without vLLM.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from kvprobe.integrations.vllm.tiers.options import TierConfigError

if TYPE_CHECKING:
    from kvprobe.integrations.vllm.tiers.fs import FsTier
    from kvprobe.integrations.vllm.tiers.obj import ObjTier

__all__ = ["TIER_NAMES", "FsTier", "ObjTier", "TierConfigError", "register_tiers"]

#: The short tier type each class is registered under in vLLM's factory.
TIER_NAMES = {"kvprobe-obj": "ObjTier", "kvprobe-fs": "FsTier"}
_MODULES = {"ObjTier": "obj", "FsTier": "fs"}


def __getattr__(name: str) -> Any:
    # vLLM's factory reads the class with getattr(module, type): import its
    # module (and so vLLM) only then.
    module = _MODULES.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)


def register_tiers() -> list[str]:
    """Register ``kvprobe-obj`` and ``kvprobe-fs`` in vLLM's ``SecondaryTierFactory``.

    The ``vllm.general_plugins`` entry point: vLLM calls it in each process.
    A name already registered (a second call, or another plugin's) is left as
    it is.  Nothing is imported but vLLM's factory.

    Returns:
        The names this call registered (empty when vLLM is not installed).
    """
    try:
        from vllm.v1.kv_offload.tiering.factory import SecondaryTierFactory
    except ImportError:
        return []
    registered = []
    for tier_type, class_name in TIER_NAMES.items():
        try:
            SecondaryTierFactory.register_tier(tier_type, __name__, class_name)
        except ValueError:  # vLLM's answer for a name already there
            continue
        registered.append(tier_type)
    return registered
