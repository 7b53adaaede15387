"""Scheduler loop over an S3 tier probed by NIXL OBJ (``pip install 'kvprobe[nixl,s3]'``).

    python examples/nixl_obj_tier.py                 # starts a local moto S3 server
    python examples/nixl_obj_tier.py URL BUCKET      # an existing S3-compatible server

With URL and BUCKET, credentials come from AWS_ACCESS_KEY_ID /
AWS_SECRET_ACCESS_KEY (and AWS_REGION).  The example writes its blocks under
the prefix ``kvprobe-example/``.  Without the ``s3`` extra (boto3 writes
the blocks; moto is the local server) it exits at once naming the extra.
"""

from __future__ import annotations

import importlib
import sys

from _scheduler import run

from kvprobe import NixlObjBackend


def missing_s3_extra(local_server: bool) -> list[str]:
    """The packages of the ``s3`` extra this run needs and cannot import."""
    missing = []
    for name in ["boto3", "moto"] if local_server else ["boto3"]:
        try:
            importlib.import_module(name)
        except ImportError:
            missing.append(name)
    return missing


def main() -> None:
    missing = missing_s3_extra(local_server=len(sys.argv) != 3)
    if missing:
        sys.exit(
            f"nixl_obj_tier.py needs {' and '.join(missing)} (the s3 extra: boto3 writes the blocks, "
            "moto is the local server): pip install 'kvprobe[s3]'"
        )
    if len(sys.argv) == 3:
        with NixlObjBackend(bucket=sys.argv[2], endpoint_url=sys.argv[1], prefix="kvprobe-example") as backend:
            run(backend)
        return
    from kvprobe.testing.s3server import S3Server

    with S3Server() as server:
        server.create_bucket("kvprobe-example")
        print(f"local S3 server on {server.endpoint_url} (pid {server.pid})")
        with NixlObjBackend(bucket="kvprobe-example", prefix="blocks", **server.credentials()) as backend:
            run(backend)


if __name__ == "__main__":
    main()
