"""A drop-in for vLLM's tiered-offloading ``AsyncLookupManager``, on kvprobe's core.

A vLLM secondary tier composes a subclass of vLLM's
``vllm.v1.kv_offload.tiering.async_lookup.AsyncLookupManager`` that
implements ``batch_lookup(keys, req_context)``.  Changing that one import to
``from kvprobe.integrations.vllm import AsyncLookupManager`` runs the same
subclass on kvprobe's verified core and threaded worker; ``docs/vllm.md``
lists where the behaviour differs (every difference is a case where vLLM's
base class crashes, stalls or leaks).

:func:`lookup_prefix` and :func:`as_lookup_result` map verdicts to vLLM's
lookup result kinds (``HIT`` / ``MISS`` / ``RETRY``).  vLLM is not imported:
pass vLLM's own ``LookupResult`` enum as ``kinds`` inside an engine.
"""

from kvprobe.integrations.vllm.manager import AsyncLookupManager
from kvprobe.integrations.vllm.results import ChainAnswer, LookupResult, PrefixVerdict, as_lookup_result, lookup_prefix

__all__ = ["AsyncLookupManager", "ChainAnswer", "LookupResult", "PrefixVerdict", "as_lookup_result", "lookup_prefix"]
