"""Fixtures of the integration tests: real backends on real storage.

* ``s3_server``: one Ceph RGW cluster per test session (a real S3 server,
  started on free loopback ports, stopped by its processes at the end); see
  :mod:`kvprobe.testing.rgw`.  Tests that stop, kill or freeze it must
  leave it running (``start()``/``thaw()``) when they finish; the
  ``s3_server`` fixture checks that after each test that used it.
* ``bucket``: a fresh bucket on that server for one test.
* ``block_store``: parametrized over ``fs``, ``nixl_posix``, ``nixl_obj``;
  yields a backend that can write its own ground truth, and closes it.

NIXL tests skip (with the reason) only when NIXL cannot be imported; S3
tests skip only when Ceph RGW or boto3 is missing, with one line saying how
to install, and fail instead under ``KVPROBE_REQUIRE_RGW=1`` (CI sets it).
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from integ_harness import BACKENDS, make_obj_backend, s3_missing

from kvprobe.backends import FsBackend

_bucket_ids = itertools.count(1)


@pytest.fixture(scope="session")
def _s3_session() -> Iterator[Any]:
    from kvprobe.testing.rgw import running_rgw

    with running_rgw(s3_missing()) as server:
        yield server


@pytest.fixture
def s3_server(_s3_session: Any) -> Iterator[Any]:
    """The session's S3 server, guaranteed answering before and after the test."""
    server = _s3_session
    if not server.running or server.frozen:
        server.start()
    yield server
    assert server.running and not server.frozen, "a test left the shared S3 server stopped or frozen"


@pytest.fixture
def bucket(s3_server: Any) -> Iterator[str]:
    """A new, empty bucket on the session's server (untracked afterwards)."""
    name = f"kvprobe-{os.getpid()}-{next(_bucket_ids)}"
    s3_server.create_bucket(name)
    yield name
    s3_server.forget_bucket(name)


@pytest.fixture
def make_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[[str], Any]]:
    """A factory ``make_store(kind)`` of backends; all are closed at teardown."""
    made: list[Any] = []

    def make(kind: str) -> Any:
        if kind == "fs":
            backend: Any = FsBackend(tmp_path / "tier")
        elif kind == "nixl_posix":
            from kvprobe.backends.nixl_posix import NixlPosixBackend

            backend = NixlPosixBackend(tmp_path / "tier")
        elif kind == "nixl_obj":
            server = request.getfixturevalue("s3_server")
            backend = make_obj_backend(server, request.getfixturevalue("bucket"), prefix="blocks")
        else:
            raise ValueError(kind)
        made.append(backend)
        return backend

    yield make
    for backend in made:
        backend.close()


@pytest.fixture(params=BACKENDS)
def block_store(request: pytest.FixtureRequest, make_store: Callable[[str], Any]) -> Any:
    """Each real backend in turn (``fs``, ``nixl_posix``, ``nixl_obj``)."""
    return make_store(request.param)
