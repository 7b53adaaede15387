"""Scheduler loop over an S3 tier probed by NIXL OBJ (``pip install 'kvprobe[nixl,s3]'``).

    python examples/nixl_obj_tier.py                 # starts a local moto S3 server
    python examples/nixl_obj_tier.py URL BUCKET      # an existing S3-compatible server

With URL and BUCKET, credentials come from AWS_ACCESS_KEY_ID /
AWS_SECRET_ACCESS_KEY (and AWS_REGION).  The example writes its blocks under
the prefix ``kvprobe-example/``.
"""

from __future__ import annotations

import sys

from _scheduler import run

from kvprobe import NixlObjBackend


def main() -> None:
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
