"""What the object backend sets for, and reads from, its S3 clients: the SDK's retries, failure causes, Retry-After.

The AWS C++ SDK inside NIXL reads ``AWS_RETRY_MODE`` and ``AWS_MAX_ATTEMPTS``
when a client is built; :func:`bounded_sdk_retries` sets them around that
(see :mod:`kvprobe.backends.nixl_obj`).  :func:`classify_failure` says why a
query failed, for the counters; :func:`retry_after_of` reads a store's
``Retry-After`` from a boto3 error, for the pace; :func:`nixl_obj_params`
is the OBJ plugin's configuration, :func:`head_with_boto3` a HEAD apart
from NIXL.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any
from urllib.parse import urlparse

from kvprobe.backends._pacing import parse_retry_after

__all__ = [
    "bounded_sdk_retries",
    "classify_failure",
    "head_with_boto3",
    "new_s3_client",
    "nixl_obj_params",
    "retry_after_of",
]

_ENV_LOCK = threading.Lock()


@contextmanager
def bounded_sdk_retries(max_attempts: int | None) -> Iterator[None]:
    """Set the AWS SDK retry variables (under a process-wide lock) while a NIXL OBJ backend is created.

    None leaves the environment alone.  The previous values are restored on exit, even on error.
    """
    if max_attempts is None:
        yield
        return
    wanted = {"AWS_RETRY_MODE": "standard", "AWS_MAX_ATTEMPTS": str(max_attempts)}
    with _ENV_LOCK:
        saved = {name: os.environ.get(name) for name in wanted}
        os.environ.update(wanted)
        try:
            yield
        finally:
            for name, value in saved.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value


#: A NIXL query failing after this long had a HEAD time out: the AWS SDK
#: inside NIXL gives up on a request that transferred nothing for 3 s
#: (measured here: a frozen server fails a query after 3.0 s, curl code 28).
_NIXL_TIMEOUT_S = 2.7


def classify_failure(exc: BaseException, elapsed_s: float) -> str:
    """Why a lookup query failed: ``throttled``, ``server_error``, ``reset``, ``timed_out`` or ``other``.

    boto3's errors say it exactly (the HTTP status of a ``ClientError``, the
    exception type of a transport error).  A NIXL query raises the same
    ``NIXL_ERR_BACKEND`` for a 503, a 500 and a reset, so it is ``other``,
    unless it took as long as the SDK's request timeout: ``timed_out``.
    """
    try:
        from botocore.exceptions import (
            ClientError,
            ConnectionClosedError,
            ConnectTimeoutError,
            ReadTimeoutError,
        )
    except ImportError:
        pass
    else:
        if isinstance(exc, ClientError):
            status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
            code = str(exc.response.get("Error", {}).get("Code", ""))
            if status == 503 or code == "SlowDown":
                return "throttled"
            if isinstance(status, int) and status >= 500:
                return "server_error"
            return "other"
        if isinstance(exc, (ConnectionClosedError, ConnectionResetError)):
            return "reset"
        if isinstance(exc, (ReadTimeoutError, ConnectTimeoutError, TimeoutError)):
            return "timed_out"
    if isinstance(exc, ConnectionResetError):
        return "reset"
    if isinstance(exc, TimeoutError) or elapsed_s >= _NIXL_TIMEOUT_S:
        return "timed_out"
    return "other"


def retry_after_of(exc: BaseException) -> float | None:
    """The seconds of a failure's ``Retry-After`` header (boto3's errors carry the headers), or None."""
    response = getattr(exc, "response", None)
    if not isinstance(response, dict):
        return None
    headers = response.get("ResponseMetadata", {}).get("HTTPHeaders", {})
    if not isinstance(headers, dict):
        return None
    value = next((v for k, v in headers.items() if str(k).lower() == "retry-after"), None)
    return parse_retry_after(str(value)) if value is not None else None


def new_s3_client(
    endpoint_url: str | None,
    region: str,
    credentials: tuple[str | None, str | None, str | None],
    *,
    timeout_s: float,
    connections: int,
) -> Any:
    """A boto3 S3 client with one attempt per request (the caller retries), path addressing, short timeouts.

    ``credentials``: access key, secret key, session token (None: the SDK's chain).

    Raises:
        ImportError: boto3 is missing (names ``kvprobe[s3]``).
    """
    try:
        import boto3
        from botocore.config import Config
    except ImportError as exc:
        raise ImportError(
            "NixlObjBackend's connection check and writers need boto3; pip install 'kvprobe[s3]'"
        ) from exc
    access_key, secret_key, session_token = credentials
    return boto3.client(
        "s3",
        endpoint_url=endpoint_url,
        region_name=region,
        aws_access_key_id=access_key,
        aws_secret_access_key=secret_key,
        aws_session_token=session_token,
        config=Config(
            connect_timeout=timeout_s,
            read_timeout=timeout_s,
            retries={"total_max_attempts": 1},
            max_pool_connections=connections,
            s3={"addressing_style": "path"},
        ),
    )


def nixl_obj_params(
    bucket: str,
    region: str,
    agent_threads: int,
    endpoint_url: str | None,
    credentials: tuple[str | None, str | None, str | None],
    extra_params: Mapping[str, str],
) -> dict[str, str]:
    """The OBJ plugin's backend parameters; ``credentials`` is (access key, secret key, session token).

    Raises:
        ValueError: ``endpoint_url`` is not ``http(s)://host[:port]``.
    """
    params = {"bucket": bucket, "region": region, "num_threads": str(agent_threads)}
    if endpoint_url:
        parsed = urlparse(endpoint_url)
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise ValueError(f"endpoint_url must look like http(s)://host:port, got {endpoint_url!r}")
        params["endpoint_override"] = endpoint_url
        params["scheme"] = parsed.scheme
    for name, value in zip(("access_key", "secret_key", "session_token"), credentials, strict=True):
        if value:
            params[name] = value
    params.update({str(k): str(v) for k, v in extra_params.items()})
    return params


def head_with_boto3(client: Any, bucket: str, name: str) -> Any:
    """One HEAD through boto3: ``{}`` if stored, None if absent (404); raises boto3's error otherwise."""
    from botocore.exceptions import ClientError

    try:
        client.head_object(Bucket=bucket, Key=name)
    except ClientError as exc:
        if exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode") == 404:
            return None
        raise
    return {}
