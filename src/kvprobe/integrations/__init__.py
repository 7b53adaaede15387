"""Integrations of kvprobe with the engines that consume it.

* :mod:`kvprobe.integrations.vllm`: a drop-in base class for vLLM's tiered
  KV offloading lookup manager, running on kvprobe's verified core.
"""

__all__: list[str] = []
