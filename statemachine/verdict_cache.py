"""The opt-in verdict cache: existence remembered across requests (docs/cache.md).

Without it, every request that asks for a key nobody else is asking for
sends the backend a probe, even if the same key was answered a moment ago
for a request that has since finished.  A fleet of engines sharing one
object store then pays one HEAD per block per request.  With it, the core
remembers the backend's answers for a while, bounded in entries:

* :class:`VerdictCache` is the configuration a user passes
  (``AsyncLookupManager(backend, verdict_cache=VerdictCache(...))``),
  checked when it is made.
* :class:`VerdictMemory` is what the core keeps: one entry per key, the
  verdict and when it stops being served, least recently used first.

What enters it is decided by the core (``LookupCore.apply``): only a
backend's own answer for the generation that was asked (stored, or not
stored), never the MISS of a failure, a timeout, a saturated or dead worker
or a shed group, which is no fact about the store.  ``mark_miss`` forgets
the key.  The memory reads the time through a clock it is given (the
manager gives it ``time.monotonic``; tests give a number they advance), so
the core stays free of I/O and nothing here sleeps.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from kvprobe.spec.option_values import as_float
from kvprobe.statemachine.types import InvalidInputError, InvalidValueError

try:
    from mypy_extensions import mypyc_attr
except ImportError:  # a pure install: the decorator only speaks to mypyc
    _Class = TypeVar("_Class")

    def mypyc_attr(*_args: str, **_flags: bool) -> Callable[[_Class], _Class]:  # type: ignore[misc]
        return lambda cls: cls


__all__ = ["VerdictCache", "VerdictMemory"]


def _check_ttl(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidInputError(f"{name} must be a number of seconds, got {type(value).__name__}")
    seconds = as_float(value)  # an int too large for a float is infinite: refused below
    if not (0.0 <= seconds and math.isfinite(seconds)):
        raise InvalidValueError(f"{name} must be 0 or more and finite, got {value!r}")
    return seconds


# A plain Python class even in the compiled build: a native (mypyc) class
# checks and converts its fields' types itself (a bool stored as an int, a
# string refused with a plain TypeError) before __post_init__ could raise
# the InvalidInputError promised below.  It is read once, by VerdictMemory.
@mypyc_attr(native_class=False)
@dataclass(frozen=True)
class VerdictCache:
    """How the opt-in verdict cache remembers backend answers.

    Args:
        max_entries: the most keys remembered at once; a new entry beyond it
            evicts the least recently used one.
        hit_ttl_s: how long a "stored" answer is served without asking the
            backend again (0: stored answers are never remembered).
        miss_ttl_s: the same for a "not stored" answer, kept apart because a
            block missing now is likely to be written soon (0, the default:
            misses are never remembered).

    The time runs from when the scheduler applies the answer.  Within it, a
    remembered "stored" may be stale (another engine may have evicted the
    block); loading it then fails and the caller's ``mark_miss`` forgets it.

    Raises:
        InvalidInputError: ``max_entries`` is not an ``int`` or a TTL is not
            a number (``bool`` is refused for both).
        InvalidValueError: ``max_entries`` is below 1, a TTL is negative or
            not finite, or both TTLs are 0 (a cache that remembers nothing).
    """

    max_entries: int
    hit_ttl_s: float
    miss_ttl_s: float = 0.0

    def __post_init__(self) -> None:
        # The fields as given, read as ``object``: compiled code reading
        # ``self.max_entries`` would cast it to ``int`` (a bool to 1, a float
        # refused with a plain TypeError) before it could be checked.
        given: dict[str, object] = vars(self)
        max_entries = given["max_entries"]
        if isinstance(max_entries, bool) or not isinstance(max_entries, int):
            raise InvalidInputError(f"max_entries must be an int, got {type(max_entries).__name__}")
        if max_entries < 1:
            raise InvalidValueError(f"max_entries must be at least 1, got {max_entries}")
        hit = _check_ttl("hit_ttl_s", given["hit_ttl_s"])
        miss = _check_ttl("miss_ttl_s", given["miss_ttl_s"])
        if hit == 0.0 and miss == 0.0:
            raise InvalidValueError("hit_ttl_s and miss_ttl_s are both 0: the cache would remember nothing")
        object.__setattr__(self, "hit_ttl_s", hit)
        object.__setattr__(self, "miss_ttl_s", miss)


class VerdictMemory:
    """The remembered verdicts of one core: key -> (verdict, served until, generation), LRU first.

    The generation is that of the probe the backend answered: nothing here
    reads it; the property suite's abstraction does, to check each entry
    against what the backend said (``kvprobe.spec.model_cache``).

    Counters (read them, never write): ``recalled`` lookups served from
    memory, ``remembered`` answers stored, ``expired`` entries found past
    their time, ``evicted`` entries pushed out by the bound, ``forgotten``
    entries dropped by ``mark_miss``.

    Raises:
        InvalidInputError: ``config`` is not a :class:`VerdictCache` or
            ``clock`` is not callable.
    """

    # ``config`` is annotated ``object``: a compiled build would refuse
    # anything else with a plain TypeError before the InvalidInputError below.
    def __init__(self, config: object, clock: Callable[[], float]) -> None:
        if not isinstance(config, VerdictCache):
            raise InvalidInputError(f"verdict_cache must be a VerdictCache, got {type(config).__name__}")
        if not callable(clock):
            raise InvalidInputError(f"the verdict cache's clock must be callable, got {type(clock).__name__}")
        self.config = config
        self.clock = clock
        self._entries: OrderedDict[bytes, tuple[bool, float, int]] = OrderedDict()
        self.recalled = 0
        self.remembered = 0
        self.expired = 0
        self.evicted = 0
        self.forgotten = 0

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: object) -> bool:
        return key in self._entries

    def recall(self, key: bytes) -> bool | None:
        """The remembered verdict of ``key`` while it is fresh, else None (an expired one is dropped)."""
        entry = self._entries.get(key)
        if entry is None:
            return None
        verdict, until, _ = entry
        if self.clock() >= until:
            del self._entries[key]
            self.expired += 1
            return None
        self._entries.move_to_end(key)
        self.recalled += 1
        return verdict

    def remember(self, key: bytes, generation: int, verdict: bool) -> None:
        """Store the backend's answer for ``key``'s ``generation`` (replacing any older one), if its TTL is not 0."""
        self._entries.pop(key, None)
        ttl = self.config.hit_ttl_s if verdict else self.config.miss_ttl_s
        if ttl == 0.0:
            return
        self._entries[key] = (verdict, self.clock() + ttl, generation)
        self.remembered += 1
        if len(self._entries) > self.config.max_entries:
            self._entries.popitem(last=False)
            self.evicted += 1

    def forget(self, key: bytes) -> None:
        """Drop ``key``'s entry, if any (its load failed: the next lookup probes)."""
        if self._entries.pop(key, None) is not None:
            self.forgotten += 1

    def entries(self) -> list[tuple[bytes, bool, int, float]]:
        """Every entry as ``(key, verdict, generation, served until)``, least recently used first."""
        return [(key, verdict, generation, until) for key, (verdict, until, generation) in self._entries.items()]

    def clear(self) -> None:
        """Drop every entry (shutdown)."""
        self._entries.clear()
