"""A thread pool that serves its callers in turn, not first come first served.

Why.  The object backend runs every group's chunks on one pool of NIXL
agents, and the manager runs several groups at once.  With a FIFO pool
(``concurrent.futures.ThreadPoolExecutor``) a 16-key group submitted just
after a 2,000-key group waits for all 125 of that group's chunks: one long
prompt delays every short one behind it, and at the deadline the short
group's keys read as MISS without ever being asked.  Here each caller
(each ``ChunkedLookup.run``, an *owner*) has its own queue, and a free
thread takes the next task of the next owner in turn (round robin), so a
small group waits for at most one chunk of each other group.

:class:`RoundRobin` is the queue discipline alone (no threads, no clock): the
pool uses it, and so does the fleet simulator (``bench.fleet``).

A pool may also bound the **weight** of what runs at once (``capacity``):
the object backend weighs a query by its HEADs, so that many small queries
run at once where a few large ones would (HEADs in flight, not queries, are
what the store serves and what a random loss leaves unanswered).
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Hashable
from concurrent.futures import Future
from typing import Any, Generic, TypeVar

__all__ = ["FairPool", "RoundRobin"]

OwnerT = TypeVar("OwnerT", bound=Hashable)
ItemT = TypeVar("ItemT")


class RoundRobin(Generic[OwnerT, ItemT]):
    """Items queued per owner; :meth:`take` serves the owners in turn, each owner's items in order."""

    def __init__(self) -> None:
        # Dict order is the turn order: the owner served goes to the back.
        self._queues: dict[OwnerT, deque[ItemT]] = {}
        self._size = 0

    def put(self, owner: OwnerT, item: ItemT) -> None:
        """Queue ``item`` behind ``owner``'s earlier items; a new owner joins at the back of the turn."""
        queue = self._queues.get(owner)
        if queue is None:
            queue = self._queues[owner] = deque()
        queue.append(item)
        self._size += 1

    def take(self) -> tuple[OwnerT, ItemT]:
        """The next owner's oldest item.

        Raises:
            IndexError: nothing is queued.
        """
        if not self._queues:
            raise IndexError("take from an empty RoundRobin")
        owner = next(iter(self._queues))
        queue = self._queues.pop(owner)
        item = queue.popleft()
        if queue:
            self._queues[owner] = queue
        self._size -= 1
        return owner, item

    def peek(self) -> ItemT:
        """The item :meth:`take` would return, left queued.

        Raises:
            IndexError: nothing is queued.
        """
        if not self._queues:
            raise IndexError("peek into an empty RoundRobin")
        return next(iter(self._queues.values()))[0]

    def clear(self) -> list[ItemT]:
        """Remove and return every queued item."""
        items = [item for queue in self._queues.values() for item in queue]
        self._queues.clear()
        self._size = 0
        return items

    def __len__(self) -> int:
        return self._size


_Task = tuple["Future[Any]", Callable[..., Any], tuple[Any, ...], int]


class FairPool:
    """``workers`` daemon threads running submitted calls, owners served in turn.

    A task whose future was cancelled before its turn is skipped.  After
    :meth:`shutdown`, queued tasks are cancelled and :meth:`submit` raises
    ``RuntimeError``; a task already running finishes in its thread.

    Args:
        workers: threads, the most tasks running at once.
        name: the threads' name prefix.
        capacity: the most total weight running at once (None: no bound).
            The next task in turn waits until its weight fits; a task
            heavier than ``capacity`` runs alone.  The turn is kept: a
            light task never overtakes a heavy one waiting for room, so a
            heavy one cannot starve.

    Raises:
        ValueError: ``workers`` or ``capacity`` is below 1.
    """

    def __init__(self, workers: int, name: str, capacity: int | None = None) -> None:
        if workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers}")
        if capacity is not None and capacity < 1:
            raise ValueError(f"capacity must be >= 1 or None, got {capacity}")
        self._cond = threading.Condition()
        self._queue: RoundRobin[Hashable, _Task] = RoundRobin()
        self._capacity = capacity
        self._running_weight = 0
        self._closed = False
        for i in range(workers):
            # Daemon: a thread blocked in a hung request must not keep the
            # interpreter from exiting (the deadline has long given up on it).
            threading.Thread(target=self._work, name=f"{name}-{i}", daemon=True).start()

    def submit(self, owner: Hashable, fn: Callable[..., Any], *args: Any, weight: int = 1) -> Future[Any]:
        """Queue ``fn(*args)``, of ``weight`` against the capacity, behind ``owner``'s earlier tasks.

        Raises:
            RuntimeError: the pool was shut down.
        """
        future: Future[Any] = Future()
        with self._cond:
            if self._closed:
                raise RuntimeError("the pool was shut down")
            self._queue.put(owner, (future, fn, args, weight))
            self._cond.notify()
        return future

    def shutdown(self) -> None:
        """Cancel what has not started and let the threads end.  Idempotent."""
        with self._cond:
            self._closed = True
            for future, _, _, _ in self._queue.clear():
                future.cancel()
            self._cond.notify_all()

    @property
    def running_weight(self) -> int:
        """The total weight of the tasks running now."""
        with self._cond:
            return self._running_weight

    def _fits(self) -> bool:
        """The next task in turn may start now (called with the lock held, the queue not empty)."""
        if self._capacity is None or self._running_weight == 0:
            return True
        return self._running_weight + self._queue.peek()[3] <= self._capacity

    def _work(self) -> None:
        while True:
            with self._cond:
                while not self._closed and not (self._queue and self._fits()):
                    self._cond.wait()
                if not self._queue:
                    return  # closed and drained
                _, (future, fn, args, weight) = self._queue.take()
                if not future.set_running_or_notify_cancel():
                    self._cond.notify()  # cancelled before its turn: the next one may fit
                    continue
                self._running_weight += weight
            try:
                result = fn(*args)
            except BaseException as exc:  # handed to the caller through the future
                future.set_exception(exc)
            else:
                future.set_result(result)
            finally:
                with self._cond:
                    self._running_weight -= weight
                    self._cond.notify_all()  # room for the next task in turn
