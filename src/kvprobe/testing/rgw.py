"""A real S3 server for tests: a single-node Ceph cluster with its RADOS Gateway, on loopback.

:class:`RgwServer` has the interface of :class:`kvprobe.testing.s3server.S3Server`
(free ports, credentials, ``create_bucket``, ``stop``/``kill``/``freeze``/
``thaw``/``start``, ``close``) but the server behind it is Ceph's RGW, the
S3 gateway real data centres run: one monitor, one OSD on the ``memstore``
object store (objects in RAM, nothing on disk but small maps), pool size 1,
authentication off between the daemons, and ``radosgw`` on its ``beast``
frontend.  S3 requests are still signed and checked (the gateway user is
created with :attr:`access_key`/:attr:`secret_key`).

The outage controls act on the gateway process only; the monitor and the
OSD keep running, so the objects survive ``stop``, ``kill`` and ``freeze``
as they would on a real cluster.  ``close`` stops all three processes by
their pids and deletes the cluster's directory.

Install (Debian 12, root): ``apt-get install -y --no-install-recommends
ceph-mon ceph-osd radosgw ceph-common`` (Ceph 16.2, ~70 MB).  :func:`rgw_missing`
says whether that is done.

Two traps this module handles: with authentication off the gateway cannot
reach the monitor unless its section sets ``ms mon client mode = crc``; and
RGW rejects SigV4 requests without ``x-amz-content-sha256`` (boto3 and the
AWS C++ SDK inside NIXL send it; hand-made requests must too).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from typing import Any

from kvprobe.testing.s3server import LocalS3Server, S3ServerError, free_port

__all__ = ["INSTALL_HINT", "REQUIRE_ENV", "RgwServer", "rgw_missing", "rgw_required", "running_rgw", "skip_or_fail"]

INSTALL_HINT = "apt-get install -y --no-install-recommends ceph-mon ceph-osd radosgw ceph-common"
#: Set to 1 (CI does) to make a test that would skip for want of Ceph fail instead.
REQUIRE_ENV = "KVPROBE_REQUIRE_RGW"
_BINARIES = ("ceph-mon", "ceph-osd", "radosgw", "radosgw-admin", "monmaptool", "ceph")


def rgw_missing() -> str | None:
    """Why :class:`RgwServer` cannot run here (one line naming the install command), or None."""
    absent = [name for name in _BINARIES if shutil.which(name) is None]
    if absent:
        return f"Ceph RGW is not installed ({', '.join(absent)} missing); install it with: {INSTALL_HINT}"
    return None


def rgw_required() -> bool:
    """True when ``KVPROBE_REQUIRE_RGW=1``: a missing Ceph is then a failure, not a skip."""
    return os.environ.get(REQUIRE_ENV, "") == "1"


def skip_or_fail(why: str | None) -> None:
    """In a test: nothing when ``why`` is None, else skip with ``why``, or fail under ``KVPROBE_REQUIRE_RGW=1``."""
    if why is None:
        return
    import pytest

    if rgw_required():
        pytest.fail(f"{REQUIRE_ENV}=1 but {why}", pytrace=False)
    pytest.skip(why)


@contextlib.contextmanager
def running_rgw(why_missing: str | None = None) -> Iterator[RgwServer]:
    """A started :class:`RgwServer` for a test fixture, stopped (by its pids) afterwards.

    ``why_missing``: the caller's own reason the tests cannot run (None: ask
    :func:`rgw_missing`); the test is skipped or failed as
    :func:`skip_or_fail` says.
    """
    skip_or_fail(why_missing if why_missing is not None else rgw_missing())
    server = RgwServer()
    server.start()
    try:
        yield server
    finally:
        server.close()


def _config(root: str, fsid: str, mon_port: int, gateway_port: int) -> str:
    # Kept small: the machine is shared.  memstore holds objects in RAM (a
    # bounded device of 256 MiB); short PG logs keep ~17 KB per object.
    return f"""[global]
fsid = {fsid}
mon host = v2:127.0.0.1:{mon_port}
mon initial members = a
auth cluster required = none
auth service required = none
auth client required = none
ms bind msgr1 = false
ms bind ipv6 = false
public addr = 127.0.0.1
cluster addr = 127.0.0.1
run dir = {root}/run
log file = {root}/log/$name.log
admin socket = {root}/run/$name.asok
osd pool default size = 1
osd pool default min size = 1
osd pool default pg num = 8
osd pool default pgp num = 8
osd pool default pg autoscale mode = off
osd crush chooseleaf type = 0
mon allow pool size one = true
mon warn on pool no redundancy = false
mon max pg per osd = 1000
paxos propose interval = 0.05
[mon]
mon data = {root}/mon/$id
[osd]
osd data = {root}/osd/$id
osd objectstore = memstore
memstore device bytes = 268435456
osd max pg log entries = 10
osd min pg log entries = 10
osd pg log trim min = 5
[client.rgw.a]
ms mon client mode = crc
rgw frontends = beast endpoint=127.0.0.1:{gateway_port}
rgw data = {root}/rgw
rgw thread pool size = 128
[client.admin]
admin socket =
"""


class RgwServer(LocalS3Server):
    """A single-node Ceph cluster and its RADOS Gateway on loopback ports.

    Args and errors as :class:`~kvprobe.testing.s3server.LocalS3Server`; the
    credentials are those of the gateway user this class creates (access
    keys longer than one letter).  ``startup_timeout_s`` bounds the first
    start, which boots the cluster (about 5-10 s here).

    Raises:
        S3ServerError: (from ``start``) Ceph is not installed (the message
            names the install command), or a daemon failed; nothing is left
            running then.
    """

    kind = "rgw"

    def __init__(self, *args: Any, startup_timeout_s: float = 90.0, **kwargs: Any) -> None:
        super().__init__(*args, startup_timeout_s=startup_timeout_s, **kwargs)
        self._root: str | None = None
        self._conf = ""
        self._daemons: list[subprocess.Popen[bytes]] = []
        self.boot_seconds: float | None = None

    @property
    def daemon_pids(self) -> list[int]:
        """Pids of the monitor and OSD while they run (the gateway's is :attr:`pid`)."""
        return [p.pid for p in self._daemons if p.poll() is None]

    @property
    def data_dir(self) -> str | None:
        """The cluster's directory (maps, logs, sockets) until ``close``."""
        return self._root

    def suspend_user(self, suspended: bool) -> None:
        """Suspend (every S3 request is then refused with 403) or re-enable the gateway user.

        Raises:
            S3ServerError: the cluster is not running, or radosgw-admin failed.
        """
        if not self._daemons:
            raise S3ServerError("the RGW cluster is not running; call start() first")
        self._run(
            "radosgw-admin", "-c", self._conf, "-n", "client.rgw.a", "--admin-socket=",
            "user", "suspend" if suspended else "enable", "--uid=kvprobe",
        )  # fmt: skip

    def _command(self) -> list[str]:
        return ["radosgw", "-f", "-n", "client.rgw.a", "-c", self._conf]

    def _prepare(self) -> None:
        if self._daemons and all(p.poll() is None for p in self._daemons):
            return
        why = rgw_missing()
        if why is not None:
            raise S3ServerError(why)
        started = time.monotonic()
        try:
            self._boot_cluster()
        except BaseException:
            self._stop_daemons()
            self._remove_root()
            raise
        self.boot_seconds = time.monotonic() - started

    def _after_start(self) -> None:
        client = self.client()
        existing = {b["Name"] for b in client.list_buckets().get("Buckets", [])}
        for bucket in self.buckets:
            if bucket not in existing:
                client.create_bucket(Bucket=bucket)

    def _release(self) -> None:
        self._stop_daemons()
        self._remove_root()

    # --- the cluster ---------------------------------------------------------------

    def _run(self, *argv: str, timeout: float = 60.0) -> str:
        out = subprocess.run(
            list(argv), capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL, check=False
        )
        if out.returncode != 0:
            raise S3ServerError(f"{' '.join(argv)} failed ({out.returncode}): {out.stderr[-1500:]}")
        return out.stdout

    def _spawn(self, *argv: str) -> subprocess.Popen[bytes]:
        proc = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # no Ctrl-C of the test runner reaches it
        )
        self._daemons.append(proc)
        return proc

    def _boot_cluster(self) -> None:
        assert self.port is not None
        self._root = root = tempfile.mkdtemp(prefix="kvprobe-rgw-")
        for sub in ("mon/a", "osd/0", "run", "log", "rgw"):
            os.makedirs(os.path.join(root, sub))
        fsid = str(uuid.uuid4())
        mon_port = free_port(self.host)
        self._conf = conf = os.path.join(root, "ceph.conf")
        with open(conf, "w") as f:
            f.write(_config(root, fsid, mon_port, self.port))
        monmap = os.path.join(root, "monmap")
        self._run("monmaptool", "--create", "--addv", "a", f"[v2:127.0.0.1:{mon_port}]", "--fsid", fsid, monmap)
        self._run("ceph-mon", "--mkfs", "-i", "a", "--monmap", monmap, "-c", conf)
        self._spawn("ceph-mon", "-f", "-i", "a", "-c", conf)
        osd_id = self._run("ceph", "-c", conf, "--connect-timeout", "30", "osd", "create").strip()
        if osd_id != "0":
            raise S3ServerError(f"expected OSD id 0 from a fresh monitor, got {osd_id!r}")
        self._run("ceph-osd", "-c", conf, "-i", "0", "--mkfs")
        self._spawn("ceph-osd", "-f", "-c", conf, "-i", "0")
        # The user (and the gateway's pools) through radosgw-admin; it waits
        # for the OSD to come up by itself.
        self._run(
            "radosgw-admin", "-c", conf, "-n", "client.rgw.a", "--admin-socket=", "user", "create",
            "--uid=kvprobe", "--display-name=kvprobe",
            f"--access-key={self.access_key}", f"--secret={self.secret_key}",
            timeout=self.startup_timeout_s,
        )  # fmt: skip

    def _stop_daemons(self) -> None:
        # By pid, never by name.  SIGKILL: the cluster's data is being thrown
        # away, and a graceful OSD shutdown takes seconds.
        for proc in self._daemons:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
        for proc in self._daemons:
            try:
                proc.wait(self.stop_timeout_s)
            except subprocess.TimeoutExpired as exc:
                raise S3ServerError(f"Ceph daemon pid {proc.pid} survived SIGKILL") from exc
        self._daemons = []

    def _remove_root(self) -> None:
        if self._root is not None:
            shutil.rmtree(self._root, ignore_errors=True)
            self._root = None
