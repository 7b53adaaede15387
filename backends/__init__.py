"""kvprobe.backends: secondary tiers the manager can probe.

The NIXL backends import NIXL lazily, so this package works without the
``nixl`` extra.
"""

from kvprobe.backends.base import Backend, BlockStore, Key, check_key
from kvprobe.backends.memory import InMemoryBackend

__all__ = ["Backend", "BlockStore", "InMemoryBackend", "Key", "check_key"]
