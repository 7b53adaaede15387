"""From kvprobe verdicts to vLLM's lookup result kinds.

vLLM's offloading managers answer a lookup with a ``LookupResult``: ``HIT``
(stored and readable), ``MISS`` (not stored), ``RETRY`` (not known yet: ask
again next step), and ``HIT_PENDING`` (stored but not readable yet, which an
existence check never says).  :func:`as_lookup_result` maps what kvprobe
answered to those kinds, one to one:

* a single ``lookup``'s ``True`` / ``False`` / ``None`` -> ``HIT`` / ``MISS``
  / ``RETRY``;
* a chain lookup's :class:`~kvprobe.statemachine.types.ChainAnswer` (a
  request's ordered keys, looked up in order and stopping after the first key
  known not stored; ``lookup_chain`` on either ``AsyncLookupManager``) ->
  ``HIT`` when every key is stored, ``MISS`` when the walk stopped at a key
  known not stored (``leading_hits`` keys before it are stored), ``RETRY``
  when a key before the stop has no verdict yet (ask again next step).
"""

from __future__ import annotations

import enum
from typing import TypeVar

from kvprobe.statemachine.types import ChainAnswer, InvalidInputError

__all__ = ["ChainAnswer", "LookupResult", "as_lookup_result"]


class LookupResult(enum.Enum):
    """vLLM's lookup result kinds, by the same names (vLLM is not imported)."""

    MISS = enum.auto()
    HIT = enum.auto()
    HIT_PENDING = enum.auto()
    RETRY = enum.auto()


Kind = TypeVar("Kind", bound=enum.Enum)


def as_lookup_result(answer: bool | ChainAnswer | None, kinds: type[Kind] = LookupResult) -> Kind:  # type: ignore[assignment]
    """A verdict or a chain answer as a member of ``kinds`` (see the module docstring).

    ``kinds`` is any enum with members named ``HIT``, ``MISS`` and ``RETRY``;
    inside vLLM pass ``vllm.v1.kv_offload.base.LookupResult``.

    Raises:
        InvalidInputError: ``answer`` is not True, False, None or a
            :class:`~kvprobe.statemachine.types.ChainAnswer`.
    """
    if isinstance(answer, ChainAnswer):
        if answer.pending:
            return kinds["RETRY"]
        return kinds["MISS"] if answer.stopped_at_miss else kinds["HIT"]
    if answer is None:
        return kinds["RETRY"]
    if answer is True:
        return kinds["HIT"]
    if answer is False:
        return kinds["MISS"]
    raise InvalidInputError(f"an answer is True, False, None or a ChainAnswer, got {type(answer).__name__}")
