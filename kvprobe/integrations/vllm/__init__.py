"""A drop-in for vLLM's tiered-offloading ``AsyncLookupManager``, on kvprobe's core.

A vLLM secondary tier composes a subclass of vLLM's
``vllm.v1.kv_offload.tiering.async_lookup.AsyncLookupManager`` that
implements ``batch_lookup(keys, req_context)``.  Changing that one import to
``from kvprobe.integrations.vllm import AsyncLookupManager`` runs the same
subclass on kvprobe's verified core and threaded worker; ``docs/vllm.md``
lists where the behaviour differs (every difference is a case where vLLM's
base class crashes, stalls or leaks).

This ``AsyncLookupManager`` is the vLLM-shaped drop-in; kvprobe's native
manager of the same name is ``kvprobe.AsyncLookupManager`` (the drop-in runs
one underneath).  Both have ``lookup_chain(keys, req_context)`` returning a
:class:`ChainAnswer`; :func:`as_lookup_result` maps a verdict or a chain
answer to vLLM's lookup result kinds (``HIT`` / ``MISS`` / ``RETRY``).  vLLM
is not imported: pass vLLM's own ``LookupResult`` enum as ``kinds`` inside
an engine.
"""

from kvprobe.integrations.vllm.manager import AsyncLookupManager
from kvprobe.integrations.vllm.results import ChainAnswer, LookupResult, as_lookup_result

__all__ = ["AsyncLookupManager", "ChainAnswer", "LookupResult", "as_lookup_result"]
