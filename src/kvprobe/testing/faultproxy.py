"""A fault-injecting HTTP proxy in front of a local S3 server (loopback only).

:class:`FaultProxy` runs ``python -m kvprobe.testing.faultproxy`` as a child
process on a free loopback port.  Clients talk S3 to the proxy as if it were
the server (same signatures: the proxy forwards the request bytes unchanged,
and the ``Host`` header is the client's own, which SigV4 signed).  For each
request it decides, independently, to

* answer ``503 SlowDown`` itself (S3's throttling reply) — fraction ``throttle``;
* answer ``500 InternalError`` itself — fraction ``error500``;
* reset the connection (TCP RST, no answer) — fraction ``reset``;
* otherwise forward it, after ``delay_s`` seconds (an added round trip).

Before those draws, a **HEAD rate cap** (``head_rate`` HEADs per second, 0 for
none) plays a store prefix's request limit: a token bucket ``head_burst``
HEADs deep (default a tenth of a second of the rate, at least 1), shared by
every connection, admits HEADs; each HEAD beyond it is answered ``503
SlowDown`` with headers only (a HEAD's answer has no body) and counted
``rate_limited``.  Other methods pass uncapped.  ``heads`` in the stats
counts every HEAD received, so ``rate_limited / heads`` is the throttled
fraction a fleet met.

Decisions are deterministic for a seed: each request's draw is a hash of
``(seed, method, target, n)`` where ``n`` counts earlier requests with the
same method and target, so a retried HEAD draws afresh and the outcome for
each key does not depend on how concurrent requests interleave.

The proxy parses requests only (one at a time per connection, as HTTP/1.1
clients without pipelining send them: AWS SDKs and boto3 do); responses are
piped back byte for byte.  Control requests on the proxy's own port, never
forwarded and never counted: ``PUT /__faultproxy__/config`` (JSON body with
any of the fractions, ``delay_s``, ``seed``; resets the per-request counts)
and ``GET /__faultproxy__/stats`` (JSON counts of what was done).

Example::

    with RgwServer() as s3, FaultProxy(s3.endpoint_url, throttle=0.05, seed=1) as proxy:
        backend = NixlObjBackend(bucket="kvblocks", **{**s3.credentials(), "endpoint_url": proxy.endpoint_url})
"""

from __future__ import annotations

import argparse
import asyncio
import atexit
import contextlib
import hashlib
import json
import socket
import struct
import subprocess
import sys
import tempfile
import time
import urllib.request
import weakref
from collections import Counter
from collections.abc import Sequence
from types import TracebackType
from typing import Any
from urllib.parse import urlparse

from kvprobe.backends.timeouts import check_seconds
from kvprobe.testing.s3server import S3ServerError, free_port

__all__ = ["FaultProxy", "HeadCap", "default_burst", "main"]

_CONTROL = "/__faultproxy__/"
_LIVE: weakref.WeakSet[FaultProxy] = weakref.WeakSet()
_FRACTIONS = ("throttle", "error500", "reset")
_CAP = ("head_rate", "head_burst")
#: The longest delay the proxy adds to a request, in seconds.
MAX_DELAY_S = 60.0


def default_burst(head_rate: float) -> float:
    """The cap's default depth: a tenth of a second of ``head_rate``, at least one HEAD."""
    return max(1.0, 0.1 * head_rate)


class HeadCap:
    """A token bucket admitting at most ``rate`` HEADs per second, ``burst`` at once; pure (clock injected).

    ``rate`` 0 admits everything.  The bucket starts full.
    """

    def __init__(self, rate: float, burst: float, now: float) -> None:
        self.rate = rate
        self.burst = burst
        self.tokens = burst
        self.last = now

    def admit(self, now: float) -> bool:
        """Whether one HEAD arriving at ``now`` is within the cap (it then takes a token)."""
        if self.rate <= 0:
            return True
        self.tokens = min(self.burst, self.tokens + max(0.0, now - self.last) * self.rate)
        self.last = max(self.last, now)
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return True
        return False


class _Policy:
    """What to do with each request; the counts of what was done."""

    def __init__(
        self, seed: int, throttle: float, error500: float, reset: float, delay_s: float, head_rate: float = 0.0
    ) -> None:
        self.seed = seed
        self.fractions = {"throttle": throttle, "error500": error500, "reset": reset}
        self.delay_s = delay_s
        self.seen: Counter[str] = Counter()
        self.done: Counter[str] = Counter()
        self.inflight = 0
        self.peak_inflight = 0
        self.heads = 0  # HEADs received (control requests aside)
        self.cap = HeadCap(head_rate, default_burst(head_rate), time.monotonic())

    def update(self, config: dict[str, Any]) -> None:
        for name in _FRACTIONS:
            if name in config:
                self.fractions[name] = float(config[name])
        if "delay_s" in config:
            self.delay_s = float(config["delay_s"])
        if "seed" in config:
            self.seed = int(config["seed"])
        if "head_rate" in config or "head_burst" in config:
            rate = float(config.get("head_rate", self.cap.rate))
            burst = config.get("head_burst")
            self.cap = HeadCap(rate, default_burst(rate) if burst is None else float(burst), time.monotonic())
        self.seen.clear()
        self.done.clear()
        self.peak_inflight = 0
        self.heads = 0

    def capped(self, method: str) -> bool:
        """Count a request; True when it is a HEAD beyond the rate cap (answer it 503)."""
        if method != "HEAD":
            return False
        self.heads += 1
        if self.cap.admit(time.monotonic()):
            return False
        self.done["rate_limited"] += 1
        return True

    def decide(self, method: str, target: str) -> str:
        ident = f"{method} {target}"
        n = self.seen[ident]
        self.seen[ident] += 1
        digest = hashlib.sha256(f"{self.seed}|{ident}|{n}".encode()).digest()
        draw = int.from_bytes(digest[:8], "big") / 2**64
        edge = 0.0
        for name in _FRACTIONS:
            edge += self.fractions[name]
            if draw < edge:
                return name
        return "forward"


def _error(status: str, code: str, message: str, head_only: bool) -> bytes:
    body = f'<?xml version="1.0" encoding="UTF-8"?><Error><Code>{code}</Code><Message>{message}</Message></Error>'
    data = body.encode()
    head = (
        f"HTTP/1.1 {status}\r\nContent-Type: application/xml\r\nContent-Length: {len(data)}\r\n"
        "x-amz-request-id: faultproxy\r\n\r\n"
    ).encode()
    return head if head_only else head + data


async def _read_body(reader: asyncio.StreamReader, headers: dict[str, str]) -> bytes:
    if headers.get("transfer-encoding", "").lower() == "chunked":
        parts = []
        while True:
            line = await reader.readuntil(b"\r\n")
            parts.append(line)
            size = int(line.split(b";")[0].strip(), 16)
            if size == 0:
                while True:  # trailers, then the blank line
                    trailer = await reader.readuntil(b"\r\n")
                    parts.append(trailer)
                    if trailer == b"\r\n":
                        return b"".join(parts)
            parts.append(await reader.readexactly(size + 2))
    length = int(headers.get("content-length", "0") or 0)
    return await reader.readexactly(length) if length else b""


async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(ConnectionError, OSError):
        while True:
            data = await reader.read(65536)
            if not data:
                break
            writer.write(data)
            await writer.drain()
    with contextlib.suppress(ConnectionError, OSError, RuntimeError):
        writer.close()


def _reset(writer: asyncio.StreamWriter) -> None:
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


async def _serve(policy: _Policy, upstream: tuple[str, int], reader: asyncio.StreamReader, writer: Any) -> None:
    up_writer: asyncio.StreamWriter | None = None
    pump: asyncio.Task[None] | None = None
    try:
        while True:
            try:
                head = await reader.readuntil(b"\r\n\r\n")
            except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError):
                return
            lines = head.decode("latin-1").split("\r\n")
            method, target, _ = [*lines[0].split(" ", 2), "", ""][:3]
            headers = {k.strip().lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines[1:] if ln)}
            body = await _read_body(reader, headers)
            if target.startswith(_CONTROL):
                writer.write(_control(policy, method, target, body))
                await writer.drain()
                continue
            if policy.capped(method):
                writer.write(_error("503 Slow Down", "SlowDown", "Please reduce your request rate.", True))
                await writer.drain()
                continue
            action = policy.decide(method, target)
            policy.done[action] += 1
            if action == "throttle":
                writer.write(_error("503 Slow Down", "SlowDown", "Please reduce your request rate.", method == "HEAD"))
                await writer.drain()
                continue
            if action == "error500":
                writer.write(_error("500 Internal Server Error", "InternalError", "Injected.", method == "HEAD"))
                await writer.drain()
                continue
            if action == "reset":
                _reset(writer)
                return
            policy.inflight += 1
            policy.peak_inflight = max(policy.peak_inflight, policy.inflight)
            try:
                if policy.delay_s > 0:
                    await asyncio.sleep(policy.delay_s)
                if up_writer is None or pump is None or pump.done():
                    up_reader, up_writer = await asyncio.open_connection(*upstream)
                    pump = asyncio.ensure_future(_pump(up_reader, writer))
                up_writer.write(head + body)
                await up_writer.drain()
            finally:
                policy.inflight -= 1
    except (ConnectionError, OSError):
        return
    finally:
        if up_writer is not None:
            with contextlib.suppress(ConnectionError, OSError, RuntimeError):
                up_writer.close()
        with contextlib.suppress(ConnectionError, OSError, RuntimeError):
            writer.close()


def _control(policy: _Policy, method: str, target: str, body: bytes) -> bytes:
    if method == "PUT" and target == _CONTROL + "config":
        policy.update(json.loads(body or b"{}"))
    payload = json.dumps(
        {
            "done": dict(policy.done),
            "fractions": policy.fractions,
            "delay_s": policy.delay_s,
            "seed": policy.seed,
            "peak_inflight": policy.peak_inflight,
            "heads": policy.heads,
            "head_rate": policy.cap.rate,
            "head_burst": policy.cap.burst,
        }
    ).encode()
    return b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (
        len(payload),
        payload,
    )


async def _run(args: argparse.Namespace) -> None:
    policy = _Policy(args.seed, args.throttle, args.error500, args.reset, args.delay_s, args.head_rate)
    if args.head_burst is not None:
        policy.update({"head_burst": args.head_burst})
    upstream = (args.upstream_host, args.upstream_port)
    server = await asyncio.start_server(
        lambda r, w: _serve(policy, upstream, r, w), args.host, args.port, backlog=1024, limit=1 << 20
    )
    async with server:
        await server.serve_forever()


def main(argv: Sequence[str] | None = None) -> int:
    """Run the proxy in this process until killed (the entry point of :class:`FaultProxy`'s child)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--upstream-host", default="127.0.0.1")
    parser.add_argument("--upstream-port", type=int, required=True)
    parser.add_argument("--seed", type=int, default=0)
    for name in (*_FRACTIONS, "delay_s"):
        parser.add_argument(f"--{name.replace('_', '-')}", dest=name, type=float, default=0.0)
    parser.add_argument("--head-rate", type=float, default=0.0, help="HEADs per second beyond which HEADs get 503")
    parser.add_argument("--head-burst", type=float, default=None, help="the cap's depth (HEADs)")
    args = parser.parse_args(argv)
    for host in (args.host, args.upstream_host):
        if not host.startswith("127."):
            parser.error(f"the fault proxy is loopback only, got {host!r}")
    asyncio.run(_run(args))
    return 0


class FaultProxy:
    """The proxy as a child process on a free loopback port, stopped by its pid.

    Args:
        upstream_url: ``http://127.x.y.z:port`` of the S3 server.
        seed, throttle, error500, reset, delay_s, head_rate, head_burst: the
            initial policy (see the module docstring; ``head_burst`` None is
            :func:`default_burst`); change it later with :meth:`configure`.
        startup_timeout_s: how long ``start`` waits for the proxy to answer.

    Raises:
        ValueError: the upstream is not a loopback ``http`` URL, a
            fraction is outside [0, 1] (or their sum above 1), ``delay_s``
            is outside [0, 60], ``head_rate`` is negative or not finite, or
            ``head_burst`` is below 1.
        TypeError: ``delay_s`` is not a number (``bool`` included).
    """

    def __init__(
        self,
        upstream_url: str,
        *,
        seed: int = 0,
        throttle: float = 0.0,
        error500: float = 0.0,
        reset: float = 0.0,
        delay_s: float = 0.0,
        head_rate: float = 0.0,
        head_burst: float | None = None,
        startup_timeout_s: float = 20.0,
    ) -> None:
        parsed = urlparse(upstream_url)
        if parsed.scheme != "http" or not (parsed.hostname or "").startswith("127.") or parsed.port is None:
            raise ValueError(f"FaultProxy forwards to a loopback http://127.x.y.z:port only, got {upstream_url!r}")
        _check_policy(throttle=throttle, error500=error500, reset=reset, delay_s=delay_s)
        _check_cap(head_rate, head_burst)
        self.upstream = (parsed.hostname or "127.0.0.1", parsed.port)
        self.host = "127.0.0.1"
        self.port: int | None = None
        self._initial: dict[str, float | None] = {
            "seed": seed, "throttle": throttle, "error500": error500, "reset": reset, "delay_s": delay_s,
            "head_rate": head_rate, "head_burst": head_burst,
        }  # fmt: skip
        self.startup_timeout_s = startup_timeout_s
        self._proc: subprocess.Popen[bytes] | None = None
        self._log = tempfile.TemporaryFile(prefix="kvprobe-faultproxy-")

    @property
    def endpoint_url(self) -> str:
        """``http://127.0.0.1:port`` of the proxy (clients use it as the S3 endpoint).

        Raises:
            S3ServerError: not started.
        """
        if self.port is None:
            raise S3ServerError("the fault proxy has not been started")
        return f"http://{self.host}:{self.port}"

    @property
    def pid(self) -> int | None:
        """The proxy's process id while it runs."""
        return self._proc.pid if self._proc is not None and self._proc.poll() is None else None

    def start(self) -> FaultProxy:
        """Start the child process and wait until it answers its control path.

        Raises:
            S3ServerError: it exited or did not answer within ``startup_timeout_s``.
        """
        if self.pid is not None:
            return self
        self.port = free_port(self.host)
        argv = [sys.executable, "-m", "kvprobe.testing.faultproxy", "--port", str(self.port)]
        argv += ["--upstream-host", self.upstream[0], "--upstream-port", str(self.upstream[1])]
        for name, value in self._initial.items():
            if value is not None:
                argv += [f"--{name.replace('_', '-')}", str(value)]
        self._proc = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True
        )
        _LIVE.add(self)
        deadline = time.monotonic() + self.startup_timeout_s
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                break
            with contextlib.suppress(OSError, ValueError):
                self.stats()
                return self
            time.sleep(0.05)
        self.close()
        raise S3ServerError("the fault proxy did not start")

    def configure(self, **policy: float) -> dict[str, Any]:
        """Change the policy (``throttle``, ``error500``, ``reset``, ``delay_s``, ``seed``, ``head_rate``,
        ``head_burst``); resets the counts (and refills the cap's bucket when it changes).

        Raises:
            ValueError: an unknown name or a value out of range (nothing changes).
            S3ServerError: the proxy is not running.
        """
        unknown = set(policy) - {*_FRACTIONS, *_CAP, "delay_s", "seed"}
        if unknown:
            raise ValueError(f"unknown fault proxy settings: {sorted(unknown)}")
        current = self.stats()
        merged = {**current["fractions"], "delay_s": current["delay_s"], **policy}
        _check_policy(**{k: float(v) for k, v in merged.items() if k not in ("seed", *_CAP)})
        if _CAP[0] in policy or _CAP[1] in policy:
            _check_cap(float(policy.get("head_rate", current["head_rate"])), policy.get("head_burst"))
        return self._call("PUT", "config", json.dumps(policy).encode())

    def stats(self) -> dict[str, Any]:
        """``{"done": {action: count}, "fractions", "delay_s", "seed", "peak_inflight", "heads", "head_rate",
        "head_burst"}`` (counts since the last configure).

        Raises:
            S3ServerError: the proxy is not running.
        """
        return self._call("GET", "stats", None)

    def _call(self, method: str, what: str, body: bytes | None) -> dict[str, Any]:
        request = urllib.request.Request(self.endpoint_url + _CONTROL + what, data=body, method=method)
        with urllib.request.urlopen(request, timeout=5) as response:
            answer: dict[str, Any] = json.loads(response.read())
        return answer

    def close(self) -> None:
        """Kill the child by its pid and wait for it.  Idempotent."""
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait(10)
        with contextlib.suppress(OSError):
            self._log.close()

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def _check_policy(*, throttle: float, error500: float, reset: float, delay_s: float) -> None:
    fractions = {"throttle": throttle, "error500": error500, "reset": reset}
    for name, value in fractions.items():
        if not 0.0 <= value <= 1.0:
            raise ValueError(f"{name} must be a fraction in [0, 1], got {value!r}")
    if sum(fractions.values()) > 1.0:
        raise ValueError(f"the fault fractions add up to more than 1: {fractions}")
    check_seconds("delay_s", delay_s, limit=MAX_DELAY_S, limit_name="the proxy's longest delay", zero_ok=True)


def _check_cap(head_rate: float, head_burst: float | None) -> None:
    if not 0.0 <= head_rate < float("inf"):
        raise ValueError(f"head_rate must be a finite number of HEADs per second >= 0, got {head_rate!r}")
    if head_burst is not None and not 1.0 <= head_burst < float("inf"):
        raise ValueError(f"head_burst must be a finite number of HEADs >= 1, got {head_burst!r}")


@atexit.register
def _kill_leftovers() -> None:
    for proxy in list(_LIVE):
        with contextlib.suppress(Exception):
            proxy.close()


if __name__ == "__main__":
    sys.exit(main())
