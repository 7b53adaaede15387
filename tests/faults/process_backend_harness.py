"""What the ProcessBackend tests share: a file tier, helpers serving it, and waits with a bound.

``ProcessBackend`` moves a backend's work into spawned helper processes and
forwards each ``batch_lookup`` over a pipe.  Its tests, one file per topic
(``test_process_backend*.py``), hold it to its contract
(``backends/process.py``) with real helpers and nothing mocked; what they
all need is here, so that each file holds only its topic's tests:

* :class:`Tier`, the module's file tier (written through an in-process
  ``FsBackend``, read by the helpers), and the module-scoped fixtures
  ``tier``, ``fs_helper`` (``FsBackend`` in a helper) and ``scripted``
  (``ScriptedFsBackend`` in a helper, logging its calls) that serve the
  tests that neither kill nor close a helper.  A test file makes them its
  own by importing :func:`tier_fixture`, :func:`fs_helper_fixture` and
  :func:`scripted_fixture` (pytest finds a fixture among a module's names;
  each file gets its own tier and helpers);
* :func:`own_backend`, a ``ProcessBackend`` of a test's own (for tests that
  kill, hang or close helpers);
* :func:`wait_until`, :class:`Background` and :data:`BOUND_S`: waits that
  fail after a generous bound and assert nothing about speed.

The misbehaving backends run inside the helper, so they live in
``helper_backends.py`` (the helper imports it by name) and are switched on
by marker keys: a group that holds ``marker("oserror")`` raises, one
without it is answered honestly.
"""

from __future__ import annotations

import multiprocessing
import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from fault_harness import keys
from helper_backends import scripted_factory

from kvprobe.backends import FsBackend, ProcessBackend

__all__ = [
    "BOUND_S",
    "LENGTHS",
    "Background",
    "Tier",
    "children",
    "fs_helper_fixture",
    "logged_calls",
    "own_backend",
    "scripted_fixture",
    "tier_fixture",
    "wait_until",
]

#: Bound on anything a test waits for (a helper starting, a thread returning);
#: generous, the machine is shared.  Nothing asserts how fast it happens.
BOUND_S = 20.0


def children() -> set[int]:
    """Pids of this process's live multiprocessing children (helpers included)."""
    return {p.pid for p in multiprocessing.active_children() if p.pid is not None}


def wait_until(predicate: Callable[[], bool], what: str, bound_s: float = BOUND_S) -> None:
    deadline = time.monotonic() + bound_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not true after {bound_s} s")
        time.sleep(0.005)


def logged_calls(log: Path) -> list[tuple[int, int]]:
    """``(helper pid, number of keys)`` of every call that reached a ScriptedFsBackend."""
    if not log.exists():
        return []
    return [(int(pid), int(n)) for pid, n in (line.split() for line in log.read_text().splitlines())]


class Background:
    """One ``batch_lookup`` call on its own thread; keeps its result or its exception."""

    def __init__(self, call: Callable[[], list[bool]]) -> None:
        self.result: list[bool] | None = None
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(call,), name="stuck-call", daemon=True)
        self._thread.start()

    def _run(self, call: Callable[[], list[bool]]) -> None:
        try:
            self.result = call()
        except BaseException as exc:
            self.error = exc

    def join(self, bound_s: float = BOUND_S) -> None:
        self._thread.join(bound_s)
        assert not self._thread.is_alive(), f"the call is still running after {bound_s} s"


def _sized_key(tag: str, length: int) -> bytes:
    """A deterministic key of ``length`` bytes (hash bytes, repeated as needed)."""
    seed = keys(tag, 1)[0]
    return (seed * (length // len(seed) + 1))[:length]


#: Key lengths the layout names differently: empty, shorter than a shard,
#: one shard, hex-named (up to 64 bytes), digest-named (longer).
LENGTHS = (1, 2, 3, 20, 36, 64, 65, 100, 1000)


@dataclass
class Tier:
    """The module's file tier: written here through ``writer``, read by the helpers."""

    root: Path
    writer: FsBackend
    stored: list[bytes]
    absent: list[bytes]
    directory: bytes  # a key whose path is a directory: not a block
    log: Path  # calls of the module's ScriptedFsBackend helper

    @property
    def mixed(self) -> list[bytes]:
        """Stored, absent and directory keys interleaved, with a repeated key."""
        out = [k for pair in zip(self.stored, self.absent, strict=False) for k in pair]
        return [*out, self.directory, *self.stored[len(self.absent) :], self.stored[0]]

    def truth(self, wanted: Sequence[bytes]) -> list[bool]:
        stored = set(self.stored)
        return [k in stored for k in wanted]

    def fresh(self, tag: str, n: int) -> list[bytes]:
        """``n`` new keys, stored now."""
        new = keys(tag, n)
        for k in new:
            self.writer.store(k)
        return new


@pytest.fixture(scope="module", name="tier")
def tier_fixture(tmp_path_factory: pytest.TempPathFactory) -> Tier:
    root = tmp_path_factory.mktemp("process-tier")
    writer = FsBackend(root / "tier")
    stored = [b"", *(_sized_key(f"stored-{n}", n) for n in LENGTHS)]
    absent = [_sized_key(f"absent-{n}", n) for n in LENGTHS]
    for k in stored:
        writer.store(k, b"block")
    directory = _sized_key("directory", 20)
    os.makedirs(writer.locate(directory))
    return Tier(root / "tier", writer, stored, absent, directory, root / "calls.log")


@pytest.fixture(scope="module", name="fs_helper")
def fs_helper_fixture(tier: Tier) -> Iterator[ProcessBackend]:
    """``FsBackend`` in a helper, for the tests that neither kill nor close it."""
    with ProcessBackend(partial(FsBackend, str(tier.root))) as backend:
        yield backend


@pytest.fixture(scope="module", name="scripted")
def scripted_fixture(tier: Tier) -> Iterator[ProcessBackend]:
    """``ScriptedFsBackend`` in a helper (logging its calls), for faults that keep the helper."""
    with ProcessBackend(scripted_factory(tier.root, log=tier.log)) as backend:
        yield backend


def own_backend(tier: Tier, **kwargs: Any) -> ProcessBackend:
    """A ProcessBackend of this test's own (for tests that kill, hang or close helpers)."""
    return ProcessBackend(scripted_factory(tier.root, log=tier.log), **kwargs)
