"""The shipped stateful machine with the verdict cache on (docs/cache.md).

The machine's clock (the ``Tick`` rule) drives the cache's, so remembered
answers age and expire within a run; a bound of two entries over the
machine's keys makes evictions happen; both TTLs are positive so that hits
and misses are remembered.  The model's memory is compared with the core's
after every step, and ``CacheProvenance`` is checked on both.
"""

from __future__ import annotations

from hypothesis import settings

from kvprobe.statemachine import VerdictCache
from kvprobe.testing.stateful import lookup_machine

CACHE = VerdictCache(max_entries=2, hit_ttl_s=2.5, miss_ttl_s=1.0)

# The manual worker: every interleaving of lookups, answers, failures, forced misses and time.
TestManualWorkerWithCache = lookup_machine(verdict_cache=CACHE).TestCase

# The real ThreadedWorker: each flush waits for it; few examples (the manual machine searches).
_Threaded = lookup_machine(worker="thread", verdict_cache=CACHE)
_Threaded.TestCase.settings = settings(settings(), max_examples=max(5, settings().max_examples // 10))
TestThreadedWorkerWithCache = _Threaded.TestCase
