"""A drop-in for vLLM 0.33's tiered-offloading ``AsyncLookupManager``, on kvprobe's core.

A vLLM secondary tier composes a subclass of vLLM's
``vllm.v1.kv_offload.tiering.async_lookup.AsyncLookupManager`` that
implements ``batch_lookup(keys, req_context)``.  Changing that one import to
``from kvprobe.integrations.vllm import AsyncLookupManager`` (or assigning
the class to that module attribute before the tiers are imported) runs the
same subclass on kvprobe's verified core and threaded worker under vLLM
0.33's contract; ``docs/vllm.md`` lists where the behaviour still differs
and why.  ``LookupPhase`` and ``LookupState`` are importable from here as
from vLLM's module.

This ``AsyncLookupManager`` is the vLLM-shaped drop-in; kvprobe's native
manager of the same name is ``kvprobe.AsyncLookupManager`` (the drop-in runs
one underneath).  Both have ``lookup_chain(keys, req_context)`` returning a
:class:`ChainAnswer`; :func:`as_lookup_result` maps a verdict or a chain
answer to vLLM's lookup result kinds (``HIT`` / ``MISS`` / ``RETRY``).  vLLM
is not imported: pass vLLM's own ``LookupResult`` enum as ``kinds`` inside
an engine.
"""

from kvprobe.integrations.vllm.manager import AsyncLookupManager, LookupPhase, LookupState
from kvprobe.integrations.vllm.results import ChainAnswer, LookupResult, as_lookup_result

__all__ = ["AsyncLookupManager", "ChainAnswer", "LookupPhase", "LookupResult", "LookupState", "as_lookup_result"]
