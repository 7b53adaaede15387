"""The windows of ``lookup_chain``: how far a request's walk may probe before it knows more.

A request's keys are a chain: the engine can use a block only if every block
before it is stored, so the answer it wants is the length of the stored
prefix.  Probing every key of a 3,600-block prompt costs 3,600 backend
checks even when only the first ten blocks are stored.  The walk therefore
probes the chain in windows that grow: with a first window of ``f`` keys,
the windows are ``[0, f)``, ``[f, 3f)``, ``[3f, 7f)``, ... (each twice the
one before), and a key is looked up only when

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
costs at most ``2p + f`` backend checks instead of the whole chain.
"""

from __future__ import annotations

from typing import Final

from kvprobe.statemachine.types import InvalidInputError, InvalidValueError

__all__ = ["ALL", "DEFAULT_CHAIN_WINDOW", "chain_window_size", "window_end", "window_name"]

#: The first window size that means "one window: every key" (``chain_window="all"``).
ALL: Final = 0

#: The default first window: chains of up to 16 keys are walked exactly as
#: with ``"all"`` (decided in two calls); longer ones grow 16, 32, 64, ...
#: (docs/chains.md gives the figures behind the choice).
DEFAULT_CHAIN_WINDOW: Final = 16


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


def window_name(first: int) -> int | str:
    """What a first window size was asked as: ``"all"`` for :data:`ALL`, else the size."""
    return "all" if first == ALL else first


def window_end(first: int, index: int) -> int:
    """The end (exclusive) of the window holding the key at ``index`` (0-based).

    ``first`` is the first window's size (at least 1): windows end at
    ``f, 3f, 7f, ...``.  Not for :data:`ALL` (whose one window has no end).
    """
    end = first
    while end <= index:
        end = 2 * end + first
    return end
