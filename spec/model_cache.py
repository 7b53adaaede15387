"""The opt-in verdict cache in the reference model (docs/cache.md): memory, time, provenance.

The model's memory is what ``kvprobe.statemachine.verdict_cache.VerdictMemory``
keeps, written as a tuple of :class:`~kvprobe.spec.model_state.Remembered`
entries, least recently used first, each with the generation whose backend
answer it holds (history: the implementation keeps it too, so the
abstraction reads it).  Time is a number in the state (``now``) that only
:func:`tick` advances, as the clock rule of the property suite does.

The scheduler's actions (:mod:`kvprobe.spec.model`) call these functions:
a Lookup of a key without a state asks :func:`recall`; a drain that applies
a backend's own answer to the generation that was asked calls
:func:`remember`; MarkMiss calls :func:`forget`; Shutdown empties the memory.
The invariants of :data:`CACHE_INVARIANTS` say what may be remembered.
None of these functions raises unless its docstring says so.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import replace

from kvprobe.spec.model_state import Key, ModelError, Remembered, State

__all__ = ["CACHE_INVARIANTS", "CacheAnswerApplied", "CacheProvenance", "forget", "recall", "remember", "tick"]


def recall(s: State, key: Key, fresh: bool | None = None) -> tuple[State, Remembered | None]:
    """The entry a Lookup of ``key`` (no state held) is answered from, or None: probe.

    ``fresh`` None: the entry is served while ``now`` is before its end (as
    the implementation's clock decides); True or False: the caller says (a
    replayed trace tells whether the implementation served it).  An entry
    not served is dropped (the implementation drops an expired entry when it
    finds it); a served one becomes the most recently used.

    Raises:
        ModelError: ``fresh`` is True but no entry is held for ``key``.
    """
    entry = next((e for e in s.memory if e.key == key), None)
    if entry is None:
        if fresh:
            raise ModelError(f"Lookup: {key.hex()} was answered from memory, but nothing is remembered for it")
        return s, None
    rest = tuple(e for e in s.memory if e.key != key)
    served = s.now < entry.until if fresh is None else fresh
    return replace(s, memory=(*rest, entry) if served else rest), entry if served else None


def remember(s: State, key: Key, gen: int, verdict: bool) -> State:
    """The memory after the backend answered ``verdict`` for generation ``gen`` of ``key``.

    Any older entry of the key is replaced; a verdict whose TTL is 0 is not
    stored; past ``max_entries`` the least recently used entry is evicted.
    """
    spec = s.cache
    if spec is None:
        return s
    memory = tuple(e for e in s.memory if e.key != key)
    ttl = spec.hit_ttl if verdict else spec.miss_ttl
    if ttl > 0:
        memory = (*memory, Remembered(key, verdict, gen, s.now + ttl))[-spec.max_entries :]
    return replace(s, memory=memory)


def forget(s: State, keys: Iterable[Key]) -> State:
    """The memory without ``keys`` (MarkMiss); the forgotten answers join ``invalidated``."""
    gone = set(keys)
    dropped = {(e.key, e.gen) for e in s.memory if e.key in gone}
    if not dropped:
        return s
    return replace(s, memory=tuple(e for e in s.memory if e.key not in gone), invalidated=s.invalidated | dropped)


def tick(s: State, seconds: float) -> State:
    """Time passes (the clock rule).

    Raises:
        ModelError: ``seconds`` is negative (a monotonic clock never goes back).
    """
    if seconds < 0:
        raise ModelError(f"Tick: time does not go back ({seconds})")
    return replace(s, now=s.now + seconds)


def _answered(s: State, entry: Remembered) -> bool:
    """The backend's own in-time answer for the entry's generation is the entry's verdict."""
    answers = s.backend_hits if entry.verdict else s.backend_misses
    return (entry.key, entry.gen) in answers


def CacheProvenance(s: State) -> bool:
    """Every remembered verdict is the backend's answer for that key, not forgotten since, within the bound.

    A remembered True is a backend "stored" for the entry's generation, a
    remembered False a backend "not stored" (never a failure's MISS); no
    entry survives the MarkMiss that forgot it (``invalidated``); one entry
    per key, at most ``max_entries``.  And every state answered from memory
    (``recalled``: its generation -> the generation remembered) holds the
    backend's answer for the generation it was recalled from, unless a
    forced miss hit it since.
    """
    keys = [e.key for e in s.memory]
    if len(keys) != len(set(keys)) or (s.cache is None and keys):
        return False
    if s.cache is not None and len(keys) > s.cache.max_entries:
        return False
    if any(not _answered(s, e) or (e.key, e.gen) in s.invalidated for e in s.memory):
        return False
    for (key, gen), source in s.recalled.items():
        probe = s.probes.get(key)
        if probe is None or probe.gen != gen or (key, gen) in s.forced:
            continue
        if (key, source) not in (s.backend_hits if probe.verdict else s.backend_misses):
            return False
    return True


def CacheAnswerApplied(s: State) -> bool:
    """Every remembered verdict was applied to its own generation's state.

    Never the answer of a generation a forced miss made moot while it was in
    flight (``moot``, written by MarkMiss), and always the first outcome
    published for its probe (``told``), never a late answer after a timeout.
    Neither is written by the drain that remembers.
    """
    return all((e.key, e.gen) not in s.moot and s.told.get((e.key, e.gen)) == e.verdict for e in s.memory)


#: The cache's invariants by name (docs/cache.md; checked beside ``model.INVARIANTS``).
CACHE_INVARIANTS: dict[str, Callable[[State], bool]] = {
    "CacheProvenance": CacheProvenance,
    "CacheAnswerApplied": CacheAnswerApplied,
}
