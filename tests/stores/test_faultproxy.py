"""The fault proxy: seeded, per-request faults in front of a loopback HTTP server; nothing left running."""

from __future__ import annotations

import http.client
import http.server
import os
import threading
import time
from collections.abc import Iterator

import pytest

from kvprobe.testing.faultproxy import FaultProxy, HeadCap


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


@pytest.mark.parametrize("delay_s", [-0.1, 60.5, float("nan"), float("inf")])
def test_a_delay_outside_0_to_60_seconds_is_refused_naming_it(delay_s: float) -> None:
    with pytest.raises(ValueError, match="delay_s"):
        FaultProxy("http://127.0.0.1:9", delay_s=delay_s)


@pytest.mark.parametrize("delay_s", [True, "1"])
def test_a_delay_that_is_not_a_number_of_seconds_is_refused(delay_s: object) -> None:
    with pytest.raises(TypeError, match="delay_s"):
        FaultProxy("http://127.0.0.1:9", delay_s=delay_s)  # type: ignore[arg-type]


def test_the_head_cap_is_a_token_bucket_of_its_rate_and_depth() -> None:
    cap = HeadCap(10.0, 3.0, now=0.0)
    assert [cap.admit(0.0) for _ in range(5)] == [True, True, True, False, False]  # the depth, then empty
    assert [cap.admit(0.05) for _ in range(2)] == [False, False]  # half a token back
    assert [cap.admit(0.1) for _ in range(2)] == [True, False]  # one token per 1/rate seconds
    assert sum(cap.admit(10.0) for _ in range(10)) == 3  # an idle bucket refills to its depth, no further
    assert all(HeadCap(0.0, 1.0, now=0.0).admit(0.0) for _ in range(100))  # rate 0: no cap


def test_heads_beyond_the_cap_get_503_without_body_and_other_methods_pass(upstream: str) -> None:
    # A cap so slow that no token comes back during the test: exactly its depth passes.
    with FaultProxy(upstream, head_rate=0.001, head_burst=3) as proxy:
        assert _statuses(proxy, ["/bucket/h"] * 10, method="HEAD") == [404] * 3 + [503] * 7
        assert _statuses(proxy, ["/a", "/b"]) == [200, 200]  # GETs are not capped
        stats = proxy.stats()
        assert stats["heads"] == 10 and stats["done"]["rate_limited"] == 7 and stats["done"]["forward"] == 5
        proxy.configure(head_rate=0.0)  # no cap: the counts restart
        assert _statuses(proxy, ["/bucket/h"] * 5, method="HEAD") == [404] * 5
        assert proxy.stats()["heads"] == 5 and "rate_limited" not in proxy.stats()["done"]
    with pytest.raises(ValueError, match="head_rate"):
        FaultProxy(upstream, head_rate=-1.0)
    with pytest.raises(ValueError, match="head_burst"):
        FaultProxy(upstream, head_rate=5.0, head_burst=0.5)
