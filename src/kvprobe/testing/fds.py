"""Count this process's file descriptors, with a store's connections apart.

A leak check that counts every descriptor cannot tell a leak from a
connection pool filling up to its bound: the object backend's SDK opens a
connection (a TCP socket, and an eventfd for its curl handle) each time its
HEADs overlap more than before, at any point of a run.  :func:`fd_census`
counts the sockets connected to the store's port, so that a check can hold
them to the pool's bound and the rest to "flat".  Linux only (``/proc``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

__all__ = ["FdCensus", "fd_census", "open_fds"]


@dataclass(frozen=True)
class FdCensus:
    """Open descriptors at one moment.

    ``total`` counts them all, ``store`` the TCP sockets whose remote port
    is the store's, ``eventfds`` every eventfd.
    """

    total: int
    store: int
    eventfds: int

    @property
    def besides_store(self) -> int:
        """Descriptors other than the store's connections and their handles' eventfds.

        Each of the SDK's connections comes with one eventfd (measured: a
        backend with 211 connections held 212 eventfds); eventfds beyond the
        connections' count stay in this figure, so that their leak shows.
        """
        return self.total - self.store - min(self.eventfds, self.store)


def open_fds() -> int:
    """The process's open file descriptors."""
    return len(os.listdir("/proc/self/fd"))


def fd_census(store_port: int | None = None) -> FdCensus:
    """Count the open descriptors; with ``store_port``, the sockets connected to it apart.

    A descriptor closed while it is being counted is not counted.
    """
    inodes = _sockets_to(store_port) if store_port is not None else set()
    total = store = eventfds = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:  # closed since the listing
            continue
        total += 1
        if target == "anon_inode:[eventfd]":
            eventfds += 1
        elif target.startswith("socket:[") and target[8:-1] in inodes:
            store += 1
    return FdCensus(total, store, eventfds)


def _sockets_to(port: int) -> set[str]:
    """Inodes of the TCP sockets (IPv4 and IPv6, any state) whose remote port is ``port``."""
    inodes: set[str] = set()
    for table in ("/proc/self/net/tcp", "/proc/self/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except FileNotFoundError:  # no IPv6 on this host
            continue
        for line in lines:
            fields = line.split()
            if int(fields[2].rsplit(":", 1)[1], 16) == port:
                inodes.add(fields[9])
    return inodes
