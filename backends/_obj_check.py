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

Then :func:`probe_store` sends one NIXL query of another random name, which
must read absent too.  A probe that fails is sent again (a gateway answering
a random share of requests 503 fails one probe in five at 20 %), each time
beside boto3's HEAD of the same name.  NIXL does not say why its query
failed, so boto3's answers are the measure of the store's random loss: the
probe is refused only once that loss (estimated by the rule of succession,
a lucky run of answers counting as no proof of none) would fail so many
NIXL probes in a row less than once in a million start-ups.  At 20 % random
503s four probes in a row fail once in 600 start-ups; refusing there was
issue 39's one start-up in 20 refused.  A store throttling every one of
boto3's HEADs, or so many that no number of probes would tell, is accepted
with a logged warning.  Throttling never skips the check that a name never
written reads absent: when no such name was answered at start-up, every
lookup call asks for one more, and trusts no verdict until it reads absent
(the call raises :class:`ObjStoreUnavailableError` meanwhile: MISS for the
group); one that reads as stored refuses that call and every later one.
Without ``boto3`` only the NIXL probe runs.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from kvprobe.backends._obj_sdk import classify_failure

__all__ = [
    "BucketCheck",
    "BucketNotFoundError",
    "ObjStoreUnavailableError",
    "check_bucket",
    "head_throttled",
    "probe_store",
    "random_absent_name",
]

#: NIXL probes at construction: at least PROBE_ATTEMPTS, at most
#: PROBE_ATTEMPTS_MAX, 0.1, 0.2, 0.4, 0.8 s apart and then 1 s.
PROBE_ATTEMPTS, PROBE_ATTEMPTS_MAX, PROBE_BACKOFF_S, PROBE_BACKOFF_CAP_S = 4, 16, 0.1, 1.0
#: Refused when random loss as frequent as boto3 saw would fail that many
#: probes in a row less often than this.
PROBE_LUCK = 1e-6
_log = logging.getLogger(__name__)


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


def probe_store(
    query: Callable[[Sequence[str]], list[Any]],
    client: Any,
    bucket: str,
    prefix: str,
    where: str,
    bucket_check: BucketCheck,
) -> bool:
    """Query a random name through NIXL (``query``); return whether a name never written was seen absent.

    ``client``: boto3's (None without boto3: any failure refuses the store);
    ``bucket_check``: what :func:`check_bucket` found.  False means the
    store throttled the probes and no absence was seen: the caller must see
    one before trusting a verdict.

    Raises:
        ObjStoreUnavailableError: the name reads as stored (not an S3
            server), or NIXL's query kept failing while boto3's HEAD of the
            same name was answered too often for random loss to explain it
            (or without boto3, after :data:`PROBE_ATTEMPTS`).
    """
    failure: Exception | None = None
    # boto3's HEADs at start-up: the bucket check's two, then one beside each
    # failed probe (so ``2 + attempt`` of them), ``throttled`` of them 503.
    check_throttled = int(bucket_check.throttled) + int(not bucket_check.absence_seen)
    probe_throttled = 0
    probe = random_absent_name(prefix)
    for attempt in range(1, PROBE_ATTEMPTS_MAX + 1):
        try:
            answers = query([probe])
        except Exception as exc:
            failure = exc
        else:
            if answers and answers[0] is not None:
                raise ObjStoreUnavailableError(
                    f"{where}: a random object name {probe!r} reads as stored through NIXL: not an S3 server"
                )
            return True
        if client is None:
            if attempt >= PROBE_ATTEMPTS:
                break
        else:
            probe_throttled += head_throttled(client, bucket, probe)
            if attempt >= PROBE_ATTEMPTS:
                if probe_throttled == attempt:
                    break  # throttling every HEAD: nothing tells NIXL's failures apart
                if _unexplained(attempt, check_throttled + probe_throttled, 2 + attempt):
                    break
        if attempt < PROBE_ATTEMPTS_MAX:
            time.sleep(min(PROBE_BACKOFF_S * 2 ** (attempt - 1), PROBE_BACKOFF_CAP_S))
    throttled, heads = check_throttled + probe_throttled, 2 + attempt
    if client is not None and not _unexplained(attempt, throttled, heads):
        _log.warning(
            "%s is throttling %s of boto3's HEADs (%d of %d): NIXL's query of it is unverified;"
            " lookups will pace to it%s",
            where,
            "every one" if probe_throttled == attempt else "too many",
            throttled,
            heads,
            "" if bucket_check.absence_seen else ", and no verdict is trusted until a name never written reads absent",
        )
        return bucket_check.absence_seen
    raise ObjStoreUnavailableError(
        f"{where}: NIXL cannot query it ({type(failure).__name__}: {failure}; {attempt} probes failed"
        + (f", boto3's HEAD throttled {throttled} of {heads})" if client is not None else ")")
    ) from failure


def _unexplained(failures: int, throttled_heads: int, heads: int) -> bool:
    """Whether ``failures`` NIXL probes in a row are too many for the loss boto3 saw (``throttled_heads`` of ``heads``).

    The loss is estimated as ``(throttled + 1) / (heads + 2)`` (Laplace's
    rule of succession): boto3 answering every HEAD so far is no proof that
    the store drops none.
    """
    loss = (throttled_heads + 1) / (heads + 2)
    return bool(loss**failures < PROBE_LUCK)
