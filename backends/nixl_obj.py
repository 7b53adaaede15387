"""An S3 object-store tier probed through NIXL's OBJ plugin.

A group is one ``query_memory(descs, "OBJ", "OBJ")`` call with descriptors
``(0, 1, 0, object_name)``; NIXL issues the HEAD requests in parallel on
``num_threads`` threads.  It answers a dict for an existing object (possibly
empty: test with ``is not None``) and ``None`` for a 404; any other failure of
any key (unreachable endpoint, timeout, 403, 5xx) raises for the whole call,
and the manager resolves the group as MISS.

Bounding the AWS SDK (inside NIXL).  By default the SDK retries each failed
HEAD about ten times with back-off: with the server down that is ~25 s per
key, ``num_threads`` keys at a time.  Before each ``create_backend`` this
module sets ``AWS_RETRY_MODE=standard`` and ``AWS_MAX_ATTEMPTS=<max_attempts>``
(default 1: no retry) in the process environment, under a lock, and restores
the previous values right after (the SDK reads them when the client is built;
verified here: the setting sticks).  NIXL exposes no connect/request
timeouts; the SDK's defaults apply (measured here: a refused connection fails
in well under 1 ms per key; a frozen server costs about 3 s per key, so a
group of N keys takes about ``ceil(N / num_threads) * 3`` s).  Give the
manager a ``lookup_timeout_s`` so a frozen server never holds the scheduler:
a call past it is reported as TIMEOUT, and because each concurrent call uses
its own agent (up to ``max_agents``) later groups are not queued behind it.

Connection check at construction: a ``HeadBucket`` through ``boto3`` (the
``s3`` extra) with one attempt and short timeouts, because a missing bucket
is invisible to ``query_memory`` (every key just looks missing); then one
NIXL query of a probe name, which fails at once for an unreachable endpoint
or rejected credentials.  Without ``boto3`` only the NIXL probe runs and a
missing bucket cannot be told from an empty one (a warning says so).

Writers (``store``/``remove``) PUT and DELETE through ``boto3``, an S3 client
independent of NIXL, so tests check NIXL's verdicts against a separate truth.
"""

from __future__ import annotations

import os
import threading
import warnings
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any
from urllib.parse import urlparse

from kvprobe.backends._nixl_import import AgentPool
from kvprobe.backends.base import Key
from kvprobe.backends.layout import relative_name

__all__ = ["BucketNotFoundError", "NixlObjBackend", "ObjStoreUnavailableError"]

_ENV_LOCK = threading.Lock()
_PROBE_NAME = "kvprobe-connection-check/none"


class ObjStoreUnavailableError(ConnectionError):
    """The object store could not be used: unreachable, refused, or credentials rejected."""


class BucketNotFoundError(ObjStoreUnavailableError):
    """The bucket does not exist at the endpoint."""


@contextmanager
def _bounded_sdk_retries(max_attempts: int | None) -> Iterator[None]:
    """Set the AWS SDK retry variables while a NIXL OBJ backend is created."""
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


def _normalize_prefix(prefix: str) -> str:
    if not isinstance(prefix, str):
        raise TypeError(f"prefix must be a str, got {type(prefix).__name__}")
    prefix = prefix.lstrip("/")
    if prefix and not prefix.endswith("/"):
        prefix += "/"
    return prefix


class NixlObjBackend:
    """Blocks as S3 objects ``<prefix><layout name>``, looked up by NIXL OBJ.

    Args:
        bucket: bucket name (at least 3 characters).
        endpoint_url: e.g. ``"http://127.0.0.1:9000"``; None uses
            ``AWS_ENDPOINT_URL`` if set, else AWS itself.  The scheme is taken
            from the URL.
        access_key, secret_key, session_token: credentials; each one not
            given is read from ``AWS_ACCESS_KEY_ID`` / ``AWS_SECRET_ACCESS_KEY``
            / ``AWS_SESSION_TOKEN``; if still absent the SDK's default chain
            (profiles, instance roles) applies.
        region: None reads ``AWS_REGION``, then ``AWS_DEFAULT_REGION``, else
            ``us-east-1``.
        prefix: prepended to every object name; a ``/`` is added if missing.
        num_threads: parallel HEADs per query (NIXL's OBJ ``num_threads``).
        max_attempts: ``AWS_MAX_ATTEMPTS`` for the SDK (1 = no retries);
            None leaves the environment alone (the SDK then retries ~10
            times with back-off: tens of seconds per key during an outage).
        connect_timeout_s: timeouts of the boto3 connection check and writers.
        max_agents: concurrent ``batch_lookup`` calls allowed (one NIXL agent
            each, each with ``num_threads`` threads).
        extra_params: more OBJ ``create_backend`` parameters (strings), e.g.
            ``use_virtual_addressing`` or ``ca_bundle``; they override ours.
        check: run the connection check (see the module docstring).

    Raises:
        ImportError: NIXL or its OBJ plugin is missing (names ``kvprobe[nixl]``).
        TypeError / ValueError: a malformed argument.
        BucketNotFoundError: the bucket does not exist (needs boto3).
        ObjStoreUnavailableError: the endpoint is unreachable or rejects us.
        RuntimeError: NIXL could not create the agent or backend.
        No agent is left alive after any of these.
    """

    def __init__(
        self,
        bucket: str,
        endpoint_url: str | None = None,
        access_key: str | None = None,
        secret_key: str | None = None,
        region: str | None = None,
        prefix: str = "",
        num_threads: int = 16,
        *,
        session_token: str | None = None,
        max_attempts: int | None = 1,
        connect_timeout_s: float = 2.0,
        max_agents: int = 8,
        extra_params: Mapping[str, str] | None = None,
        check: bool = True,
    ) -> None:
        if not isinstance(bucket, str) or len(bucket) < 3:
            raise ValueError(f"bucket must be a name of at least 3 characters, got {bucket!r}")
        if isinstance(num_threads, bool) or not isinstance(num_threads, int) or num_threads < 1:
            raise ValueError(f"num_threads must be a positive int, got {num_threads!r}")
        if max_attempts is not None and (
            isinstance(max_attempts, bool) or not isinstance(max_attempts, int) or max_attempts < 1
        ):
            raise ValueError(f"max_attempts must be a positive int or None, got {max_attempts!r}")
        self.bucket = bucket
        self.prefix = _normalize_prefix(prefix)
        self.endpoint_url = endpoint_url if endpoint_url is not None else os.environ.get("AWS_ENDPOINT_URL")
        self.region = region or os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"
        self.num_threads = num_threads
        self.max_attempts = max_attempts
        self.connect_timeout_s = float(connect_timeout_s)
        self._access_key = access_key if access_key is not None else os.environ.get("AWS_ACCESS_KEY_ID")
        self._secret_key = secret_key if secret_key is not None else os.environ.get("AWS_SECRET_ACCESS_KEY")
        self._session_token = session_token if session_token is not None else os.environ.get("AWS_SESSION_TOKEN")
        self._s3: Any = None

        params = {"bucket": bucket, "region": self.region, "num_threads": str(num_threads)}
        if self.endpoint_url:
            parsed = urlparse(self.endpoint_url)
            if parsed.scheme not in ("http", "https") or not parsed.netloc:
                raise ValueError(f"endpoint_url must look like http(s)://host:port, got {self.endpoint_url!r}")
            params["endpoint_override"] = self.endpoint_url
            params["scheme"] = parsed.scheme
        if self._access_key:
            params["access_key"] = self._access_key
        if self._secret_key:
            params["secret_key"] = self._secret_key
        if self._session_token:
            params["session_token"] = self._session_token
        params.update({str(k): str(v) for k, v in (extra_params or {}).items()})

        self._pool = AgentPool(
            "obj",
            "OBJ",
            params,
            max_agents=max_agents,
            before_create=lambda: _bounded_sdk_retries(max_attempts),
        )
        if check:
            try:
                self.check_connection()
            except BaseException:
                self._pool.close()
                raise

    # --- the BlockStore protocol ------------------------------------------------

    @property
    def agent_names(self) -> list[str]:
        """Names of the NIXL agents this backend created (unique per instance)."""
        return list(self._pool.names)

    def locate(self, key: Key) -> str:
        """The object name of ``key``'s block: ``prefix`` + the shared layout name.

        Raises:
            TypeError: ``key`` is not ``bytes``.
        """
        return self.prefix + relative_name(key)

    def batch_lookup(self, keys: Sequence[Key], req_context: object) -> list[bool]:
        """One verdict per key from a single ``query_memory`` call (parallel HEADs).

        Raises:
            TypeError: a key is not ``bytes`` (before NIXL is called).
            RuntimeError: the backend is closed or all its agents are busy.
            Exception: NIXL's error (e.g. ``nixlBackendError``) when any HEAD
                failed with anything but 404; the manager turns it into MISS.
        """
        del req_context
        if not keys:
            return []
        descs = [(0, 1, 0, self.locate(k)) for k in keys]
        with self._pool.agent() as agent:
            answers: list[Any] = agent.query_memory(descs, "OBJ", "OBJ")
        if len(answers) != len(descs):
            raise RuntimeError(f"NIXL OBJ answered {len(answers)} results for {len(descs)} objects")
        return [a is not None for a in answers]

    def store(self, key: Key, data: bytes = b"") -> None:
        """PUT ``key``'s block (through boto3, independent of NIXL).

        Raises:
            TypeError: ``key`` or ``data`` is not bytes.
            ImportError: boto3 is missing (names ``kvprobe[s3]``).
            botocore.exceptions.BotoCoreError / ClientError: the PUT failed.
        """
        name = self.locate(key)
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise TypeError(f"data must be bytes, got {type(data).__name__}")
        self._client().put_object(Bucket=self.bucket, Key=name, Body=bytes(data))

    def remove(self, key: Key) -> None:
        """DELETE ``key``'s block; no error if it is not stored (S3 semantics).

        Raises:
            TypeError: ``key`` is not ``bytes``.
            ImportError: boto3 is missing (names ``kvprobe[s3]``).
            botocore.exceptions.BotoCoreError / ClientError: the DELETE failed.
        """
        name = self.locate(key)
        self._client().delete_object(Bucket=self.bucket, Key=name)

    # --- connection check and lifetime ------------------------------------------

    def check_connection(self) -> None:
        """Verify the endpoint answers, the bucket exists and NIXL can query it.

        Raises:
            BucketNotFoundError: HeadBucket said 404 (checked only with boto3).
            ObjStoreUnavailableError: unreachable, timed out, or rejected
                (HeadBucket, or NIXL's probe query raised).
        """
        where = f"bucket {self.bucket!r} at {self.endpoint_url or 'AWS'}"
        try:
            client = self._client()
        except ImportError:
            warnings.warn(
                f"boto3 is not installed, so NixlObjBackend cannot tell a missing {where} from an empty one; "
                "install kvprobe[s3] for that check",
                RuntimeWarning,
                stacklevel=3,
            )
        else:
            from botocore.exceptions import BotoCoreError, ClientError

            try:
                client.head_bucket(Bucket=self.bucket)
            except ClientError as exc:
                code = str(exc.response.get("Error", {}).get("Code", ""))
                status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
                if status == 404 or code in ("404", "NoSuchBucket", "NotFound"):
                    raise BucketNotFoundError(f"{where} does not exist") from exc
                raise ObjStoreUnavailableError(f"{where}: HeadBucket failed: {exc}") from exc
            except BotoCoreError as exc:
                raise ObjStoreUnavailableError(f"{where} is unreachable: {exc}") from exc
        try:
            with self._pool.agent() as agent:
                agent.query_memory([(0, 1, 0, self.prefix + _PROBE_NAME)], "OBJ", "OBJ")
        except Exception as exc:
            raise ObjStoreUnavailableError(f"{where}: NIXL cannot query it ({type(exc).__name__}: {exc})") from exc

    def close(self) -> None:
        """Release the NIXL agents; later lookups raise RuntimeError.  Idempotent."""
        self._pool.close()
        self._s3 = None

    def __enter__(self) -> NixlObjBackend:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"NixlObjBackend(bucket={self.bucket!r}, endpoint_url={self.endpoint_url!r}, prefix={self.prefix!r})"

    def _client(self) -> Any:
        if self._s3 is None:
            try:
                import boto3
                from botocore.config import Config
            except ImportError as exc:
                raise ImportError(
                    "NixlObjBackend's connection check and writers need boto3; pip install 'kvprobe[s3]'"
                ) from exc
            self._s3 = boto3.client(
                "s3",
                endpoint_url=self.endpoint_url,
                region_name=self.region,
                aws_access_key_id=self._access_key,
                aws_secret_access_key=self._secret_key,
                aws_session_token=self._session_token,
                config=Config(
                    connect_timeout=self.connect_timeout_s,
                    read_timeout=self.connect_timeout_s,
                    retries={"total_max_attempts": 1},
                    s3={"addressing_style": "path"},
                ),
            )
        return self._s3
