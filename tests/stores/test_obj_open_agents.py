"""The object backend can build every agent up front, so that lookups build none later.

The backend builds its extra NIXL agents only when failures shrink its
queries, each with its own connections: in the chaos campaign that growth,
during an S3 outage after the warm-up, read as 23 file descriptors leaked.
``open_agents()`` builds them all at once; after it, no lookup builds
another.  Each agent still opens connections as its HEADs overlap, never
more than the backend's ``max_connections`` in all.
"""

from __future__ import annotations

import os
from typing import Any

import pytest
from integ_harness import make_obj_backend, requires_nixl

from kvprobe.testing.fds import fd_census


@requires_nixl
def test_open_agents_builds_every_agent_and_lookups_build_none_after_it(s3_server: Any, bucket: str) -> None:
    backend = make_obj_backend(s3_server, bucket)
    try:
        stored = [b"open-agents-%d" % i for i in range(8)]
        for key in stored:
            backend.store(key)
        assert len(backend.agent_names) < backend.agents  # lazily built until now
        assert backend.open_agents() == backend.agents
        assert len(backend.agent_names) == backend.agents
        names = list(backend.agent_names)
        for _ in range(3):
            verdicts = backend.batch_lookup(stored + [os.urandom(16) for _ in range(2_000)], None)
            assert all(verdicts[: len(stored)]) and not any(verdicts[len(stored) :])
        assert backend.open_agents() == backend.agents  # a second call builds none
        assert backend.agent_names == names
        connections = fd_census(s3_server.port).store
        assert 0 < connections <= backend.max_connections
    finally:
        backend.close()


@requires_nixl
def test_open_agents_on_a_closed_backend_raises(s3_server: Any, bucket: str) -> None:
    backend = make_obj_backend(s3_server, bucket)
    backend.close()
    with pytest.raises(RuntimeError, match="closed"):
        backend.open_agents()
