"""The fleet simulator's parameters, each with where its value comes from.

Four kinds of source, said at each field: **AWS** (a published AWS page),
**kvprobe** (the object backend's own defaults, read from its code, never
copied), **vLLM** (the serving engine kvprobe is built for), and
**assumption** (a value chosen here, with the reason; change it on the
command line or in code and rerun).
"""

from __future__ import annotations

import inspect
import math
from dataclasses import dataclass, field

from kvprobe.backends.nixl_obj import NixlObjBackend
from kvprobe.backends.obj_parts import RetryPolicy

__all__ = [
    "HEAD_DOLLARS_PER_HOUR",
    "HEAD_PRICE_PER_1000",
    "PUT_PRICE_PER_1000",
    "BackendParams",
    "StoreParams",
    "WorkloadParams",
    "backend_default",
]

#: AWS: S3 Standard, "GET, SELECT, and all other requests" (HEAD included),
#: US East (N. Virginia): $0.0004 per 1,000 requests.  The price table of
#: https://aws.amazon.com/s3/pricing/ is filled in by script, so its stored
#: text does not show the figure; it was checked in two third-party
#: summaries (c3x.dev/blog/s3-request-fees-explained, awsi.click's "Why S3
#: request pricing differs between GET and PUT").  Only 2xx and 4xx answers are
#: billed, never a ``503 SlowDown``
#: (https://docs.aws.amazon.com/AmazonS3/latest/userguide/ErrorCodeBilling.html),
#: so a 404 (a block not stored) costs as much as a hit.
HEAD_PRICE_PER_1000 = 0.0004
#: AWS: S3 Standard, "PUT, COPY, POST, LIST requests", US East (N.
#: Virginia): $0.005 per 1,000 requests (same sources as the HEAD price).
PUT_PRICE_PER_1000 = 0.005
#: Dollars an hour for one billed HEAD a second (3,600 x $0.0004 / 1,000):
#: $/h = engines x requests/s x billed HEADs per request x 0.00144.
HEAD_DOLLARS_PER_HOUR = 3600 * HEAD_PRICE_PER_1000 / 1000


def backend_default(name: str) -> object:
    """A keyword's default in ``NixlObjBackend.__init__`` (so the simulator runs the backend as shipped)."""
    return inspect.signature(NixlObjBackend.__init__).parameters[name].default


@dataclass(frozen=True)
class StoreParams:
    """A model of S3 serving HEADs for one key prefix."""

    #: AWS: "at least 5,500 GET/HEAD requests per second per partitioned
    #: prefix" (https://docs.aws.amazon.com/AmazonS3/latest/userguide/optimizing-performance.html).
    head_limit_per_s: float = 5500.0
    #: assumption: a partition absorbs bursts of 0.1 s of its rate (a token
    #: bucket of depth 550); AWS publishes no burst figure.
    burst_s: float = 0.1
    #: Partitions at the start.  1: a new prefix (AWS: S3 "does not
    #: automatically allocate additional resources for a new prefix",
    #: https://repost.aws/knowledge-center/http-5xx-errors-s3).
    partitions: int = 1
    #: A partition throttling without a quiet second for this long splits in
    #: two.  AWS (re:Post, reply on the knowledge-center article
    #: s3-object-key-naming-pattern): auto-partitioning "can take from 30 to
    #: 60 minutes"; 1,800 s is the optimistic end.  Splitting in halves is an
    #: assumption (AWS does not publish how it splits).
    split_after_s: float = 1800.0
    max_partitions: int = 4096
    #: AWS: "at least 3,500 PUT/COPY/POST/DELETE ... requests per second per
    #: partitioned prefix" (same page).  PUTs are counted, not sent to the
    #: model (it throttles HEADs only): their rate per partition is reported
    #: against this limit.
    put_limit_per_s: float = 3500.0
    #: AWS: for small requests "median latency is often in the tens of
    #: milliseconds" (whitepaper "Optimizing Amazon S3 performance", timeouts
    #: and retries); 20 ms is the RTT the kvprobe object-store issue (#17)
    #: used for S3 in the same region.
    rtt_median_s: float = 0.020
    #: assumption: lognormal spread, p99 = median * exp(2.326 * sigma) ~ 5x
    #: the median (100 ms) with sigma 0.7.
    rtt_sigma: float = 0.7


@dataclass(frozen=True)
class WorkloadParams:
    """Requests arriving at one engine, and what the tier holds of them."""

    #: assumption: 0.5 long-prompt requests per second per engine (a mean
    #: prompt of ~660 blocks x 16 tokens ~ 10,600 tokens; a GPU prefilling
    #: ~10-20k tokens/s spends about half its time on these prefills).
    arrivals_per_s: float = 0.5
    #: vLLM: prompts of up to 3,600 blocks (vLLM issue 45765, the scheduler
    #: stall kvprobe was built against); 16 blocks is vLLM's default block of
    #: 16 tokens times 16, a short chat turn.  Lengths are log-uniform
    #: (assumption: as many 16-160 as 360-3,600 block prompts).
    min_blocks: int = 16
    max_blocks: int = 3600
    #: assumption: half the requests start with one of a few shared prefixes
    #: (system prompts, shared documents), the same keys on every engine.
    shared_fraction: float = 0.5
    shared_prefixes: int = 16
    shared_len: tuple[int, int] = (256, 2048)
    #: assumption: the tier holds the first 25-100 % of each shared prefix
    #: (evicted tails), so a prefix's first missing block ends every hit on it.
    shared_stored: tuple[float, float] = (0.25, 1.0)
    #: assumption: 30 % of requests continue an earlier conversation whose
    #: first 50-100 % of own blocks the tier holds; the others' own blocks are
    #: new.  The resulting hit rate (stored / looked-up blocks) is reported.
    return_fraction: float = 0.3
    return_stored: tuple[float, float] = (0.5, 1.0)
    #: assumption: a request holds its probes (kvprobe ``cleanup`` comes when
    #: it finishes) for an exponential time of mean 10 s after its lookup
    #: answer (prefill plus a few hundred decode steps).
    serve_s: float = 10.0
    #: assumption: every block a request computes (every block after its
    #: leading hits: blocks not stored, and stored blocks answered MISS) is
    #: written to the tier, one PUT each (a write-through tier: the engine
    #: offers the tier what it computed, and a block answered MISS looks new
    #: to it); blocks generated while decoding are not counted.
    puts_per_computed_block: float = 1.0
    #: assumption: how often (per hour) each shared prefix loses a suffix of
    #: its stored blocks, drawn uniformly (an evictor trimming the tier, or
    #: a lifecycle rule); the next request that computes those blocks writes
    #: them back.  0 (the default): the tier never loses a block.  What a
    #: verdict remembered across requests costs when it does:
    #: ``bench.fleet.eviction``.
    shared_evictions_per_h: float = 0.0
    #: assumption: one scheduler step every 30 ms (a decode step of a batch
    #: on one GPU); lookup delays are reported in these steps.
    step_s: float = 0.030

    def mean_blocks(self) -> float:
        """Mean prompt length of the log-uniform lengths."""
        lo, hi = self.min_blocks, self.max_blocks
        return (hi - lo) / math.log(hi / lo)


@dataclass(frozen=True)
class BackendParams:
    """The object backend of each engine: kvprobe's ``NixlObjBackend`` as shipped."""

    #: kvprobe: ``NixlObjBackend(num_threads=...)``, HEADs in flight per backend.
    num_threads: int = field(default_factory=lambda: int(str(backend_default("num_threads"))))
    #: kvprobe: keys per NIXL query (one query fails when any of its HEADs fails).
    agent_threads: int = field(default_factory=lambda: int(str(backend_default("agent_threads"))))
    #: kvprobe: each call's deadline.
    deadline_s: float = field(default_factory=lambda: float(str(backend_default("deadline_s"))))
    #: kvprobe: the backoff of a failed query's keys; None: no retry (the
    #: backend before the object-store issue: a failed query's keys are MISS).
    retry: RetryPolicy | None = field(
        default_factory=lambda: RetryPolicy(
            float(str(backend_default("retry_base_s"))), float(str(backend_default("retry_cap_s")))
        )
    )
    #: kvprobe: the backend paces its HEADs (``backends/_pacing.PaceCore``, one
    #: pace per engine as one per process).  False: the backend before it
    #: paced (commit 510e4dd), which docs/data/fleet.json simulates.
    paced: bool = False
