"""The shipped stateful machine (``kvprobe.testing.stateful``) against each real backend.

The machine stores and removes real blocks as rules, drives the manager with
the manual worker (Hypothesis picks interleavings) and with the real threaded
worker, and checks every step against the reference model.  A fresh backend
is built for each run (the object store reuses one bucket; the machine clears
its keys first).  Example counts are small: each step does real I/O.

The file backends also run behind ``ProcessBackend``: lookups in a spawned
helper process, ground truth written in this process through an
``FsBackend`` on the same root (the helper reads the same files).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from integ_harness import BACKENDS, make_obj_backend, requires_nixl

from kvprobe.backends import Backend, FsBackend, Key, ProcessBackend

stateful = pytest.importorskip("kvprobe.testing.stateful", reason="the shipped stateful machine is not available")


def _factory(kind: str, request: pytest.FixtureRequest, tmp_path: Path) -> Callable[[], object]:
    if kind == "fs":
        from kvprobe.backends import FsBackend

        return lambda: FsBackend(tmp_path / "tier")
    if kind == "nixl_posix":
        from kvprobe.backends.nixl_posix import NixlPosixBackend

        return lambda: NixlPosixBackend(tmp_path / "tier")
    server = request.getfixturevalue("s3_server")
    bucket = request.getfixturevalue("bucket")
    return lambda: make_obj_backend(server, bucket, num_threads=4)


@pytest.mark.parametrize("worker", ["manual", "thread"])
@pytest.mark.parametrize("kind", BACKENDS)
def test_stateful_machine_on_real_backend(
    kind: str, worker: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    result: Any = stateful.run_conformance(
        _factory(kind, request, tmp_path), examples=8, steps=30, worker=worker, derandomize=True
    )
    assert result.passed, result.failure


class ProcessStore(ProcessBackend):
    """A ProcessBackend that is also a BlockStore: it writes ground truth locally.

    Lookups go to ``factory``'s backend in a helper process; ``store``,
    ``remove`` and ``locate`` go to an ``FsBackend`` on the same root here.
    """

    def __init__(self, root: Path, factory: Callable[[], Backend]) -> None:
        self.writer = FsBackend(root)
        super().__init__(factory)

    def locate(self, key: Key) -> str:
        return self.writer.locate(key)

    def store(self, key: Key, data: bytes = b"") -> None:
        self.writer.store(key, data)

    def remove(self, key: Key) -> None:
        self.writer.remove(key)


def _in_helper(kind: str, root: Path) -> Callable[[], ProcessStore]:
    if kind == "fs":
        return lambda: ProcessStore(root, partial(FsBackend, str(root)))
    from kvprobe.backends.nixl_posix import NixlPosixBackend

    return lambda: ProcessStore(root, partial(NixlPosixBackend, str(root)))


@pytest.mark.parametrize("worker", ["manual", "thread"])
@pytest.mark.parametrize(
    "kind", [pytest.param("fs", id="fs"), pytest.param("nixl_posix", id="nixl_posix", marks=requires_nixl)]
)
def test_stateful_machine_on_a_backend_in_a_helper_process(kind: str, worker: str, tmp_path: Path) -> None:
    # Every run starts a helper process, so shrinking a failure would take
    # minutes (past the test timeout for NIXL): the failing example is
    # reported as found, and derandomize makes it reproducible.
    result: Any = stateful.run_conformance(
        _in_helper(kind, tmp_path / "tier"), examples=5, steps=25, worker=worker, derandomize=True, shrink=False
    )
    assert result.passed, result.failure
