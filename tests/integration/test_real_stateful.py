"""The shipped stateful machine (``kvprobe.testing.stateful``) against each real backend.

The machine stores and removes real blocks as rules, drives the manager with
the manual worker (Hypothesis picks interleavings) and with the real threaded
worker, and checks every step against the reference model.  A fresh backend
is built for each run (the object store reuses one bucket; the machine clears
its keys first).  Example counts are small: each step does real I/O.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from integ_harness import BACKENDS, make_obj_backend

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
