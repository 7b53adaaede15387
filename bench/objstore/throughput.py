"""Backend throughput in keys per second.

* Files: ``FsBackend`` (Python ``os.stat`` loop) against ``NixlPosixBackend``
  (one ``query_memory`` call per group) on the same tree, ``group`` keys per
  call, calls alternating between the backends; and each of the two behind
  :class:`~kvprobe.backends.process.ProcessBackend` (the same call made in a
  helper process: what the trip through the pipe costs).
* Object store: on a real S3 server, Ceph's RADOS Gateway as a single-node
  cluster on loopback (:class:`kvprobe.testing.rgw.RgwServer`; install with
  ``apt-get install -y --no-install-recommends ceph-mon ceph-osd radosgw
  ceph-common``), one NIXL OBJ ``batch_lookup`` for N keys (half stored)
  against boto3 ``head_object`` calls, sequential and on 16 threads, for
  several ``num_threads``, interleaved in one run.  Server and client share
  the machine's cores, so on a small machine the CPU bounds these figures.

Backends are called directly (no manager): this is the tier's speed.
Run: ``python -m bench.objstore.throughput [--quick]``.
"""

from __future__ import annotations

import argparse
import logging
import statistics
import sys
import time
from collections.abc import Sequence
from functools import partial
from typing import Any

from bench.common import Row
from bench.trees import block_tree
from kvprobe.backends.fs import FsBackend
from kvprobe.backends.process import ProcessBackend

__all__ = ["main", "measure_files", "measure_obj", "rows"]


def _keys_per_s(backend: Any, keys: Sequence[bytes]) -> float:
    t0 = time.perf_counter()
    backend.batch_lookup(keys, None)
    return len(keys) / (time.perf_counter() - t0)


def measure_files(n_keys: int, group: int, repeats: int) -> dict[str, list[float]]:
    from kvprobe.backends.nixl_posix import NixlPosixBackend

    out: dict[str, list[float]] = {}
    with block_tree(n_keys) as (root, keys):
        backends: dict[str, Any] = {
            "FsBackend": FsBackend(root),
            "NixlPosixBackend": NixlPosixBackend(root),
            "ProcessBackend(FsBackend)": ProcessBackend(partial(FsBackend, root)),
            "ProcessBackend(NixlPosixBackend)": ProcessBackend(partial(NixlPosixBackend, root)),
        }
        try:
            answers = [b.batch_lookup(keys[:group], None) for b in backends.values()]
            assert all(a == answers[0] for a in answers), "the file backends disagree on the same tree"
            pairs = list(backends.items())
            for rep in range(repeats):
                for start in range(0, n_keys, group):
                    chunk = keys[start : start + group]
                    for name, backend in pairs if (rep + start) % 2 == 0 else pairs[::-1]:
                        out.setdefault(name, []).append(_keys_per_s(backend, chunk))
        finally:
            for backend in backends.values():
                backend.close()
    return out


def measure_obj(n_keys: int, threads: Sequence[int], repeats: int) -> dict[str, list[float]]:
    import random
    from concurrent.futures import ThreadPoolExecutor

    from botocore.exceptions import ClientError

    from kvprobe.backends.nixl_obj import NixlObjBackend
    from kvprobe.testing.rgw import RgwServer

    rng = random.Random(5)
    keys = [rng.randbytes(20) for _ in range(n_keys)]
    out: dict[str, list[float]] = {}
    server = RgwServer()
    try:
        server.start()
        server.create_bucket("kvprobe-bench")
        creds = server.credentials()
        # A long deadline: this measures speed, not what is answered by a deadline.
        backends = {t: NixlObjBackend("kvprobe-bench", num_threads=t, deadline_s=600, **creds) for t in threads}
        first = backends[threads[0]]
        for key in keys[::2]:
            first.store(key)
        client = server.client(max_pool_connections=16)

        def head(key: bytes) -> bool:
            try:
                client.head_object(Bucket="kvprobe-bench", Key=first.locate(key))
            except ClientError:
                return False
            return True

        def heads() -> list[bool]:
            return [head(key) for key in keys]

        pool = ThreadPoolExecutor(16)

        def heads_16() -> list[bool]:
            return list(pool.map(head, keys))

        expected = [i % 2 == 0 for i in range(n_keys)]
        for _ in range(repeats):
            t0 = time.perf_counter()
            assert heads() == expected
            out.setdefault("boto3 sequential HEAD", []).append(n_keys / (time.perf_counter() - t0))
            t0 = time.perf_counter()
            assert heads_16() == expected
            out.setdefault("boto3 HEAD on 16 threads", []).append(n_keys / (time.perf_counter() - t0))
            for t, backend in backends.items():
                t0 = time.perf_counter()
                assert backend.batch_lookup(keys, None) == expected
                out.setdefault(f"NIXL OBJ, num_threads={t}", []).append(n_keys / (time.perf_counter() - t0))
        for backend in backends.values():
            backend.close()
        pool.shutdown()
    finally:
        server.close()
    return out


async def _harness_heads(port: int, path: str, n: int, conns: int) -> float:
    """Keys/s of ``conns`` keep-alive connections sending ``n`` bare HEADs (the proxy + server path alone)."""
    import asyncio

    request = f"HEAD {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode()
    left = n

    async def worker() -> None:
        nonlocal left
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        while left > 0:
            left -= 1
            writer.write(request)
            head = await reader.readuntil(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 ")
        writer.close()

    t0 = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(conns)))
    return n / (time.perf_counter() - t0)


def measure_rtt(cases: Sequence[tuple[int, float]], rounds: int) -> list[dict[str, float]]:
    """NIXL OBJ keys/s with ``num_threads=N`` and ``rtt`` seconds added per request by the fault proxy.

    Beside each, the harness's own rate (N connections of bare HEADs through
    the same proxy and delay), and the target ``0.7 * min(N / rtt, harness)``.
    """
    import asyncio
    import random

    from kvprobe.backends.nixl_obj import NixlObjBackend
    from kvprobe.testing.faultproxy import FaultProxy
    from kvprobe.testing.rgw import RgwServer

    rng = random.Random(9)
    out: list[dict[str, float]] = []
    with RgwServer() as server, FaultProxy(server.endpoint_url) as proxy:
        server.create_bucket("kvprobe-rtt")
        creds = server.credentials()
        creds["endpoint_url"] = proxy.endpoint_url
        for n, rtt in cases:
            keys = [rng.randbytes(20) for _ in range(n * rounds)]
            backend = NixlObjBackend("kvprobe-rtt", num_threads=n, deadline_s=600, **creds)
            try:
                proxy.configure(delay_s=rtt)
                assert proxy.port is not None
                harness = asyncio.run(_harness_heads(proxy.port, "/kvprobe-rtt/none", n * rounds, n))
                proxy.configure(delay_s=rtt)
                t0 = time.perf_counter()
                assert backend.batch_lookup(keys, None) == [False] * len(keys)
                rate = len(keys) / (time.perf_counter() - t0)
                peak = proxy.stats()["peak_inflight"]
            finally:
                backend.close()
            ideal = min(n / rtt, harness)
            out.append({"N": n, "rtt_s": rtt, "keys_per_s": rate, "harness": harness, "ideal": ideal,
                        "ratio": rate / ideal, "peak_in_flight": peak})  # fmt: skip
    return out


def time_to_verdicts(n_keys: int, rtt: float, threads: Sequence[int]) -> dict[int, float]:
    """Seconds until a group of ``n_keys`` has its verdicts at ``rtt`` added per request, per ``num_threads``."""
    from kvprobe.backends.nixl_obj import NixlObjBackend
    from kvprobe.testing.faultproxy import FaultProxy
    from kvprobe.testing.rgw import RgwServer

    keys = [i.to_bytes(8, "big") for i in range(n_keys)]
    out: dict[int, float] = {}
    with RgwServer() as server, FaultProxy(server.endpoint_url, delay_s=rtt) as proxy:
        server.create_bucket("kvprobe-long")
        creds = server.credentials()
        creds["endpoint_url"] = proxy.endpoint_url
        for n in threads:
            backend = NixlObjBackend("kvprobe-long", num_threads=n, deadline_s=600, **creds)
            try:
                t0 = time.perf_counter()
                backend.batch_lookup(keys, None)
                out[n] = time.perf_counter() - t0
            finally:
                backend.close()
    return out


def _line(name: str, values: list[float]) -> str:
    return f"| {name} | {statistics.median(values):,.0f} | {min(values):,.0f}-{max(values):,.0f} | {len(values)} |"


def report(files: dict[str, list[float]], obj: dict[str, list[float]]) -> str:
    head = ["| backend | keys/s (median) | min-max | calls |", "|---|---|---|---|"]
    lines = ["files", *head, *(_line(n, v) for n, v in files.items())]
    lines += ["", "object store (Ceph RGW, single node, loopback)", *head, *(_line(n, v) for n, v in obj.items())]
    return "\n".join(lines)


def _params(quick: bool) -> tuple[int, int, int, int, tuple[int, ...], int]:
    # files: keys, keys per call, repeats; object store: keys, num_threads, repeats
    return (8_000, 2_000, 2, 1_000, (1, 16), 1) if quick else (40_000, 5_000, 3, 2_000, (1, 4, 16, 64), 3)


def rows(quick: bool) -> list[Row]:
    n, group, reps, n_obj, threads, obj_reps = _params(quick)
    files = measure_files(n, group, reps)
    obj = measure_obj(n_obj, threads, obj_reps)
    out = [
        Row("throughput", f"files: {name}", f"{statistics.median(v):,.0f} keys/s", f"{group} keys per call")
        for name, v in files.items()
    ]
    ratio = statistics.median(files["NixlPosixBackend"]) / statistics.median(files["FsBackend"])
    out.append(Row("throughput", "files: NIXL POSIX / FsBackend", f"{ratio:.2f}x", "same tree"))
    out += [
        Row("throughput", f"S3: {name}", f"{statistics.median(v):,.0f} keys/s", f"{n_obj} keys, Ceph RGW")
        for name, v in obj.items()
    ]
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--rtt", action="store_true", help="only the in-flight and long-prompt figures (issue 17.3)")
    args = parser.parse_args(argv)
    logging.disable(logging.INFO)  # NIXL logs every agent it creates at INFO
    if args.rtt:
        print("| num_threads N | added RTT | NIXL OBJ keys/s | harness keys/s | min(N/RTT, harness) | ratio | peak in flight |")  # fmt: skip  # noqa: E501
        print("|---|---|---|---|---|---|---|")
        for r in measure_rtt([(16, 0.2), (64, 0.2), (256, 0.4)], rounds=6):
            print(f"| {r['N']:.0f} | {r['rtt_s'] * 1000:.0f} ms | {r['keys_per_s']:,.0f} | {r['harness']:,.0f} | "
                  f"{r['ideal']:,.0f} | {r['ratio']:.2f} | {r['peak_in_flight']:.0f} |")  # fmt: skip
        for n, seconds in time_to_verdicts(3600, 0.02, (16, 64, 128, 256)).items():
            print(f"3,600-key group at 20 ms RTT, num_threads={n}: {seconds:.2f} s to verdicts")
        return 0
    n, group, reps, n_obj, threads, obj_reps = _params(args.quick)
    print(report(measure_files(n, group, reps), measure_obj(n_obj, threads, obj_reps)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
