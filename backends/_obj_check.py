"""The object backend's connection check through boto3: an S3 server, the bucket, and a store that is throttling.

Why boto3 and not NIXL: a missing bucket is invisible to NIXL's query (every
key just looks missing), and a server that is not S3 (a plain web server
answering 200 to everything) would make every key look stored.  So the
bucket's answer must carry S3's ``x-amz-`` headers and a random name must be
absent.  A store that is throttling is not an unusable one (a fleet starting
against a store it already saturates): a throttled ``HeadBucket`` is
confirmed by a one-key listing, whose ``SlowDown`` body names S3's
throttling where a HEAD's bare 503 could be any gateway's outage.  The
random name's HEAD is sent whatever the bucket's answer was; when it is
throttled too, :func:`check_bucket` says the absence was not seen, and the
backend must see it (through its own lookups) before it trusts a verdict.
"""

from __future__ import annotations

import uuid
from typing import Any, NamedTuple

from kvprobe.backends._obj_sdk import classify_failure

__all__ = [
    "BucketCheck",
    "BucketNotFoundError",
    "ObjStoreUnavailableError",
    "check_bucket",
    "head_throttled",
    "random_absent_name",
]


class ObjStoreUnavailableError(ConnectionError):
    """The object store could not be used: unreachable, refused, or credentials rejected."""


class BucketNotFoundError(ObjStoreUnavailableError):
    """The bucket does not exist at the endpoint."""


class BucketCheck(NamedTuple):
    """What :func:`check_bucket` saw: whether the store was throttling, and whether a random name read absent."""

    throttled: bool
    absence_seen: bool


def random_absent_name(prefix: str) -> str:
    """A name no block has (a random one under the check's folder): it must read absent on an S3 store."""
    return f"{prefix}kvprobe-connection-check/{uuid.uuid4().hex}"


def check_bucket(client: Any, bucket: str, prefix: str, where: str) -> BucketCheck:
    """HeadBucket and a random name's HEAD through boto3: whether the store was throttling, and the absence seen.

    Raises:
        BucketNotFoundError, ObjStoreUnavailableError: as ``NixlObjBackend.check_connection``
            (a random name that reads as stored: not an S3 server).
    """
    from botocore.exceptions import BotoCoreError, ClientError

    throttled = False
    try:
        answer = client.head_bucket(Bucket=bucket)
    except ClientError as exc:
        code = str(exc.response.get("Error", {}).get("Code", ""))
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        if status == 404 or code in ("404", "NoSuchBucket", "NotFound"):
            raise BucketNotFoundError(f"{where} does not exist") from exc
        if classify_failure(exc, 0.0) != "throttled":
            raise ObjStoreUnavailableError(f"{where}: HeadBucket failed: {exc}") from exc
        # A HEAD's 503 has no body: any gateway's outage looks like that.
        # A listing's says SlowDown when it is S3 throttling.
        answer, throttled = _list_one(client, bucket, prefix, where), True
    except BotoCoreError as exc:
        raise ObjStoreUnavailableError(f"{where} is unreachable: {exc}") from exc
    except Exception as exc:
        # e.g. RecursionError: botocore follows a plain web server's
        # redirect to itself without end.
        raise ObjStoreUnavailableError(
            f"{where}: not an S3 answer to HeadBucket ({type(exc).__name__}: {exc})"
        ) from exc
    if answer is not None:  # None: the listing was throttled too, with S3's code
        headers = answer.get("ResponseMetadata", {}).get("HTTPHeaders", {})
        if not any(str(name).lower().startswith("x-amz-") for name in headers):
            raise ObjStoreUnavailableError(
                f"{where}: the endpoint answered HeadBucket without any x-amz- header: not an S3 server"
            )
    # Sent whatever the bucket's answer: a server that throttles the bucket's
    # checks and answers 200 to every object would otherwise pass.
    absent = random_absent_name(prefix)
    try:
        client.head_object(Bucket=bucket, Key=absent)
    except ClientError as exc:
        # 404 expected (403 too: a store may hide absence behind permissions)
        if classify_failure(exc, 0.0) == "throttled":
            return BucketCheck(throttled=True, absence_seen=False)
    except Exception as exc:
        raise ObjStoreUnavailableError(f"{where}: HeadObject failed ({type(exc).__name__}: {exc})") from exc
    else:
        raise ObjStoreUnavailableError(f"{where}: a random object name {absent!r} reads as stored: not an S3 server")
    return BucketCheck(throttled=throttled, absence_seen=True)


def _list_one(client: Any, bucket: str, prefix: str, where: str) -> Any:
    """A one-key listing's answer, or None when S3 throttled it too (``SlowDown``).

    Raises:
        BucketNotFoundError, ObjStoreUnavailableError: the bucket is missing, or the answer is no S3 throttling.
    """
    from botocore.exceptions import ClientError

    not_throttling = f"{where}: HeadBucket answered 503, and a listing no S3 throttling"
    try:
        return client.list_objects_v2(Bucket=bucket, Prefix=prefix, MaxKeys=1)
    except ClientError as exc:
        code = str(exc.response.get("Error", {}).get("Code", ""))
        if code == "NoSuchBucket":
            raise BucketNotFoundError(f"{where} does not exist") from exc
        if code == "SlowDown":
            return None
        raise ObjStoreUnavailableError(f"{not_throttling}: {exc}") from exc
    except Exception as exc:
        raise ObjStoreUnavailableError(f"{not_throttling} ({type(exc).__name__}: {exc})") from exc


def head_throttled(client: Any, bucket: str, name: str) -> bool:
    """Whether boto3's HEAD of ``name`` is answered 503 (any other answer or failure: False)."""
    try:
        client.head_object(Bucket=bucket, Key=name)
    except Exception as exc:
        return classify_failure(exc, 0.0) == "throttled"
    return False
