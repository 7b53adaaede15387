"""The check of a number of seconds that a thread or a pipe must wait for.

One check for every timeout kvprobe takes: the manager's and its workers'
(bounded by ``threading.TIMEOUT_MAX``) and ``ProcessBackend``'s (bounded by
what a pipe's ``poll`` can wait).  A value above the bound is refused when
it is given: accepted, it would raise ``OverflowError`` at every wait, far
from the argument that caused it.
"""

from __future__ import annotations

import numbers

from kvprobe.spec.option_values import as_float

__all__ = ["PIPE_POLL_MAX_S", "check_seconds"]

#: The longest a pipe's ``poll`` can wait: its timeout becomes a C ``int``
#: of milliseconds (about 24.8 days).
PIPE_POLL_MAX_S = (2**31 - 1) / 1000


def check_seconds(
    name: str,
    value: object,
    *,
    limit: float,
    limit_name: str,
    zero_ok: bool = False,
    wrong_type: type[Exception] = TypeError,
    wrong_value: type[Exception] = ValueError,
) -> float:
    """``value`` as a float number of seconds, positive (or 0 with ``zero_ok``) and at most ``limit``.

    ``limit_name`` says in the message what the limit is; ``wrong_type`` and
    ``wrong_value`` are the errors the caller's contract promises.

    Raises:
        wrong_type: not a real number (``bool`` excluded).
        wrong_value: negative (or 0 without ``zero_ok``), not finite, or
            above ``limit``; the message names ``name`` and the limit.
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise wrong_type(f"{name} must be a number of seconds, got {type(value).__name__}")
    seconds = as_float(value)
    lowest = "0 or more" if zero_ok else "positive"
    if not ((0 <= seconds if zero_ok else 0 < seconds) and seconds <= limit):
        raise wrong_value(f"{name} must be {lowest} and finite, got {value!r} (at most {limit_name} = {limit:.3f} s)")
    return seconds
