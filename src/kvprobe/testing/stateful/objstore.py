"""A conformance factory for the object tier: :class:`NixlObjBackend` on your own S3 bucket.

``kvprobe conform kvprobe.testing.stateful:nixl_obj_factory`` runs the
stateful machine against the object engine on a real bucket, configured
from the environment:

* ``KVPROBE_CONFORM_BUCKET`` (required): the bucket; it must exist.
* ``AWS_ENDPOINT_URL``: the S3 endpoint (unset: AWS itself).
* ``AWS_ACCESS_KEY_ID`` and ``AWS_SECRET_ACCESS_KEY`` (both or neither;
  neither: the SDK's default chain), ``AWS_SESSION_TOKEN``, ``AWS_REGION``:
  read by :class:`~kvprobe.backends.nixl_obj.NixlObjBackend` as usual.
* ``KVPROBE_CONFORM_PREFIX``: where the runs write (default
  ``kvprobe-conform/``).

Each run (the factory is called once per generated run) writes under a
prefix of its own, ``<KVPROBE_CONFORM_PREFIX>run-<pid>-<random>/``, with
the same object names the backend looks up (``store`` and ``remove`` are
the backend's own PUT and DELETE), and its ``close`` deletes every object
under that prefix before it closes the backend: a run leaves nothing in
the bucket, whether it passed or failed.  The pace is the process's
(``pace_scope="process"``), so a run writes no pace file on the host.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Callable
from typing import Any

from kvprobe.statemachine import InvalidValueError
from kvprobe.testing.stateful.tier import Target

__all__ = ["BUCKET_ENV", "DEFAULT_PREFIX", "PREFIX_ENV", "ConformConfigError", "nixl_obj_factory", "nixl_obj_target"]

#: The environment variable naming the bucket (required).
BUCKET_ENV = "KVPROBE_CONFORM_BUCKET"
#: The environment variable holding the prefix under which every run writes.
PREFIX_ENV = "KVPROBE_CONFORM_PREFIX"
#: The prefix when ``KVPROBE_CONFORM_PREFIX`` is unset.
DEFAULT_PREFIX = "kvprobe-conform/"
#: HEADs in flight per backend: the machine's key pool has three keys.
_THREADS = 4


class ConformConfigError(InvalidValueError):
    """The environment does not configure the object-store factory; the message names the variable."""


def _setting(name: str, default: str | None = None) -> str | None:
    value = os.environ.get(name, "")
    return value if value else default


def _run_prefix() -> str:
    base = _setting(PREFIX_ENV, DEFAULT_PREFIX) or DEFAULT_PREFIX
    base = base.lstrip("/")
    if base and not base.endswith("/"):
        base += "/"
    return f"{base}run-{os.getpid()}-{secrets.token_hex(6)}/"


def _check_environment() -> str:
    """The bucket, once the environment is usable.

    Raises:
        ConformConfigError: the bucket is unset, or one of the two access-key variables is set without the other.
    """
    bucket = _setting(BUCKET_ENV)
    if bucket is None:
        raise ConformConfigError(f"{BUCKET_ENV} is not set: name the bucket the conformance runs may write to")
    keys = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")
    present = [name for name in keys if _setting(name) is not None]
    if len(present) == 1:
        missing = next(name for name in keys if name not in present)
        raise ConformConfigError(
            f"{present[0]} is set but {missing} is not: set both, or neither to use the SDK's chain"
        )
    return bucket


def nixl_obj_target(make: Callable[..., Any] | None = None, **options: Any) -> Target:
    """One run's tier: a :class:`NixlObjBackend` on a fresh prefix of the configured bucket.

    Args:
        make: builds the backend from ``NixlObjBackend``'s keyword arguments
            (None: ``NixlObjBackend`` itself; a test passes a subclass).
        options: more keyword arguments for it (they override the factory's).

    Returns:
        A :class:`Target` whose ``close`` deletes every object under the
        run's prefix, then closes the backend.

    Raises:
        ConformConfigError: the environment names no bucket, or only one of the access keys.
        ImportError, ObjStoreUnavailableError, BucketNotFoundError: as
            ``NixlObjBackend`` raises them (NIXL or boto3 missing, the
            endpoint unreachable or not S3, the bucket absent).
    """
    bucket = _check_environment()
    if make is None:
        from kvprobe.backends.nixl_obj import NixlObjBackend

        make = NixlObjBackend
    settings: dict[str, Any] = {
        "bucket": bucket,
        "prefix": _run_prefix(),
        "num_threads": _THREADS,
        "agent_threads": _THREADS,
        "pace_scope": "process",
    }
    backend = make(**{**settings, **options})

    def close() -> None:
        try:
            _delete_prefix(backend)
        finally:
            backend.close()

    return Target(backend, backend.store, backend.remove, close)


def nixl_obj_factory() -> Target:
    """The ``kvprobe conform`` factory for the object tier (see the module docstring).

    Raises:
        ConformConfigError: see :func:`nixl_obj_target`; ``kvprobe conform``
            prints it in one line and exits with status 2.
    """
    return nixl_obj_target()


def _delete_prefix(backend: Any) -> None:
    """Delete every object under the backend's prefix (the run's), through its own boto3 client."""
    client = backend._client()
    pages = client.get_paginator("list_objects_v2").paginate(Bucket=backend.bucket, Prefix=backend.prefix)
    for page in pages:
        names = [{"Key": item["Key"]} for item in page.get("Contents", [])]
        if names:
            client.delete_objects(Bucket=backend.bucket, Delete={"Objects": names, "Quiet": True})
