"""The backend as a worker holds it: through the manager, never keeping the manager alive.

A manager dropped without ``shutdown`` stops its worker from a finalizer,
which runs only once the manager is unreachable.  The worker's threads live
until then, and the finalizer itself holds the worker.  If the worker held
the backend, a backend that refers back to its manager (the vLLM drop-in is
its own backend; any tier may keep its manager) would keep the manager
reachable from those threads for ever, and the finalizer would never run.

So the manager holds the backend in a :class:`BackendAnchor` that nothing
else refers to, and hands the worker a :class:`WeakBackend`: a weak
reference to the anchor that forwards every attribute to the backend,
looking it up again at each use.  While a call runs, the calling thread
holds the backend (and so the manager); between calls nothing of the
worker does.  Once the manager is collected, the link is dead and a use
raises :class:`~kvprobe.statemachine.types.ManagerClosedError` (the worker
was abandoned by then: what it publishes is discarded).
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable, Sequence
from functools import partial
from typing import Any

from kvprobe.backends.base import Backend, Key
from kvprobe.statemachine.types import ManagerClosedError

__all__ = ["BackendAnchor", "WeakBackend"]


class BackendAnchor:
    """Holds the backend for its manager; the only strong reference a worker's link leads to."""

    __slots__ = ("__weakref__", "backend")

    def __init__(self, backend: Backend) -> None:
        self.backend = backend


class WeakBackend:
    """A worker's handle on its manager's backend: every attribute forwarded, nothing held.

    A callable attribute is returned as a forwarder that looks the backend
    up at each call, so a worker may keep it (the CPU gate keeps
    ``cpu_seconds_of``) without keeping the backend alive.

    Args:
        anchor: the manager's anchor of the backend.
    """

    __slots__ = ("_anchor", "_described")

    def __init__(self, anchor: BackendAnchor) -> None:
        self._anchor = weakref.ref(anchor)
        self._described = type(anchor.backend).__name__

    def target(self) -> Backend:
        """The backend itself.

        Raises:
            ManagerClosedError: the manager that held it was collected.
        """
        anchor = self._anchor()
        if anchor is None:
            raise ManagerClosedError(f"the manager of this {self._described} backend was garbage-collected")
        return anchor.backend

    def batch_lookup(self, keys: Sequence[Key], req_context: object) -> Iterable[bool]:
        """The backend's ``batch_lookup`` (what it raises, raised; ManagerClosedError once collected)."""
        return self.target().batch_lookup(keys, req_context)

    def __getattr__(self, name: str) -> Any:
        """The backend's attribute ``name``; a callable one as a forwarder holding no reference.

        Raises:
            AttributeError: the backend has no such attribute.
            ManagerClosedError: the manager that held it was collected.
        """
        attribute = getattr(self.target(), name)
        if callable(attribute):
            return partial(self._forward, name)
        return attribute

    def _forward(self, name: str, *args: Any, **kwargs: Any) -> Any:
        return getattr(self.target(), name)(*args, **kwargs)

    def __repr__(self) -> str:
        anchor = self._anchor()
        return f"<WeakBackend {'(collected)' if anchor is None else repr(anchor.backend)}>"
