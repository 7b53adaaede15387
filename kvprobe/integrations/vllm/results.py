"""From kvprobe verdicts to vLLM's lookup result kinds.

vLLM's offloading managers answer a lookup with a ``LookupResult``: ``HIT``
(stored and readable), ``MISS`` (not stored), ``RETRY`` (not known yet: ask
again next step), and ``HIT_PENDING`` (stored but not readable yet, which an
existence check never says).  A secondary tier maps its lookup manager's
``True`` / ``False`` / ``None`` one to one (:func:`as_lookup_result`).

The scheduler wants more than one block: how many *leading* blocks of a
request's prompt it can load.  :func:`lookup_prefix` walks the request's
ordered keys with the chain lookup (the single ``lookup`` of each key, in
order, stopping after the first key known not stored, so every key before it
joins this step's batch) and reduces the walk to a :class:`PrefixVerdict`:

* ``HIT``: every key is stored (``hits == len(keys)``);
* ``MISS``: the first ``hits`` keys are stored and ``keys[hits]`` is not;
* ``RETRY``: some key before the first known miss has no verdict yet; ``hits``
  counts the leading keys already known stored.  Ask again next step.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar

from kvprobe.statemachine.types import HasReqId, InvalidInputError, Key

__all__ = ["ChainAnswer", "LookupResult", "PrefixVerdict", "as_lookup_result", "lookup_chain", "lookup_prefix"]


class LookupResult(enum.Enum):
    """vLLM's lookup result kinds, by the same names (vLLM is not imported)."""

    MISS = enum.auto()
    HIT = enum.auto()
    HIT_PENDING = enum.auto()
    RETRY = enum.auto()


Kind = TypeVar("Kind", bound=enum.Enum)


def as_lookup_result(verdict: bool | None, kinds: type[Kind] = LookupResult) -> Kind:  # type: ignore[assignment]
    """``True`` -> ``HIT``, ``False`` -> ``MISS``, ``None`` -> ``RETRY``, as members of ``kinds``.

    ``kinds`` is any enum with members named ``HIT``, ``MISS`` and ``RETRY``;
    inside vLLM pass ``vllm.v1.kv_offload.base.LookupResult``.

    Raises:
        InvalidInputError: ``verdict`` is not True, False or None.
    """
    if verdict is None:
        return kinds["RETRY"]
    if verdict is True:
        return kinds["HIT"]
    if verdict is False:
        return kinds["MISS"]
    raise InvalidInputError(f"a verdict is True, False or None, got {type(verdict).__name__}")


# until lookup_chain lands: the lead replaces this class with
# kvprobe.statemachine.types.ChainAnswer (same fields, same meaning).
@dataclass(frozen=True, slots=True)
class ChainAnswer:
    """What a chain lookup learned about a request's ordered keys.

    ``leading_hits``: keys known stored before the first key that is not;
    ``stopped_at_miss``: the walk met a key known NOT stored and looked up
    nothing after it; ``pending``: some key before the stop is not known yet
    (ask again next step); ``looked_up``: keys looked up.
    """

    leading_hits: int
    stopped_at_miss: bool
    pending: bool
    looked_up: int


# until lookup_chain lands: the lead replaces calls of this function with
# AsyncLookupManager.lookup_chain(keys, req_context) (same semantics).
def lookup_chain(
    lookup: Callable[[Key, HasReqId], bool | None], keys: Sequence[Key], req_context: HasReqId
) -> ChainAnswer:
    """The single ``lookup(key, req_context)`` of each key in order, stopping after the first False.

    Raises:
        InvalidInputError: from ``lookup`` (a bad key or context); the keys
            before it were looked up.
    """
    leading = 0
    in_lead = True
    pending = False
    looked_up = 0
    for key in keys:
        verdict = lookup(key, req_context)
        looked_up += 1
        if verdict is False:
            return ChainAnswer(leading, True, pending, looked_up)
        if verdict is None:
            pending = True
            in_lead = False
        elif in_lead:
            leading += 1
    return ChainAnswer(leading, False, pending, looked_up)


@dataclass(frozen=True, slots=True)
class PrefixVerdict:
    """A request's leading stored blocks, in vLLM's terms (see the module docstring)."""

    result: LookupResult
    hits: int
    looked_up: int


def prefix_verdict(answer: ChainAnswer, n_keys: int) -> PrefixVerdict:  # until lookup_chain lands: types.ChainAnswer
    """Reduce a chain lookup of ``n_keys`` keys to a :class:`PrefixVerdict`."""
    if answer.pending:
        return PrefixVerdict(LookupResult.RETRY, answer.leading_hits, answer.looked_up)
    if answer.stopped_at_miss:
        return PrefixVerdict(LookupResult.MISS, answer.leading_hits, answer.looked_up)
    return PrefixVerdict(LookupResult.HIT, n_keys, answer.looked_up)


class _Lookups(Protocol):
    def lookup(self, key: Key, req_context: HasReqId) -> bool | None: ...


def lookup_prefix(manager: _Lookups, keys: Sequence[Key], req_context: HasReqId) -> PrefixVerdict:
    """Look up a request's ordered block keys; how many leading blocks are stored.

    ``manager`` is a kvprobe ``AsyncLookupManager`` (its chain lookup is
    used when it has one) or anything with a ``lookup(key, req_context)``.

    Raises:
        InvalidInputError: ``keys`` is a single ``bytes`` rather than a
            sequence of keys (nothing was looked up), or a key or the context
            is invalid (the keys before it were looked up).
        ManagerClosedError: the manager was shut down.
    """
    if isinstance(keys, (bytes, bytearray, memoryview, str)):
        raise InvalidInputError(f"lookup_prefix() takes a sequence of keys, got a single {type(keys).__name__}")
    chain = getattr(manager, "lookup_chain", None)
    if callable(chain):
        answer = chain(keys, req_context)
    else:
        answer = lookup_chain(manager.lookup, keys, req_context)  # until lookup_chain lands
    return prefix_verdict(answer, len(keys))
