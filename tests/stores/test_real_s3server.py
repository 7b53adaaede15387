"""The moto S3 server manager: outages on the same port, crash, freeze, clean exit."""

from __future__ import annotations

import os
import socket
import time

import pytest
from integ_harness import requires_moto

pytestmark = requires_moto


def _refuses(host: str, port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex((host, port)) != 0


def test_stop_start_kill_freeze_thaw_close() -> None:
    from kvprobe.testing.s3server import S3Server, S3ServerError

    server = S3Server()
    with pytest.raises(S3ServerError, match="start"):
        _ = server.endpoint_url
    try:
        server.start()
        port, first_pid = server.port, server.pid
        assert port is not None and first_pid is not None
        server.create_bucket("kept")
        client = server.client()
        client.put_object(Bucket="kept", Key="a/b", Body=b"payload")

        server.stop()  # outage: port refuses, objects saved
        assert not server.running and server.pid is None
        assert _refuses(server.host, port)
        server.start()
        assert server.port == port and server.pid != first_pid
        assert client.get_object(Bucket="kept", Key="a/b")["Body"].read() == b"payload"

        server.kill()  # crash: objects lost, bucket re-created empty
        assert _refuses(server.host, port)
        server.start()
        assert client.list_objects_v2(Bucket="kept").get("KeyCount") == 0

        server.freeze()  # hung: accepts connections, never answers
        assert server.frozen
        slow = server.client(read_timeout=0.5, connect_timeout=0.5)
        started = time.monotonic()
        with pytest.raises(Exception, match=r"(?i)timeout|timed out"):
            slow.head_bucket(Bucket="kept")
        assert time.monotonic() - started < 3
        server.thaw()
        assert not server.frozen
        client.head_bucket(Bucket="kept")

        server.forget_bucket("kept")
        assert server.buckets == []
        with pytest.raises(ValueError, match="3 characters"):
            server.create_bucket("ab")
        last_pid = server.pid
    finally:
        server.close()
    assert last_pid is not None
    with pytest.raises(ProcessLookupError):
        os.kill(last_pid, 0)
    assert not os.path.exists(server.log_path)
    server.close()  # idempotent


def test_only_loopback_is_allowed() -> None:
    from kvprobe.testing.s3server import S3Server

    with pytest.raises(ValueError, match="loopback"):
        S3Server(host="0.0.0.0")
