"""Finding NIXL, and a small pool of NIXL agents for one backend instance.

Import order: ``nixl_cu12._api`` (the ``nixl`` extra installs ``nixl-cu12``),
then ``nixl._api`` (the ``nixl`` meta package).  ``nixl-cu13`` is not
preferred because its OBJ plugin needs ``libcuobjclient.so.1``, which no wheel
ships.

Why a pool: a NIXL agent is not thread-safe by default, and the manager's
threaded worker may run a second ``batch_lookup`` while an earlier one is
stuck past ``lookup_timeout_s``.  Sharing one agent under a lock would make
every later batch wait for the stuck one; instead each concurrent call takes
an idle agent or creates one, up to ``max_agents``.  Beyond that a call fails
at once (the manager counts it and answers MISS) instead of queueing.

NIXL's log.  NIXL logs through Abseil, to stderr, from the level in
``NIXL_LOG_LEVEL`` read when NIXL is loaded; its OBJ plugin writes an ERROR
line per failed HEAD (thousands a second under throttling, which the object
backend handles and counts).  :func:`load_nixl` sets ``NIXL_LOG_LEVEL=FATAL``
before importing NIXL unless the variable is set (``ERROR``, ``WARN`` or
``INFO`` bring NIXL's lines back).

Exit.  A call inside NIXL when the interpreter finalizes returns into a
thread Python has stopped, and the process aborts (``terminate called without
an active exception``).  An ``atexit`` hook closes every live pool and waits,
at most :data:`EXIT_WAIT_S` seconds, until every lent agent is back (each
NIXL call returns within the SDK's request timeout, about 3 s); agents are
destroyed there, before finalization.
"""

from __future__ import annotations

import atexit
import importlib
import itertools
import os
import threading
import time
import uuid
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["EXIT_WAIT_S", "AgentPool", "load_nixl", "new_agent_name", "nixl_unavailable"]

#: How long the exit hook waits for NIXL calls still running (a frozen store's
#: HEADs fail after the SDK's 3 s request timeout; connects after a few more).
EXIT_WAIT_S = 10.0

_INSTALL_HINT = "install it with: pip install 'kvprobe[nixl]' (which installs nixl-cu12; install torch==2.13.0 first)"
_counter = itertools.count(1)


def load_nixl() -> Any:
    """Return NIXL's ``_api`` module (it has ``nixl_agent`` and ``nixl_agent_config``).

    Raises:
        ImportError: neither ``nixl_cu12`` nor ``nixl`` can be imported; the
            message names ``kvprobe[nixl]``.
    """
    # NIXL logs an INFO line per agent and, from the OBJ plugin, an ERROR
    # line per failed HEAD; quiet by default (the object backend counts and
    # logs its failures itself), and NIXL_LOG_LEVEL=ERROR or INFO (read when
    # NIXL is first imported) brings the lines back.
    os.environ.setdefault("NIXL_LOG_LEVEL", "FATAL")
    errors: list[str] = []
    for name in ("nixl_cu12._api", "nixl._api"):
        try:
            module = importlib.import_module(name)
        except ImportError as exc:
            errors.append(f"{name}: {exc}")
            continue
        if hasattr(module, "nixl_agent") and hasattr(module, "nixl_agent_config"):
            return module
        errors.append(f"{name}: has no nixl_agent")
    raise ImportError(f"the NIXL backends need NIXL; {_INSTALL_HINT} ({'; '.join(errors)})")


def nixl_unavailable() -> str | None:
    """Why :func:`load_nixl` fails here (its message), or None when NIXL loads.

    For skip reasons and fallbacks; never raises ImportError.
    """
    try:
        load_nixl()
    except ImportError as exc:
        return str(exc)
    return None


def new_agent_name(kind: str) -> str:
    """A NIXL agent name unique in this process and, practically, across processes."""
    return f"kvprobe-{kind}-{os.getpid()}-{next(_counter)}-{uuid.uuid4().hex[:8]}"


class AgentPool:
    """Agents that each have the backend ``plugin`` created with ``params``.

    Args:
        kind: short word used in agent names (``posix``, ``obj``).
        plugin: NIXL plugin name, e.g. ``"POSIX"`` or ``"OBJ"``.
        params: ``create_backend`` parameters (all values strings).
        max_agents: most agents alive at once (one per concurrent call).
        before_create: called (with a lock held) around ``create_backend``;
            a context-manager factory, used by the object backend to set the
            AWS SDK's retry environment while the client is built.

    Raises:
        ImportError: NIXL is missing, or it lacks ``plugin`` (names the package).
        RuntimeError: NIXL failed to create the agent or the backend.
    """

    def __init__(
        self,
        kind: str,
        plugin: str,
        params: dict[str, str],
        *,
        max_agents: int,
        before_create: Callable[[], Any] | None = None,
    ) -> None:
        if isinstance(max_agents, bool) or not isinstance(max_agents, int) or max_agents < 1:
            raise ValueError(f"max_agents must be a positive int, got {max_agents!r}")
        self._api = load_nixl()
        self.kind = kind
        self.plugin = plugin
        self._params = dict(params)
        self.max_agents = max_agents
        self._before_create = before_create
        self._lock = threading.Condition()  # notified when a lent agent comes back
        self._idle: list[Any] = []
        self._alive = 0
        self._closed = False
        self.names: list[str] = []
        # Build the first agent now so a missing plugin or bad parameters
        # fail at construction, not at the first lookup.
        self._idle.append(self._create())
        self._alive = 1
        _LIVE_POOLS.add(self)

    def _create(self) -> Any:
        name = new_agent_name(self.kind)
        config = self._api.nixl_agent_config(enable_prog_thread=False, backends=[])
        agent = self._api.nixl_agent(name, config)
        plugins = agent.get_plugin_list()
        if self.plugin not in plugins:
            raise ImportError(
                f"NIXL at {self._api.__file__} has no {self.plugin} plugin (available: {sorted(plugins)}); "
                f"{_INSTALL_HINT}"
            )
        guard = self._before_create() if self._before_create is not None else None
        try:
            if guard is not None:
                with guard:
                    agent.create_backend(self.plugin, self._params)
            else:
                agent.create_backend(self.plugin, self._params)
        except Exception as exc:
            raise RuntimeError(f"NIXL could not create the {self.plugin} backend: {exc}") from exc
        self.names.append(name)
        return agent

    @contextmanager
    def agent(self) -> Iterator[Any]:
        """Lend an agent for one call; it returns to the pool afterwards.

        Raises:
            RuntimeError: the pool is closed, or ``max_agents`` agents are all
                busy (a call is stuck); nothing waits.
        """
        with self._lock:
            if self._closed:
                raise RuntimeError(f"the {self.plugin} backend was closed")
            if self._idle:
                agent = self._idle.pop()
            elif self._alive >= self.max_agents:
                raise RuntimeError(
                    f"all {self.max_agents} NIXL {self.plugin} agents are busy (earlier calls are stuck)"
                )
            else:
                self._alive += 1
                agent = None
        if agent is None:
            try:
                agent = self._create()
            except BaseException:
                with self._lock:
                    self._alive -= 1
                raise
        try:
            yield agent
        finally:
            with self._lock:
                if self._closed:
                    # Closed while the call ran: drop the last reference here.
                    self._alive -= 1
                    del agent
                else:
                    self._idle.append(agent)
                self._lock.notify_all()

    @property
    def busy(self) -> int:
        """Agents currently lent out."""
        with self._lock:
            return self._alive - len(self._idle)

    def close(self) -> None:
        """Release every idle agent now, and each busy one when its call returns.

        The Python API has no explicit destroy: dropping the last reference
        destroys the agent (and its backend, threads and connections).
        Calling ``close`` again does nothing.
        """
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
            self._alive -= len(idle)
        idle.clear()

    def wait_returned(self, timeout_s: float) -> bool:
        """Wait until no agent is lent (every NIXL call returned); False if ``timeout_s`` passed first."""
        end = time.monotonic() + timeout_s
        with self._lock:
            while self._alive > len(self._idle):
                left = end - time.monotonic()
                if left <= 0:
                    return False
                self._lock.wait(left)
        return True


_LIVE_POOLS: weakref.WeakSet[AgentPool] = weakref.WeakSet()


@atexit.register
def _close_pools_at_exit() -> None:
    """Close every live pool and wait for its NIXL calls, before the interpreter stops its threads."""
    pools = list(_LIVE_POOLS)
    for pool in pools:
        pool.close()
    end = time.monotonic() + EXIT_WAIT_S
    for pool in pools:
        pool.wait_returned(max(0.0, end - time.monotonic()))
