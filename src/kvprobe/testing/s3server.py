"""Local S3 servers for tests and demos, on loopback, stopped by their own pids.

:class:`LocalS3Server` is what every local server shares: a gateway child
process on a free loopback port, credentials, bucket creation, and the
outage controls below.  :class:`S3Server` is the ``moto_server`` one (the
``s3`` extra: a mock, in memory, one request at a time);
:class:`kvprobe.testing.rgw.RgwServer` is a real Ceph RADOS Gateway.  Each
waits until the server answers HTTP, stops it by its own process id (never
by name), and can take it away and bring it back **on the same port**, which
is what outage and fault-injection tests need:

=================  ==========================================================
``stop()``         graceful outage: SIGTERM, wait, SIGKILL if needed; waits
                   until the port refuses connections.  By default the
                   objects of the buckets made through this object are copied
                   out first and put back by the next ``start()``, as a real
                   server would keep them.
``kill()``         crash: SIGKILL at once.  moto loses its data (it keeps
                   everything in memory; ``start()`` re-creates the buckets,
                   empty); RGW keeps it (the objects live in its OSD).
``freeze()``       a hung server: SIGSTOP.  The port still accepts TCP
                   connections (the kernel's backlog) but nothing answers, so
                   clients wait for their own timeouts.
``thaw()``         SIGCONT: the frozen server answers again (requests that
                   arrived meanwhile are then served).
``start()``        (re)start on the same port and wait until it answers.
=================  ==========================================================

Every state change is synchronous: when a method returns, the server is
answering (``start``, ``thaw``) or refusing connections (``stop``, ``kill``),
except ``freeze``, which returns once the process is stopped.  Servers still
running when the interpreter exits are killed by an ``atexit`` hook, so a
crashed test run leaves no server behind.

Example::

    with S3Server() as s3:
        s3.create_bucket("kvblocks")
        backend = NixlObjBackend(bucket="kvblocks", **s3.credentials())
        s3.stop()    # outage: lookups now fail and resolve as MISS
        s3.start()   # back, with its objects
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
import weakref
from types import TracebackType
from typing import Any, TypedDict, TypeVar

__all__ = ["LocalS3Server", "S3Credentials", "S3Server", "S3ServerError", "free_port"]

_LIVE: weakref.WeakSet[LocalS3Server] = weakref.WeakSet()
_Server = TypeVar("_Server", bound="LocalS3Server")


class S3Credentials(TypedDict):
    """Keyword arguments of ``NixlObjBackend`` that locate and open the server."""

    endpoint_url: str
    access_key: str
    secret_key: str
    region: str


class S3ServerError(RuntimeError):
    """The server could not be started, or did not stop, within its timeout."""


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free on ``host`` a moment ago (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        port: int = s.getsockname()[1]
        return port


class LocalS3Server:
    """An S3 gateway child process on a loopback port (subclasses say which).

    Subclasses provide :meth:`_command` (the gateway's argv) and may override
    the hooks :meth:`_prepare` (before each gateway start), :meth:`_after_start`,
    :meth:`_before_stop`, :meth:`_on_kill` and :meth:`_release` (at close).

    Args:
        host: loopback address to bind (only loopback is allowed).
        port: fixed port, or None to pick a free one at the first start (the
            same port is then reused by every later ``start``).
        access_key, secret_key, region: what :meth:`credentials` hands to clients.
        startup_timeout_s: how long ``start`` waits for the server to answer.
        stop_timeout_s: how long ``stop`` waits after SIGTERM before SIGKILL.

    Raises:
        ValueError: ``host`` is not a loopback address.
    """

    #: Name used in messages and log file names.
    kind = "s3-server"

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int | None = None,
        *,
        access_key: str = "kvprobe-test",
        secret_key: str = "kvprobe-test-secret",
        region: str = "us-east-1",
        startup_timeout_s: float = 30.0,
        stop_timeout_s: float = 5.0,
    ) -> None:
        if not host.startswith("127.") and host != "localhost":
            raise ValueError(f"{type(self).__name__} binds loopback addresses only, got {host!r}")
        self.host = host
        self.port = port
        self.access_key = access_key
        self.secret_key = secret_key
        self.region = region
        self.startup_timeout_s = startup_timeout_s
        self.stop_timeout_s = stop_timeout_s
        self.buckets: list[str] = []
        self._proc: subprocess.Popen[bytes] | None = None
        # Created here, deleted by close(); the server writes its output to it.
        self._log = tempfile.NamedTemporaryFile(prefix=f"kvprobe-{self.kind}-", suffix=".log", delete=False)
        self._frozen = False
        self._lock = threading.Lock()
        # From here on the interpreter's exit closes it (deleting the log),
        # even if it never started.
        _LIVE.add(self)

    # --- addresses ---------------------------------------------------------------

    @property
    def endpoint_url(self) -> str:
        """``http://host:port``.

        Raises:
            S3ServerError: no port yet (never started and none given).
        """
        if self.port is None:
            raise S3ServerError("the server has no port yet; call start() first")
        return f"http://{self.host}:{self.port}"

    @property
    def pid(self) -> int | None:
        """The server process id while it runs (frozen included), else None."""
        proc = self._proc
        return proc.pid if proc is not None and proc.poll() is None else None

    @property
    def running(self) -> bool:
        """True while the child process exists (it may be frozen)."""
        return self._proc is not None and self._proc.poll() is None

    @property
    def frozen(self) -> bool:
        """True between ``freeze()`` and ``thaw()``/``stop()``/``kill()``."""
        return self._frozen and self.running

    @property
    def log_path(self) -> str:
        """The file the server's stdout and stderr go to."""
        return self._log.name

    def credentials(self) -> S3Credentials:
        """Keyword arguments for ``NixlObjBackend``/boto3: endpoint, keys, region."""
        return {
            "endpoint_url": self.endpoint_url,
            "access_key": self.access_key,
            "secret_key": self.secret_key,
            "region": self.region,
        }

    def client(self, **config: Any) -> Any:
        """A boto3 S3 client for this server (path-style, one attempt, short timeouts).

        Raises:
            ImportError: boto3 is missing (``pip install 'kvprobe[s3]'``).
        """
        import boto3
        from botocore.config import Config

        settings: dict[str, Any] = {
            "connect_timeout": 2,
            "read_timeout": 5,
            "retries": {"total_max_attempts": 1},
            "s3": {"addressing_style": "path"},
        }
        settings.update(config)
        return boto3.client(
            "s3",
            endpoint_url=self.endpoint_url,
            aws_access_key_id=self.access_key,
            aws_secret_access_key=self.secret_key,
            region_name=self.region,
            config=Config(**settings),
        )

    def create_bucket(self, name: str) -> None:
        """Create ``name`` now, and again after every restart.

        Raises:
            ValueError: ``name`` is shorter than 3 characters (S3's minimum).
            botocore errors: the server refused.
        """
        if len(name) < 3:
            raise ValueError(f"S3 bucket names have at least 3 characters, got {name!r}")
        self.client().create_bucket(Bucket=name)
        if name not in self.buckets:
            self.buckets.append(name)

    def forget_bucket(self, name: str) -> None:
        """Stop tracking ``name``: it is no longer saved by ``stop`` nor re-created by ``start``.

        The bucket itself is left as it is.  Tests sharing one server call this
        when done with their bucket, so later outages do not copy its objects.
        No error if ``name`` is not tracked.
        """
        if name in self.buckets:
            self.buckets.remove(name)

    # --- lifecycle ---------------------------------------------------------------

    def start(self: _Server) -> _Server:
        """Start the server (same port as before, if any) and wait until it answers.

        Buckets made through :meth:`create_bucket` exist again afterwards
        (moto: re-created, with the objects a ``stop(keep_data=True)``
        saved).  Does nothing if the server is already running (a frozen one
        is thawed).

        Raises:
            S3ServerError: the process exited or did not answer within
                ``startup_timeout_s`` (the message holds the log's tail); no
                process is left running.
        """
        with self._lock:
            if self.running:
                if self._frozen:
                    self._signal(signal.SIGCONT)
                    self._frozen = False
                return self
            if self.port is None:
                self.port = free_port(self.host)
            self._wait_port_free()
            self._prepare()
            self._log.seek(0)
            self._log.truncate()
            self._proc = subprocess.Popen(
                self._command(),
                stdin=subprocess.DEVNULL,
                stdout=self._log,
                stderr=subprocess.STDOUT,
                # Its own session: a Ctrl-C in the test runner is not
                # delivered to it, and no signal of ours reaches anything else.
                start_new_session=True,
            )
            try:
                self._wait_answering()
            except BaseException:
                self._terminate(graceful=False)
                raise
            self._frozen = False
        self._after_start()
        return self

    def stop(self, *, keep_data: bool = True) -> None:
        """Outage: stop the server and wait until its port refuses connections.

        Args:
            keep_data: copy the objects of :attr:`buckets` out first (only if
                the server is answering), so the next ``start`` puts them back.

        Raises:
            S3ServerError: the process survived SIGKILL (should not happen).
        """
        with self._lock:
            if not self.running:
                self._proc = None
                return
            if self._frozen:
                self._signal(signal.SIGCONT)
                self._frozen = False
        self._before_stop(keep_data)
        with self._lock:
            self._terminate(graceful=True)

    def kill(self) -> None:
        """Crash: SIGKILL the gateway now (moto loses its objects; RGW keeps them)."""
        with self._lock:
            self._on_kill()
            self._frozen = False
            if self.running:
                self._terminate(graceful=False)

    def freeze(self) -> None:
        """Hang the server (SIGSTOP): connections are accepted, nothing answers.

        Raises:
            S3ServerError: the server is not running.
        """
        with self._lock:
            if not self.running:
                raise S3ServerError("cannot freeze: the server is not running")
            self._signal(signal.SIGSTOP)
            self._frozen = True

    def thaw(self) -> None:
        """Undo :meth:`freeze` (SIGCONT) and wait until the server answers.

        Raises:
            S3ServerError: the server is not running or does not answer.
        """
        with self._lock:
            if not self.running:
                raise S3ServerError("cannot thaw: the server is not running")
            self._signal(signal.SIGCONT)
            self._frozen = False
            self._wait_answering()

    def close(self) -> None:
        """Stop for good (data discarded) and delete the log file.  Idempotent."""
        self.kill()
        self._release()
        _LIVE.discard(self)
        with contextlib.suppress(OSError):
            self._log.close()
            os.unlink(self._log.name)

    def __enter__(self: _Server) -> _Server:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "frozen" if self.frozen else "running" if self.running else "stopped"
        return f"<{type(self).__name__} {self.host}:{self.port} {state} pid={self.pid}>"

    # --- hooks of the subclasses --------------------------------------------------

    def _command(self) -> list[str]:
        raise NotImplementedError

    def _prepare(self) -> None:
        """Before each gateway start, with the lock held (e.g. boot a cluster)."""

    def _after_start(self) -> None:
        """After the gateway answers, without the lock."""

    def _before_stop(self, keep_data: bool) -> None:
        """Before a graceful stop, while the gateway still answers."""

    def _on_kill(self) -> None:
        """Before SIGKILL, with the lock held."""

    def _release(self) -> None:
        """At close, after the gateway is gone: stop everything else, delete files."""

    # --- internals ---------------------------------------------------------------

    def _signal(self, signum: int) -> None:
        assert self._proc is not None
        self._proc.send_signal(signum)

    def _terminate(self, *, graceful: bool) -> None:
        proc = self._proc
        if proc is None:
            return
        if proc.poll() is None:
            if graceful:
                proc.terminate()
                try:
                    proc.wait(self.stop_timeout_s)
                except subprocess.TimeoutExpired:
                    proc.kill()
            else:
                proc.kill()
            try:
                proc.wait(self.stop_timeout_s)
            except subprocess.TimeoutExpired as exc:
                raise S3ServerError(f"{self.kind} pid {proc.pid} survived SIGKILL") from exc
        self._proc = None
        self._frozen = False
        self._wait_port_free()

    def _answers(self, timeout_s: float) -> bool:
        try:
            with urllib.request.urlopen(self.endpoint_url + "/", timeout=timeout_s) as response:
                response.read()
            return True
        except urllib.error.HTTPError:
            return True  # an HTTP error status is still an answer
        except (OSError, ValueError):
            return False

    def _wait_answering(self) -> None:
        deadline = time.monotonic() + self.startup_timeout_s
        while time.monotonic() < deadline:
            if self._proc is None or self._proc.poll() is not None:
                raise S3ServerError(f"{self.kind} exited during start-up:\n{self._log_tail()}")
            if self._answers(0.5):
                return
            time.sleep(0.05)
        raise S3ServerError(
            f"{self.kind} did not answer on {self.endpoint_url} within {self.startup_timeout_s} s:\n{self._log_tail()}"
        )

    def _wait_port_free(self) -> None:
        # After a stop, the old process may hold the port for a moment.
        assert self.port is not None
        deadline = time.monotonic() + self.stop_timeout_s
        while time.monotonic() < deadline:
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                s.settimeout(0.2)
                if s.connect_ex((self.host, self.port)) != 0:
                    return
            time.sleep(0.05)
        raise S3ServerError(f"port {self.port} is still accepting connections after the server stopped")

    def _log_tail(self, limit: int = 2000) -> str:
        self._log.flush()
        try:
            with open(self._log.name, "rb") as f:
                return f.read()[-limit:].decode(errors="replace")
        except OSError:
            return "(no log)"


class S3Server(LocalS3Server):
    """A ``moto_server`` child process on a loopback port (moto accepts any credentials).

    Same arguments and errors as :class:`LocalS3Server`.  ``stop`` copies the
    objects out first and the next ``start`` puts them back; ``kill`` loses
    them (moto keeps everything in memory).
    """

    kind = "moto"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._saved: dict[str, dict[str, bytes]] = {}

    def _command(self) -> list[str]:
        return [sys.executable, "-m", "moto.server", "-H", self.host, "-p", str(self.port)]

    def _after_start(self) -> None:
        self._restore()

    def _before_stop(self, keep_data: bool) -> None:
        if keep_data:
            self._snapshot()

    def _on_kill(self) -> None:
        self._saved = {}

    def _snapshot(self) -> None:
        saved: dict[str, dict[str, bytes]] = {}
        if not self._answers(1.0):
            self._saved = {}
            return
        client = self.client()
        for bucket in self.buckets:
            objects: dict[str, bytes] = {}
            for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket):
                for item in page.get("Contents", []):
                    objects[item["Key"]] = client.get_object(Bucket=bucket, Key=item["Key"])["Body"].read()
            saved[bucket] = objects
        self._saved = saved

    def _restore(self) -> None:
        if not self.buckets:
            return
        client = self.client()
        existing = {b["Name"] for b in client.list_buckets().get("Buckets", [])}
        for bucket in self.buckets:
            if bucket not in existing:
                client.create_bucket(Bucket=bucket)
            for key, body in self._saved.get(bucket, {}).items():
                client.put_object(Bucket=bucket, Key=key, Body=body)
        self._saved = {}


@atexit.register
def _kill_leftovers() -> None:
    for server in list(_LIVE):
        with contextlib.suppress(Exception):
            server.close()
