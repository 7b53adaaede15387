"""The one conversion every numeric option goes through before its range is checked.

It lives at the bottom layer because both the core (window growth, cache
lifetimes) and the backends (timeouts, pace options) take numbers from
callers, and neither may import the other's modules.
"""

from __future__ import annotations

import math
import numbers

__all__ = ["as_float"]


def as_float(value: object) -> float:
    """``value`` (a real number) as a float; an int too large for one is an infinity of its sign.

    Why: ``float(10**400)`` raises ``OverflowError``.  Read as an infinity,
    such a value fails the range check of the option it was given for, whose
    error names that option.  The parameter is an ``object`` so that the
    compiled core, calling it, converts nothing at the call.

    Raises:
        TypeError: ``value`` is not a real number (callers check the type
            first, to name the option).
    """
    if isinstance(value, float):
        return value
    if isinstance(value, numbers.Real):
        try:
            return float(value)
        except OverflowError:
            return -math.inf if value < 0 else math.inf
    raise TypeError(f"a number was expected, got {type(value).__name__}")
