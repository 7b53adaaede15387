"""The windows of ``lookup_chain``: how far a request's walk may probe before it knows more.

A request's keys are a chain: the engine can use a block only if every block
before it is stored, so the answer it wants is the length of the stored
prefix.  Probing every key of a 3,600-block prompt costs 3,600 backend
checks even when only the first ten blocks are stored.  The walk therefore
probes the chain in windows that grow: with a first window of ``f`` keys
and a growth ``g`` (``chain_window_growth``, default 2), window ``k`` holds
``ceil(f * g**k)`` keys: for ``g = 2`` the windows are ``[0, f)``,
``[f, 3f)``, ``[3f, 7f)``, ... (each twice the one before).  A key is
looked up only when

* every key before its window is known stored (so the next window is
  submitted only once the previous ones all answered True), and
* no key before it is known NOT stored (the walk stops at the first miss).

Keys past the current window are not looked up at all: no state, no probe,
no backend work; the answer says the walk is not decided yet.  The window
is not stored anywhere: it follows from the position of the first key
whose verdict is unknown, so it lives in the request's own probe states and
is reclaimed with them (cleanup, shutdown), and a request that walks several
chains (one per KV-cache group) or a chain that grew needs no bookkeeping.

:data:`ALL` (``chain_window="all"``) is one window holding every key: the
walk of earlier releases, which looks up every key up to the first known
miss in its first call.

Costs (docs/chains.md; ``python -m bench.chains --part windows``): a stored
prefix of ``p`` keys is decided in one call more than there are windows up
to the one holding key ``p`` (the first key not stored), instead of 2, and
costs at most ``2p + f`` backend checks instead of the whole chain (with
growth ``g``: about ``g p + f``, in more windows: ``log_g(p / f)``).
"""

from __future__ import annotations

import math
from typing import Final

from kvprobe.spec.option_values import as_float
from kvprobe.statemachine.types import InvalidInputError, InvalidValueError

__all__ = [
    "ALL",
    "DEFAULT_CHAIN_WINDOW",
    "DEFAULT_CHAIN_WINDOW_GROWTH",
    "MAX_CHAIN_WINDOW_GROWTH",
    "chain_schedule",
    "chain_window_size",
    "start_backlog_of",
    "window_end",
    "window_growth",
    "window_name",
]

#: The first window size that means "one window: every key" (``chain_window="all"``).
ALL: Final = 0

#: The default first window: chains of up to 16 keys are walked exactly as
#: with ``"all"`` (decided in two calls); longer ones grow 16, 32, 64, ...
#: (docs/chains.md gives the figures behind the choice).
DEFAULT_CHAIN_WINDOW: Final = 16

#: The default growth: each window twice the one before (docs/chains.md
#: weighs 1.5 and 1.25, which probe fewer keys past the stored prefix but
#: take more windows, hence more calls, to decide).
DEFAULT_CHAIN_WINDOW_GROWTH: Final = 2.0

#: The largest growth accepted: past it the second window already holds
#: most long chains (a growth of 16 with a first window of 16 probes 256
#: keys next), so a larger value is a mistake rather than a schedule.
MAX_CHAIN_WINDOW_GROWTH: Final = 16.0


def chain_window_size(value: object) -> int:
    """The first window size a ``chain_window`` argument asks for (:data:`ALL` for ``"all"``).

    Raises:
        InvalidInputError: ``value`` is neither ``"all"`` nor an ``int``
            (a ``bool`` is refused too).
        InvalidValueError: an ``int`` below 1, or a string other than ``"all"``.
    """
    if isinstance(value, str):
        if value != "all":
            raise InvalidValueError(f"chain_window must be 'all' or a positive int, got {value!r}")
        return ALL
    if type(value) is not int:
        raise InvalidInputError(f"chain_window must be 'all' or a positive int, got {type(value).__name__}")
    if value < 1:
        raise InvalidValueError(f"chain_window must be at least 1 (the first window's keys), got {value}")
    return value


def window_growth(value: object) -> float:
    """The growth a ``chain_window_growth`` argument asks for, as a float.

    Raises:
        InvalidInputError: ``value`` is not an ``int`` or ``float`` (a
            ``bool`` is refused too).
        InvalidValueError: ``value`` is not above 1 or is above
            :data:`MAX_CHAIN_WINDOW_GROWTH` (NaN and infinities included).
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidInputError(f"chain_window_growth must be a float above 1, got {type(value).__name__}")
    growth = as_float(value)  # an int too large for a float is infinite: refused below
    # Written so that NaN fails it: every comparison with NaN is False.
    if not 1.0 < growth <= MAX_CHAIN_WINDOW_GROWTH:
        raise InvalidValueError(
            f"chain_window_growth must be above 1 and at most {MAX_CHAIN_WINDOW_GROWTH:g}, got {value!r}"
        )
    return growth


def chain_schedule(window: object, growth: object, tier_schedule: object = None) -> tuple[int, float]:
    """The first window and growth a manager walks chains with: each as asked, else the tier's, else the default.

    ``window`` and ``growth`` are the manager's ``chain_window`` and
    ``chain_window_growth`` arguments, None when not given;
    ``tier_schedule`` is the backend's ``chain_schedule`` attribute (a
    ``(first window, growth)`` pair: the walk its store is best served by),
    None when it has none.  A tier may ask for narrower windows than the
    default because its store throttles a fleet's HEADs past the stored
    prefix (the object tier); the caller's argument always wins.

    Raises:
        InvalidInputError, InvalidValueError: an argument, as
            :func:`chain_window_size` and :func:`window_growth` say.
        InvalidValueError: ``tier_schedule`` is not such a pair (the
            message names the backend's attribute).
    """
    first, grows = DEFAULT_CHAIN_WINDOW, DEFAULT_CHAIN_WINDOW_GROWTH
    if tier_schedule is not None:
        try:
            if not isinstance(tier_schedule, (tuple, list)) or len(tier_schedule) != 2:
                raise ValueError("not a pair")
            first, grows = chain_window_size(tier_schedule[0]), window_growth(tier_schedule[1])
        except (TypeError, ValueError) as exc:
            raise InvalidValueError(
                f"the backend's chain_schedule must be a (first window, growth) pair, got {tier_schedule!r}: {exc}"
            ) from None
    return (
        first if window is None else chain_window_size(window),
        grows if growth is None else window_growth(growth),
    )


def start_backlog_of(asked: object, tier_backlog: object = None) -> int | None:
    """``lookup_chain``'s start rule (:func:`kvprobe.statemachine.chain.starts_walk`): a backlog, or None (off).

    ``asked`` is the manager's ``start_backlog`` argument: None when not
    given (then the backend's ``start_backlog`` attribute, ``tier_backlog``,
    if it has one, else off), 0 for off, or the groups outstanding at which
    a request holding no probe waits to start its walk.

    Raises:
        InvalidInputError: ``asked`` is not an int (a bool neither).
        InvalidValueError: ``asked`` is negative, or ``tier_backlog`` is not
            an int of at least 1 (the message names the backend's attribute).
    """
    if asked is None:
        if tier_backlog is None:
            return None
        if isinstance(tier_backlog, bool) or not isinstance(tier_backlog, int) or tier_backlog < 1:
            raise InvalidValueError(f"the backend's start_backlog must be an int of at least 1, got {tier_backlog!r}")
        return tier_backlog
    if isinstance(asked, bool) or not isinstance(asked, int):
        raise InvalidInputError(f"start_backlog must be an int or None, got {type(asked).__name__}")
    if asked < 0:
        raise InvalidValueError(f"start_backlog must be 0 (off) or more, got {asked}")
    return asked or None


def window_name(first: int) -> int | str:
    """What a first window size was asked as: ``"all"`` for :data:`ALL`, else the size."""
    return "all" if first == ALL else first


def window_end(first: int, index: int, growth: float = DEFAULT_CHAIN_WINDOW_GROWTH) -> int:
    """The end (exclusive) of the window holding the key at ``index`` (0-based).

    ``first`` is the first window's size (at least 1), ``growth`` a value
    :func:`window_growth` accepted: window ``k`` holds
    ``ceil(first * growth**k)`` keys (computed in floating point), so for
    the default growth 2 windows end at ``f, 3f, 7f, ...``.  Not for
    :data:`ALL` (whose one window has no end).
    """
    end = first
    if growth == 2.0:
        # Exact in integers, and the walk of every manager left at the default.
        while end <= index:
            end = 2 * end + first
        return end
    # Each window holds at least one key more than the first (the ceiling of
    # more than ``first``), so the loop ends within ``index`` turns, and
    # ``growth**k`` stays below about ``index * growth`` (no overflow).
    k = 0
    while end <= index:
        k += 1
        end += math.ceil(first * growth**k)
    return end
