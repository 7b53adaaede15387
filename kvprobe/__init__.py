"""kvprobe: a verified asynchronous batched existence-lookup manager for KV-cache tiers.

Subpackages: :mod:`kvprobe.spec` (the lifecycle declaration and reference
model), :mod:`kvprobe.statemachine` (the manager), :mod:`kvprobe.backends`
(tiers).
"""

__version__ = "0.1.0"
__all__ = ["__version__"]
