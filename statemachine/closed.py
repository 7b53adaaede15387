"""The tables a core holds after shutdown: empty to read, raising on use.

Shutdown swaps the core's probe table, request index, step batch and inbox
for these.  Every action reaches one of them before it changes anything, so
after shutdown every path into the core raises :class:`ManagerClosedError`:
the manager's methods, a ``lookup`` bound before shutdown (the manager hands
out the core's own bound method), and a call racing the shutdown from
another thread (each write reads the table attribute afresh, so a call that
began before the swap fails at its next write).  The common path pays
nothing: nothing is tested per call, the tables themselves refuse.

Observers still work: ``len()``, iteration and ``items()`` see empty tables,
so ``len(m) == 0`` and the counters stay readable.
"""

from __future__ import annotations

from collections import deque
from typing import Any, NoReturn

from kvprobe.statemachine.types import ManagerClosedError

__all__ = ["ClosedInbox", "ClosedList", "ClosedTable"]


class ClosedTable(dict[Any, Any]):
    """An empty dict whose lookups and writes raise ManagerClosedError."""

    def __init__(self, message: str) -> None:
        super().__init__()
        self.message = message

    def _closed(self, *args: object) -> NoReturn:
        raise ManagerClosedError(self.message)

    get = __getitem__ = __setitem__ = __contains__ = setdefault = pop = _closed


class ClosedList(list[Any]):
    """An empty list whose append raises ManagerClosedError."""

    def __init__(self, message: str) -> None:
        super().__init__()
        self.message = message

    def _closed(self, *args: object) -> NoReturn:
        raise ManagerClosedError(self.message)

    append = extend = _closed


class ClosedInbox(deque[Any]):
    """An empty deque whose truth test (``if self.inbox``, each action's first step) raises."""

    def __init__(self, message: str) -> None:
        super().__init__()
        self.message = message

    def __bool__(self) -> bool:
        raise ManagerClosedError(self.message)
