"""kvprobe's own keys in a vLLM tier config, read and checked before anything is built.

vLLM's ``SecondaryTierFactory`` hands every key of a tier's config (but
``type`` and ``module_path``) to the tier class as a keyword argument.  The
keys vLLM's own tiers know go to vLLM's constructor unchanged; the keys
below are kvprobe's, plain JSON values, and this module turns them into the
arguments of kvprobe's manager and backend.  A wrong value raises
:class:`TierConfigError` naming the key, before any thread, agent or file is
created.  This module imports no vLLM, so it is testable without it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, TypeVar, cast

from kvprobe.backends._host_pace import PACE_SCOPES
from kvprobe.statemachine.inferred import chain_mode_name
from kvprobe.statemachine.types import InvalidInputError, InvalidValueError
from kvprobe.statemachine.verdict_cache import VerdictCache
from kvprobe.statemachine.worker_base import check_timeout

__all__ = [
    "FS_DEFAULT_LOOKUP_TIMEOUT_S",
    "OBJ_DEFAULT_DEADLINE_S",
    "ObjLookupOptions",
    "TierConfigError",
    "TierLookupOptions",
    "obj_default_timeout",
    "obj_lookup_options",
    "tier_lookup_options",
]

#: The object tier's backend answers every lookup call within this many seconds (NixlObjBackend ``deadline_s``).
OBJ_DEFAULT_DEADLINE_S = 5.0
#: How much later than the backend's deadline the manager gives up on a call: the backend always returns first.
_TIMEOUT_MARGIN_S = 0.5
#: The filesystem tier's default ``lookup_timeout_s``: a hung mount answers MISS instead of stalling requests.
FS_DEFAULT_LOOKUP_TIMEOUT_S = 10.0
#: Verdict cache size when a TTL is set and ``cache_max_entries`` is not.
_DEFAULT_CACHE_ENTRIES = 100_000

_T = TypeVar("_T")


class TierConfigError(InvalidValueError):
    """A kvprobe key of a vLLM tier config has a value kvprobe cannot use.

    Attributes:
        key: the config key at fault.
    """

    def __init__(self, key: str, problem: str) -> None:
        super().__init__(f"tier config key {key!r}: {problem}")
        self.key = key


@dataclass(frozen=True)
class TierLookupOptions:
    """The manager's options, as read from a tier config.

    Attributes:
        chain_mode: ``"exact"`` or ``"inferred"`` (the manager's option of that name).
        lookup_timeout_s: a backend call slower than this answers MISS for its keys.
        verdict_cache: None (every request probes afresh, as vLLM's tiers do) or the cache's settings.
    """

    chain_mode: Literal["exact", "inferred"]
    lookup_timeout_s: float
    verdict_cache: VerdictCache | None


@dataclass(frozen=True)
class ObjLookupOptions:
    """The object tier's backend options, as read from a tier config.

    Attributes:
        deadline_s: each lookup call returns within this (keys unanswered read MISS).
        pace_scope: ``"host"`` or ``"process"``: who shares the store's pace.
        threads: HEADs in flight per tier.
    """

    deadline_s: float
    pace_scope: str
    threads: int


def _read(key: str, value: object, check: Callable[[object], _T]) -> _T:
    try:
        return check(value)
    except (InvalidInputError, InvalidValueError) as exc:
        raise TierConfigError(key, str(exc)) from exc


def _ttl(key: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < math.inf:
        raise TierConfigError(key, f"must be a finite number of seconds, 0 or more, got {value!r}")
    return float(value)


def _count(key: str, value: object, top: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= top:
        raise TierConfigError(key, f"must be an integer in [1, {top}], got {value!r}")
    return value


def tier_lookup_options(
    *,
    chain_mode: object,
    lookup_timeout_s: object,
    default_timeout_s: float,
    cache_hit_ttl_s: object,
    cache_miss_ttl_s: object,
    cache_max_entries: object,
) -> TierLookupOptions:
    """Check the manager's keys of a tier config.

    Args:
        chain_mode: ``"exact"`` or ``"inferred"``.
        lookup_timeout_s: seconds, or None for ``default_timeout_s``.
        default_timeout_s: the tier's default timeout.
        cache_hit_ttl_s, cache_miss_ttl_s: seconds (0: not remembered); both
            0 (the default) keeps no verdict cache.
        cache_max_entries: the cache's bound, or None for 100,000.

    Raises:
        TierConfigError: a value of the wrong type or out of range (the
            message names the key).
    """
    mode = _read("chain_mode", chain_mode, chain_mode_name)
    timeout = (
        default_timeout_s
        if lookup_timeout_s is None
        else _read("lookup_timeout_s", lookup_timeout_s, lambda v: check_timeout("lookup_timeout_s", v))
    )
    hit = _ttl("cache_hit_ttl_s", cache_hit_ttl_s)
    miss = _ttl("cache_miss_ttl_s", cache_miss_ttl_s)
    cache = None
    if hit or miss:
        entries = _DEFAULT_CACHE_ENTRIES if cache_max_entries is None else cache_max_entries
        cache = VerdictCache(_count("cache_max_entries", entries, 10**9), hit, miss)
    elif cache_max_entries is not None:
        raise TierConfigError("cache_max_entries", "is set but no TTL is: the cache would remember nothing")
    return TierLookupOptions(cast(Literal["exact", "inferred"], mode), timeout, cache)


def obj_lookup_options(*, lookup_deadline_s: object, pace_scope: object, lookup_threads: object) -> ObjLookupOptions:
    """Check the object tier's backend keys of a tier config.

    Raises:
        TierConfigError: a value of the wrong type or out of range (the
            message names the key).
    """
    deadline = _read("lookup_deadline_s", lookup_deadline_s, lambda v: check_timeout("lookup_deadline_s", v))
    if deadline > 3600:
        raise TierConfigError("lookup_deadline_s", f"must be at most 3600 seconds, got {lookup_deadline_s!r}")
    if pace_scope not in PACE_SCOPES:
        raise TierConfigError("pace_scope", f"must be one of {list(PACE_SCOPES)}, got {pace_scope!r}")
    return ObjLookupOptions(deadline, pace_scope, _count("lookup_threads", lookup_threads, 1024))


def obj_default_timeout(options: ObjLookupOptions) -> float:
    """The object tier's ``lookup_timeout_s`` when the config gives none: a little past the backend's deadline."""
    return options.deadline_s + _TIMEOUT_MARGIN_S
