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
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar

from kvprobe.statemachine.types import ChainAnswer, HasReqId, InvalidInputError, Key

__all__ = ["ChainAnswer", "LookupResult", "PrefixVerdict", "as_lookup_result", "lookup_prefix", "prefix_verdict"]


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


@dataclass(frozen=True, slots=True)
class PrefixVerdict:
    """A request's leading stored blocks, in vLLM's terms (see the module docstring)."""

    result: LookupResult
    hits: int
    looked_up: int


def prefix_verdict(answer: ChainAnswer, n_keys: int) -> PrefixVerdict:
    """Reduce the :class:`~kvprobe.statemachine.types.ChainAnswer` of ``n_keys`` keys to a :class:`PrefixVerdict`."""
    if answer.pending:
        return PrefixVerdict(LookupResult.RETRY, answer.leading_hits, answer.looked_up)
    if answer.stopped_at_miss:
        return PrefixVerdict(LookupResult.MISS, answer.leading_hits, answer.looked_up)
    return PrefixVerdict(LookupResult.HIT, n_keys, answer.looked_up)


class _ChainLookups(Protocol):
    def lookup_chain(self, keys: Sequence[Key], req_context: HasReqId) -> ChainAnswer: ...


def lookup_prefix(manager: _ChainLookups, keys: Sequence[Key], req_context: HasReqId) -> PrefixVerdict:
    """Look up a request's ordered block keys; how many leading blocks are stored.

    ``manager`` is a kvprobe ``AsyncLookupManager`` (or anything with its
    ``lookup_chain(keys, req_context)``): the walk is its chain lookup.

    Raises:
        InvalidInputError: ``keys`` is a single ``bytes`` rather than a
            sequence of keys (nothing was looked up), or a key or the context
            is invalid (the keys before it were looked up).
        ManagerClosedError: the manager was shut down.
    """
    if isinstance(keys, (bytes, bytearray, memoryview, str)):
        raise InvalidInputError(f"lookup_prefix() takes a sequence of keys, got a single {type(keys).__name__}")
    return prefix_verdict(manager.lookup_chain(keys, req_context), len(keys))
