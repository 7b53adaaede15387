"""How kvprobe's tiers for vLLM look blocks up: kvprobe's backends, under vLLM's names.

A vLLM 0.33 tier names a block with its ``FileMapper.get_file_name(key)``
(an object name below the tier's prefix, or a path below its ``root_dir``).
The backends here are kvprobe's own (:class:`NixlObjBackend`,
:class:`FsBackend`), with only ``locate`` changed to give that name, so
a fleet may mix vLLM's tiers and kvprobe's on one bucket or directory.

:class:`TierLookupManager` is the vLLM drop-in
(:class:`kvprobe.integrations.vllm.AsyncLookupManager`) whose
``batch_lookup`` is such a backend's: the tier keeps calling it exactly as
vLLM's tier calls its own lookup manager (``lookup``, ``flush``,
``cleanup``, ``mark_miss``, ``shutdown``), and kvprobe's native manager
underneath batches, bounds and (optionally) caches the lookups.  No vLLM
import here.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Protocol

from kvprobe.backends.base import Key
from kvprobe.backends.fs import FsBackend
from kvprobe.backends.nixl_obj import NixlObjBackend
from kvprobe.integrations.vllm.manager import AsyncLookupManager
from kvprobe.integrations.vllm.tiers.options import TierConfigError, TierLookupOptions
from kvprobe.statemachine.chain import starts_walk
from kvprobe.statemachine.types import HasReqId

__all__ = [
    "LookupBackend",
    "TierLookupManager",
    "VllmNamedFsBackend",
    "VllmNamedObjBackend",
    "starts_walk",
    "wire_name",
]

#: vLLM's name of a block: ``FileMapper.get_file_name``.
NameOf = Callable[[Key], str]
_SLASHES = re.compile("/+")


def wire_name(name: str) -> str:
    """The S3 key of an object vLLM's obj tier names ``name``.

    vLLM joins its prefix and base path with ``/`` on both sides (``p//m_…``,
    or ``/m_…`` with no prefix); NIXL's S3 client collapses the repeated and
    leading slashes on the wire.  kvprobe's backend also sends some retries
    through boto3, which sends a key as given, so it asks for the name as
    stored.
    """
    return _SLASHES.sub("/", name).lstrip("/")


class VllmNamedObjBackend(NixlObjBackend):
    """kvprobe's NIXL object backend, naming each block as vLLM's obj tier does.

    Args:
        name_of: the tier's ``FileMapper.get_file_name``.
        **kwargs: :class:`NixlObjBackend`'s arguments (its ``prefix`` then
            only scopes the pace and the connection check's probe name).

    Raises:
        As :class:`NixlObjBackend`.
    """

    def __init__(self, name_of: NameOf, **kwargs: object) -> None:
        self._name_of = name_of
        super().__init__(**kwargs)  # type: ignore[arg-type]

    def locate(self, key: Key) -> str:
        """The S3 key vLLM's obj tier stores ``key``'s block under."""
        return wire_name(self._name_of(key))


class VllmNamedFsBackend(FsBackend):
    """kvprobe's filesystem backend, naming each block as vLLM's fs tier does.

    A block is stored when a regular file is at its path (vLLM's own lookup
    also counts a directory there; its ``.tmp`` files never count).

    Args:
        root: the tier's ``root_dir``.
        name_of: the tier's ``FileMapper.get_file_name`` (paths below ``root``).

    Raises:
        As :class:`FsBackend`.
    """

    def __init__(self, root: str, name_of: NameOf) -> None:
        super().__init__(root)
        self._name_of = name_of

    def locate(self, key: Key) -> str:
        """The path vLLM's fs tier stores ``key``'s block at."""
        return self._name_of(key)


class LookupBackend(Protocol):
    """What :class:`TierLookupManager` asks: kvprobe's backend protocol."""

    def batch_lookup(self, keys: Sequence[Key], req_context: object) -> list[bool]: ...


class TierLookupManager(AsyncLookupManager):
    """The drop-in manager of one kvprobe tier, whose ``batch_lookup`` is a kvprobe backend's.

    The windows of :meth:`lookup_chain` and of positioned lookups follow
    the backend's ``chain_schedule`` (first window and growth; the object
    backend's: 4 keys, then each 1.25 times the one before), so a prompt
    with nothing stored costs its first window; a backend without one gets
    the drop-in's defaults.

    With ``start_backlog``, a store that cannot keep up serves the walks
    already under way first.  The calls run one at a time; when calls
    submitted at earlier steps are still unanswered, a request holding no
    probe yet does not start its walk (its positioned keys answer None, no
    probe) unless :func:`starts_walk` allows it.  Sharing the pace among
    every live request would leave each walk a round per cycle of all the
    others, until none is decided by its deadline.  A held-back request
    starts once the backlog falls (every call ends by the lookup timeout).
    Keys without a recorded position are never held back.

    Args:
        backend: the tier's kvprobe backend.
        tier_type: the tier's name (worker thread, error messages).
        options: the tier config's kvprobe keys.
        start_backlog: None (every walk starts at once) or the calls
            outstanding at which new walks wait.

    Raises:
        TierConfigError: ``start_backlog`` is not None or an int of at least 1.
        As :class:`kvprobe.integrations.vllm.AsyncLookupManager`.
    """

    def __init__(
        self, backend: LookupBackend, tier_type: str, options: TierLookupOptions, start_backlog: int | None = None
    ) -> None:
        if start_backlog is not None and (type(start_backlog) is not int or start_backlog < 1):
            raise TierConfigError("start_backlog", f"must be None or an int of at least 1, got {start_backlog!r}")
        self.backend = backend
        self.start_backlog = start_backlog
        self._started_this_step = 0
        schedule = getattr(backend, "chain_schedule", None)
        super().__init__(
            tier_type,
            lookup_timeout_s=options.lookup_timeout_s,
            chain_mode=options.chain_mode,
            chain_window=None if schedule is None else schedule[0],
            chain_window_growth=None if schedule is None else schedule[1],
            verdict_cache=options.verdict_cache,
        )

    def lookup(self, key: Key, req_context: HasReqId) -> bool | None:
        """The drop-in's ``lookup``, but None without a probe for a walk held back by the backlog."""
        if self.start_backlog is not None and self._held_back(key, req_context):
            return None
        return super().lookup(key, req_context)

    def _held_back(self, key: Key, req_context: HasReqId) -> bool:
        manager = self.manager
        req_id = getattr(req_context, "req_id", None)
        if manager.closed or type(req_id) is not str or type(key) is not bytes:
            return False  # after shutdown, or bad input: the drop-in answers (or refuses) it
        core = manager.core
        if req_id in core.requests:
            return False  # its walk has started
        position_of = getattr(req_context, "get_offload_key_position", None)
        if position_of is None or type(position_of(key)) is not int:
            return False
        if core.inbox:
            manager.drain_results()
        assert self.start_backlog is not None
        if starts_walk(len(core.outstanding), self._started_this_step, self.start_backlog):
            self._started_this_step += 1
            return False
        return True

    def flush(self) -> None:
        """The drop-in's ``flush``; the next step may start walks again."""
        self._started_this_step = 0
        super().flush()

    def batch_lookup(self, keys: list[Key], req_context: object) -> list[bool]:
        """The backend's verdicts (the manager turns its errors into MISS)."""
        return self.backend.batch_lookup(keys, req_context)
