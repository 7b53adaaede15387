"""The descriptor census tells a store's connections from the other descriptors.

The chaos campaign holds the object store's connections to the backend's
``max_connections`` and every other descriptor to "flat"; these show that
each figure moves when, and only when, its own kind of descriptor is opened.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from contextlib import ExitStack

import pytest

from kvprobe.testing.fds import fd_census, open_fds


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    with socket.create_server(("127.0.0.1", 0)) as server:
        yield server


def test_connections_to_the_port_count_as_the_store_and_nothing_else_does(listener: socket.socket) -> None:
    port = listener.getsockname()[1]
    before = fd_census(port)
    assert before.store == 0
    with ExitStack() as opened:
        clients = [opened.enter_context(socket.create_connection(("127.0.0.1", port))) for _ in range(3)]
        accepted = [opened.enter_context(listener.accept()[0]) for _ in clients]  # remote port: the client's
        other = opened.enter_context(socket.create_server(("127.0.0.1", 0)))  # not connected to the store
        during = fd_census(port)
        assert during.store == 3
        assert during.total == before.total + len(clients) + len(accepted) + 1
        # The clients' sockets leave besides_store (no eventfd to pair them
        # with here); the accepted ones and the other listener stay in it.
        assert during.besides_store == before.besides_store + len(accepted) + 1 - min(during.eventfds, 3)
        assert other.fileno() > 0
    assert fd_census(port).store == 0
    assert fd_census(None).store == 0  # no port: nothing is the store's


def test_eventfds_beyond_the_store_connections_stay_in_besides_store(listener: socket.socket) -> None:
    port = listener.getsockname()[1]
    before = fd_census(port)
    extra = [os.eventfd(0) for _ in range(5)]
    try:
        after = fd_census(port)
        assert after.eventfds == before.eventfds + 5
        assert after.besides_store == before.besides_store + 5  # a leak of eventfds shows
    finally:
        for fd in extra:
            os.close(fd)


def test_open_fds_counts_every_descriptor() -> None:
    before = open_fds()
    read_end, write_end = os.pipe()
    try:
        assert open_fds() == before + 2
    finally:
        os.close(read_end)
        os.close(write_end)
