"""The fault proxy: seeded, per-request faults in front of a loopback HTTP server; nothing left running."""

from __future__ import annotations

import http.client
import http.server
import os
import threading
import time
from collections.abc import Iterator

import pytest

from kvprobe.testing.faultproxy import FaultProxy


class _Upstream(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        body = self.path.encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_HEAD(self) -> None:
        self.send_response(404)
        self.send_header("Content-Length", "0")
        self.end_headers()


@pytest.fixture
def upstream() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Upstream)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def _statuses(proxy: FaultProxy, paths: list[str], method: str = "GET") -> list[object]:
    """One keep-alive connection, reopened after a reset; the status (or 'reset') per request."""
    assert proxy.port is not None
    out: list[object] = []
    conn = http.client.HTTPConnection("127.0.0.1", proxy.port, timeout=5)
    for path in paths:
        try:
            conn.request(method, path)
            response = conn.getresponse()
            body = response.read()
            if response.status == 200:
                assert body == path.encode()
            out.append(response.status)
        except (ConnectionError, http.client.HTTPException):
            out.append("reset")
            conn.close()
            conn = http.client.HTTPConnection("127.0.0.1", proxy.port, timeout=5)
    conn.close()
    return out


def test_seeded_faults_are_deterministic_and_near_their_fractions(upstream: str) -> None:
    paths = [f"/bucket/key-{i}" for i in range(300)]
    with FaultProxy(upstream, seed=11, throttle=0.2, error500=0.1, reset=0.05) as proxy:
        first = _statuses(proxy, paths)
        proxy.configure(seed=11)  # same seed, counts reset: the same decisions
        again = _statuses(proxy, paths)
        assert first == again
        counts = {s: first.count(s) for s in (200, 503, 500, "reset")}
        assert 30 <= counts[503] <= 90 and 10 <= counts[500] <= 55 and 3 <= counts["reset"] <= 35, counts
        assert proxy.stats()["done"]["throttle"] == counts[503]
        # A retried request draws afresh: the same path is not throttled for ever.
        proxy.configure(throttle=0.5, error500=0.0, reset=0.0)
        retried = _statuses(proxy, ["/bucket/same"] * 40)
        assert 200 in retried and 503 in retried
        head = _statuses(proxy, ["/bucket/h"] * 20, method="HEAD")
        assert set(head) <= {404, 503}
        pid = proxy.pid
    assert pid is not None
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_delay_is_added_to_every_forwarded_request(upstream: str) -> None:
    with FaultProxy(upstream, delay_s=0.2) as proxy:
        started = time.monotonic()
        assert _statuses(proxy, ["/a", "/b"]) == [200, 200]
        assert time.monotonic() - started >= 0.4


def test_only_loopback_and_valid_policies() -> None:
    with pytest.raises(ValueError, match="loopback"):
        FaultProxy("http://10.0.0.1:80")
    with pytest.raises(ValueError, match="fraction"):
        FaultProxy("http://127.0.0.1:9", throttle=1.5)
    with pytest.raises(ValueError, match="more than 1"):
        FaultProxy("http://127.0.0.1:9", throttle=0.6, reset=0.6)
