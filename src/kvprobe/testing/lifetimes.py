"""Check that nothing a manager started outlives its shutdown.

A manager starts threads (the worker's dispatcher and caller threads) and,
through :class:`~kvprobe.backends.process.ProcessBackend`, helper processes.
After ``shutdown()`` (and the backend's ``close()``) every one of them must
end.  The check is a difference of snapshots of the whole process: it does
not trust the worker's own bookkeeping, so a thread the worker forgot about
is caught too.  Threads and processes that existed before the snapshot are
ignored (other tests, pytest's own).
"""

from __future__ import annotations

import multiprocessing
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

__all__ = ["Lifetimes", "nothing_outlives"]

#: How long threads and processes may take to end after shutdown (their last
#: call returning, a helper exiting); generous because the machine is shared.
END_BOUND_S = 10.0


@dataclass
class Lifetimes:
    """A snapshot of the threads and child processes alive now.

    ``prefix`` limits the check to threads and processes whose name starts
    with it (``"kvprobe-"``: the worker's threads and ``ProcessBackend``'s
    helpers), so that a third-party backend's own threads, which live as
    long as the backend, are not taken for the manager's.
    """

    prefix: str = ""
    threads: set[threading.Thread] = field(default_factory=lambda: set(threading.enumerate()))
    processes: set[int] = field(default_factory=lambda: {p.pid or 0 for p in multiprocessing.active_children()})

    def survivors(self) -> list[str]:
        """Threads and child processes started since the snapshot that are still alive."""
        prefix = self.prefix
        alive = [
            f"thread {t.name!r}"
            for t in threading.enumerate()
            if t not in self.threads and t.is_alive() and t.name.startswith(prefix)
        ]
        alive += [
            f"process {p.name!r} pid {p.pid}"
            for p in multiprocessing.active_children()
            if (p.pid or 0) not in self.processes and p.name.startswith(prefix)
        ]
        return alive

    def assert_ended(self, bound_s: float = END_BOUND_S) -> None:
        """Wait up to ``bound_s`` for everything started since the snapshot to end.

        Raises:
            AssertionError: naming every thread and process still alive then.
        """
        deadline = time.monotonic() + bound_s
        while True:
            left = self.survivors()
            if not left:
                return
            if time.monotonic() > deadline:
                raise AssertionError(f"still alive {bound_s} s after shutdown: {', '.join(left)}")
            time.sleep(0.01)


@contextmanager
def nothing_outlives(bound_s: float = END_BOUND_S) -> Iterator[Lifetimes]:
    """Around a block that creates and shuts down managers: afterwards every thread and
    helper process started inside it must end within ``bound_s``.

    Raises:
        AssertionError: naming what is still alive (only if the block itself succeeded).
    """
    snapshot = Lifetimes()
    yield snapshot
    snapshot.assert_ended(bound_s)
