"""The Ceph RGW server manager: a real S3 server that starts, goes away, comes back and leaves nothing behind."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

import pytest
from integ_harness import skip_unless_rgw


def _refuses(host: str, port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex((host, port)) != 0


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_rgw_lifecycle_keeps_objects_and_leaves_nothing_running() -> None:
    skip_unless_rgw()
    from kvprobe.testing.rgw import RgwServer

    server = RgwServer()
    started = time.monotonic()
    try:
        server.start()
        first_start_s = time.monotonic() - started
        port, gateway = server.port, server.pid
        daemons = server.daemon_pids
        root = server.data_dir
        assert port is not None and gateway is not None and len(daemons) == 2 and root is not None
        server.create_bucket("kept")
        client = server.client()
        client.put_object(Bucket="kept", Key="a/b", Body=b"payload")
        # A real server checks signatures: a wrong secret is refused.
        bad = server.client()
        bad._request_signer._credentials.secret_key = "wrong-secret"
        with pytest.raises(Exception, match=r"SignatureDoesNotMatch|403|Forbidden"):
            bad.head_object(Bucket="kept", Key="a/b")

        server.stop()  # outage of the gateway: port refuses; the OSD keeps the data
        assert _refuses(server.host, port) and server.pid is None and _gone(gateway)
        server.start()
        assert server.port == port and server.pid != gateway
        assert client.get_object(Bucket="kept", Key="a/b")["Body"].read() == b"payload"

        server.kill()  # a crashed gateway: the cluster still holds the objects
        assert _refuses(server.host, port)
        server.start()
        assert client.get_object(Bucket="kept", Key="a/b")["Body"].read() == b"payload"

        server.freeze()  # hung: accepts connections, never answers
        slow = server.client(read_timeout=0.5, connect_timeout=0.5)
        with pytest.raises(Exception, match=r"(?i)timeout|timed out"):
            slow.head_bucket(Bucket="kept")
        server.thaw()
        client.head_bucket(Bucket="kept")
        last = [server.pid, *server.daemon_pids]
    finally:
        server.close()
    assert all(pid is not None and _gone(pid) for pid in last)
    assert not os.path.exists(root) and server.data_dir is None
    assert not os.path.exists(server.log_path)
    server.close()  # idempotent
    print(f"RGW first start (cluster boot + gateway answering): {first_start_s:.2f} s")


def test_missing_ceph_skips_with_one_line_or_fails_when_required(tmp_path: object) -> None:
    # A child process with an empty PATH: no Ceph binary is found.
    code = """
import os, sys
from kvprobe.testing.rgw import rgw_missing, rgw_required, RgwServer
from kvprobe.testing.s3server import S3ServerError
why = rgw_missing()
assert why is not None and "\\n" not in why and "apt-get install" in why, why
assert rgw_required() == (os.environ.get("KVPROBE_REQUIRE_RGW") == "1")
server = RgwServer()
try:
    server.start()
except S3ServerError as exc:
    assert "apt-get install" in str(exc)
else:
    raise SystemExit("started without Ceph")
log = server.log_path
server.close()
assert not os.path.exists(log)
print("ok")
"""
    env = {**os.environ, "PATH": "/nonexistent", "KVPROBE_REQUIRE_RGW": "1"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"
