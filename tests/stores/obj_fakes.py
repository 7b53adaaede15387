"""Fake object stores: one for the lookup engine's tests (answers like a NIXL OBJ query, fails a query whole),
one on loopback HTTP for the backend's (plays an S3 store, a throttling one, or a server that is not S3)."""

from __future__ import annotations

import http.server
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, ClassVar

__all__ = ["FakeEndpoint", "FakeStore", "serve_endpoint"]


class FakeStore:
    """``query(names)``: one answer per name (``{}`` stored, ``None`` absent), raising when a name is failing.

    ``fail_times[name]``: how many more queries holding ``name`` fail whole,
    raising ``error()`` (NIXL's ``NIXL_ERR_BACKEND`` by default).
    Records each query's size and first name, and the peak of concurrent queries.
    """

    def __init__(
        self,
        stored: set[str],
        fail_times: dict[str, int],
        delay_s: float = 0.0,
        error: Callable[[], BaseException] = lambda: RuntimeError("NIXL_ERR_BACKEND"),
    ) -> None:
        self.stored = stored
        self.error = error
        self.fail_times = Counter(fail_times)  # how many more times a query holding the name fails
        self.delay_s = delay_s
        self.sizes: list[int] = []
        self.order: list[str] = []  # each query's first name, in the order queries started
        self.lock = threading.Lock()
        self.concurrent = 0
        self.peak = 0

    def query(self, names: Sequence[str]) -> list[Any]:
        with self.lock:
            self.sizes.append(len(names))
            self.order.append(names[0])
            self.concurrent += 1
            self.peak = max(self.peak, self.concurrent)
            failing = [n for n in names if self.fail_times[n] > 0]
            for n in failing:
                self.fail_times[n] -= 1
        try:
            if self.delay_s:
                time.sleep(self.delay_s)
            if failing:
                raise self.error()
            return [{} if n in self.stored else None for n in names]
        finally:
            with self.lock:
                self.concurrent -= 1


SLOWDOWN = (
    b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>SlowDown</Code>'
    b"<Message>Please reduce your request rate.</Message></Error>"
)


class FakeEndpoint(http.server.BaseHTTPRequestHandler):
    """An HTTP endpoint playing an S3 store, or not: subclass it per test (the sets are class attributes).

    ``mode``: ``throttle`` (503 SlowDown to everything), ``all-stored`` (200
    to every HEAD but the bucket's), ``s3`` (404 for every object but
    ``stored``; 503 for those in ``failing``, and for the object HEADs whose
    place in :attr:`heads` is in ``throttle_at``: a random 503 of a gateway);
    the bucket's HEAD is throttled while ``throttle_bucket``.  Object names
    are matched by their last part.
    """

    protocol_version = "HTTP/1.1"
    mode: ClassVar[str] = "throttle"
    throttle_bucket: ClassVar[bool] = True
    stored: ClassVar[set[str]] = set()
    failing: ClassVar[set[str]] = set()
    heads: ClassVar[list[str]] = []  # the last part of every object HEAD's path, in order
    throttle_at: ClassVar[set[int]] = set()

    def log_message(self, *args: object) -> None:
        pass

    def _send(self, status: int, body: bytes = b"") -> None:
        self.send_response(status)
        self.send_header("x-amz-request-id", "tx0001")
        self.send_header("Content-Type", "application/xml")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if body and self.command != "HEAD":
            self.wfile.write(body)

    def _is_bucket(self) -> bool:
        return self.path.split("?")[0].strip("/").count("/") == 0

    def do_HEAD(self) -> None:
        if self.mode == "throttle" or (self._is_bucket() and self.throttle_bucket):
            self._send(503)
        elif self._is_bucket() or self.mode == "all-stored":
            self._send(200)
        else:
            name = self.path.split("?")[0].rsplit("/", 1)[-1]
            place = len(self.heads)
            self.heads.append(name)
            failing = name in self.failing or place in self.throttle_at
            self._send(503 if failing else 200 if name in self.stored else 404)

    def do_GET(self) -> None:  # a listing: S3's throttling says so in its body
        self._send(503, SLOWDOWN)


@contextmanager
def serve_endpoint(**attributes: Any) -> Iterator[Any]:
    """A :class:`FakeEndpoint` of its own (``attributes`` set on its class) served on loopback; ``.url`` set."""
    handler: Any = type("Handler", (FakeEndpoint,), {"stored": set(), "failing": set(), "heads": []} | attributes)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    handler.url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        yield handler
    finally:
        server.shutdown()
        server.server_close()
