"""An S3 object-store tier probed through NIXL's OBJ plugin.

A key is looked up with a HEAD request, through NIXL: ``query_memory(descs,
"OBJ", "OBJ")`` with descriptors ``(0, 1, 0, object_name)`` answers a dict
for an existing object (possibly empty) and ``None`` for a 404; any other
failure of any one HEAD raises for the whole query.

How a group is looked up (:mod:`kvprobe.backends._obj_lookup` says why):
its keys are cut into queries of at most ``agent_threads`` keys, run on a
shared pool of threads, each with its own NIXL agent, at most
``num_threads`` HEADs in flight per backend.  A query in which one HEAD
failed keeps no answer, so queries halve after a failure and grow back
after successes, a failed query's keys are retried in parts with jittered
backoff, and more, smaller queries run at once (up to
:data:`QUERIES_PER_SHARE` times ``ceil(num_threads / agent_threads)``).  At
``deadline_s`` each key still unanswered reads as MISS, counted by cause in
:attr:`NixlObjBackend.stats`; if not one key was answered (and not every
key was shed) the call raises :class:`ObjStoreUnavailableError`.  A
manager's ``lookup_timeout_s`` shortens ``deadline_s`` to end before it
(:meth:`NixlObjBackend.fit_deadline`), so no caller thread is stranded.

Pacing (:mod:`kvprobe.backends._pacing`).  Every query first reserves its
HEADs from :attr:`NixlObjBackend.pacer`, shared by every backend of the
same endpoint, bucket and prefix: unpaced until the store pushes back, then
a rate lowered by failed queries and raised again as they stop, held by a
``Retry-After``.  Keys whose query the pace cannot start before the
deadline are answered MISS at once and counted ``shed``.  With
``pace_scope="host"`` (the default) every process of the host and user
shares it through a file (:mod:`kvprobe.backends._host_pace`);
``pace_scope="process"`` keeps it to the process.

Quiet by default (:mod:`kvprobe.backends._nixl_import`): NIXL writes a line
to stderr per failed HEAD unless ``NIXL_LOG_LEVEL`` is set when it is first
loaded, so kvprobe sets it to ``FATAL`` unless it is already set; each
failed query is logged at DEBUG on ``kvprobe.backends._obj_lookup`` and
counted in :attr:`NixlObjBackend.stats` instead.

Exiting cleanly: a NIXL query still running when the interpreter finalizes
kills the process (SIGABRT), so at exit every agent pool is closed and
waits for its queries, at most ``_nixl_import.EXIT_WAIT_S`` seconds.

Bounding the AWS SDK (inside NIXL).  By default the SDK retries each failed
HEAD about ten times with back-off: with the server down that is ~25 s per
key.  Before each ``create_backend`` this module sets
``AWS_RETRY_MODE=standard`` and ``AWS_MAX_ATTEMPTS=<max_attempts>`` (default
1: the SDK does not retry; this module does, within the deadline) in the
process environment, under a lock, and restores the previous values right
after (the SDK reads them when the client is built).  NIXL exposes no
connect/request timeouts; the SDK's defaults apply (a frozen server costs
about 3 s per HEAD): a HEAD still on the wire at the deadline finishes in
its pool thread and its answer is dropped, while queued chunks are
cancelled, so a frozen server holds at most ``num_threads`` HEADs and
recovery after it thaws is immediate.

Connection check at construction (:mod:`kvprobe.backends._obj_check`):
the bucket exists, the endpoint is S3 (a random name reads absent, through
boto3 and through NIXL), and a store that is only throttling is accepted
(its verdicts trusted once a name never written reads absent).

Writers (``store``/``remove``) PUT and DELETE through ``boto3``, an S3 client
independent of NIXL, so tests check NIXL's verdicts against a separate truth.
"""

from __future__ import annotations

import math
import os
import threading
import warnings
from collections.abc import Mapping, Sequence
from contextlib import ExitStack
from typing import Any, ClassVar

from kvprobe.backends._host_pace import PACE_SCOPES, host_pacer
from kvprobe.backends._nixl_import import AgentPool
from kvprobe.backends._obj_check import (
    BucketCheck,
    BucketNotFoundError,
    ObjStoreUnavailableError,
    check_bucket,
    probe_store,
    random_absent_name,
)
from kvprobe.backends._obj_lookup import ChunkedLookup, RetryPolicy, deadline_under
from kvprobe.backends._obj_sdk import (
    bounded_sdk_retries,
    classify_failure,
    head_with_boto3,
    new_s3_client,
    nixl_obj_params,
    retry_after_of,
)
from kvprobe.backends._pacing import Pacer, shared_pacer
from kvprobe.backends.base import Key, Verdicts
from kvprobe.backends.layout import relative_name

__all__ = [
    "PACE_SCOPES",
    "QUERIES_PER_SHARE",
    "BucketNotFoundError",
    "NixlObjBackend",
    "ObjStoreUnavailableError",
    "classify_failure",
    "retry_after_of",
]


#: Queries (NIXL agents) run at once per ``agent_threads`` of ``num_threads``:
#: enough that queries shrunk to 4 keys by failures still keep
#: ``num_threads`` HEADs in flight.  Agents are created only when that many
#: queries run at once, so a store that answers full-size queries uses
#: ``ceil(num_threads / agent_threads)`` of them, as before.
QUERIES_PER_SHARE = 4


def _has_boto3() -> bool:
    try:
        import boto3  # noqa: F401
    except ImportError:
        return False
    return True


def _query_on(agent: Any, names: Sequence[str]) -> list[Any]:
    """HEAD ``names`` on one NIXL agent: a dict per stored object, None per absent one; raises if any HEAD failed."""
    answers: list[Any] = agent.query_memory([(0, 1, 0, name) for name in names], "OBJ", "OBJ")
    return answers


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
        num_threads: HEADs in flight per backend, shared by concurrent
            ``batch_lookup`` calls (1..1024).
        agent_threads: HEADs per NIXL agent and the most keys per query
            (NIXL's OBJ ``num_threads``; one agent keeps at most ~25 in
            flight); queries shrink below it while queries fail.
        deadline_s: a ``batch_lookup`` returns within this many seconds;
            keys unanswered by then read as MISS (a manager's
            ``lookup_timeout_s`` shortens it to end before the timeout).
        retry_base_s, retry_cap_s: backoff of a failed query's retries,
            ``min(cap, base * 2**attempt)`` times a jitter in [0.5, 1.5].
        max_attempts: ``AWS_MAX_ATTEMPTS`` for the SDK (1 = the SDK does
            not retry; this backend retries within ``deadline_s``).  None
            leaves the environment alone (the SDK then retries ~10 times with
            back-off: tens of seconds per key during an outage).
        connect_timeout_s: timeouts of the boto3 connection check, writers
            and retries (seconds in (0, 3600]).
        retry_with_boto3: send a single key's retries from its second on
            through boto3 rather than NIXL, so that :attr:`stats` counts
            their failures by cause (NIXL raises the same
            ``NIXL_ERR_BACKEND`` for a 503, a 500 and a reset) and the pace
            sees the store's ``Retry-After``; queries of several keys and a
            key's first retry stay on NIXL, the faster path.  Ignored
            without boto3.
        pace_scope: who shares the store's pace: ``"host"`` (the default:
            every backend of every process of this host and user on the same
            endpoint, bucket and prefix, through a file, so that several
            engine processes of a host sharing a store pace as one; see
            :mod:`kvprobe.backends._host_pace`; a file it cannot use, or
            another process holding it, leaves the process pacing alone,
            never failing a lookup) or ``"process"`` (this process's
            backends only; no file).
        seed: seeds the retry jitter (None: from the OS).
        extra_params: more OBJ ``create_backend`` parameters (strings), e.g.
            ``use_virtual_addressing`` or ``ca_bundle``; they override ours.
        check: run the connection check (see the module docstring).

    Raises:
        ImportError: NIXL or its OBJ plugin is missing (names ``kvprobe[nixl]``).
        TypeError / ValueError: a malformed argument (a timeout that is NaN,
            infinite, zero, negative or above an hour is a ValueError
            naming it, raised before anything is created).
        BucketNotFoundError: the bucket does not exist (needs boto3).
        ObjStoreUnavailableError: the endpoint is unreachable, rejects us,
            or is not an S3 server (the message names endpoint and cause).
        RuntimeError: NIXL could not create the agent or backend.
        No agent is left alive after any of these.
    """

    #: The windows a manager walks this tier's chains with unless told
    #: otherwise (first window, growth; ``KvprobeManager(chain_window=...,
    #: chain_window_growth=...)`` override it).  Narrower than the manager's
    #: default (16, 2): HEADs past a chain's stored prefix are what throttle
    #: a fleet sharing a bucket, and growth 1.25 sends at most a quarter more
    #: than the prefix where 2 may send twice as many.  The price is steps:
    #: 3,600-block prompts with stored prefixes of every length take 17.6
    #: calls on average instead of 6.7 (docs/chains.md); docs/fleet.md
    #: measures the gain on Ceph RGW.
    chain_schedule: ClassVar[tuple[int, float]] = (4, 1.25)
    #: ``lookup_chain``'s start rule unless the manager is told otherwise
    #: (``start_backlog=``, 0 for off): while 4 or more groups submitted at
    #: earlier steps are unanswered, a request not yet walking waits, so a
    #: store at its cap serves the walks under way first (docs/chains.md;
    #: six engines on RGW capped at 400 HEAD/s: docs/performance.md).
    start_backlog: ClassVar[int] = 4

    def __init__(
        self,
        bucket: str,
        endpoint_url: str | None = None,
        access_key: str | None = None,
        secret_key: str | None = None,
        region: str | None = None,
        prefix: str = "",
        num_threads: int = 64,
        *,
        agent_threads: int = 16,
        deadline_s: float = 5.0,
        retry_base_s: float = 0.02,
        retry_cap_s: float = 0.5,
        session_token: str | None = None,
        max_attempts: int | None = 1,
        connect_timeout_s: float = 2.0,
        retry_with_boto3: bool = True,
        pace_scope: str = "host",
        seed: int | None = None,
        extra_params: Mapping[str, str] | None = None,
        check: bool = True,
    ) -> None:
        if not isinstance(bucket, str) or len(bucket) < 3:
            raise ValueError(f"bucket must be a name of at least 3 characters, got {bucket!r}")
        for name, value, top in (("num_threads", num_threads, 1024), ("agent_threads", agent_threads, 256)):
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= top:
                raise ValueError(f"{name} must be an int in [1, {top}], got {value!r}")
        for name, seconds in (
            ("deadline_s", deadline_s),
            ("retry_base_s", retry_base_s),
            ("retry_cap_s", retry_cap_s),
            ("connect_timeout_s", connect_timeout_s),
        ):
            # NaN and infinity fail the comparison too: a timeout botocore
            # cannot wait for would blame the server for our argument.
            if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not 0 < seconds <= 3600:
                raise ValueError(f"{name} must be a number of seconds in (0, 3600], got {seconds!r}")
        if pace_scope not in PACE_SCOPES:
            raise ValueError(f"pace_scope must be one of {PACE_SCOPES}, got {pace_scope!r}")
        if max_attempts is not None and (
            isinstance(max_attempts, bool) or not isinstance(max_attempts, int) or max_attempts < 1
        ):
            raise ValueError(f"max_attempts must be a positive int or None, got {max_attempts!r}")
        self.bucket = bucket
        self.prefix = _normalize_prefix(prefix)
        self.endpoint_url = endpoint_url if endpoint_url is not None else os.environ.get("AWS_ENDPOINT_URL")
        self.region = region or os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"
        self.num_threads = num_threads
        self.agent_threads = min(agent_threads, num_threads)
        self.agents = min(num_threads, QUERIES_PER_SHARE * math.ceil(num_threads / self.agent_threads))
        self.deadline_s = float(deadline_s)
        self.max_attempts = max_attempts
        self.connect_timeout_s = float(connect_timeout_s)
        self._access_key = access_key if access_key is not None else os.environ.get("AWS_ACCESS_KEY_ID")
        self._secret_key = secret_key if secret_key is not None else os.environ.get("AWS_SECRET_ACCESS_KEY")
        self._session_token = session_token if session_token is not None else os.environ.get("AWS_SESSION_TOKEN")
        self._s3: Any = None
        # Whether a name never written was seen to read absent (the endpoint
        # is S3, not a server that answers 200 to everything): until it is,
        # every call asks for one more such name and trusts no verdict
        # without its answer.  The reason every call is refused, once one
        # read as stored.
        self._verified = True
        self._refused: str | None = None
        self._s3_lock = threading.Lock()  # one boto3 client, built once, none after close()
        self._closed = False

        params = nixl_obj_params(
            bucket,
            self.region,
            self.agent_threads,
            self.endpoint_url,
            (self._access_key, self._secret_key, self._session_token),
            extra_params or {},
        )

        self._pool = AgentPool(
            "obj",
            "OBJ",
            params,
            max_agents=self.agents + 1,  # one more for check_connection while lookups run
            before_create=lambda: bounded_sdk_retries(max_attempts),
        )
        #: The store's pace, shared by every backend of the process (or, with
        #: ``pace_scope="host"``, of the host) on the same endpoint, bucket
        #: and prefix (see :mod:`kvprobe.backends._pacing`).
        store = (self.endpoint_url or f"aws:{self.region}", bucket, self.prefix)
        self.pacer: Pacer = shared_pacer(*store) if pace_scope == "process" else host_pacer(*store)
        self._engine = ChunkedLookup(
            self._query,
            agents=self.agents,
            chunk=self.agent_threads,
            heads=num_threads,
            retry=RetryPolicy(float(retry_base_s), float(retry_cap_s)),
            seed=seed,
            classify=classify_failure,
            query_one=self._head_one if retry_with_boto3 and _has_boto3() else None,
            pacer=self.pacer,
            retry_after=retry_after_of,
        )
        if check:
            try:
                self.check_connection()
            except BaseException:
                self.close()
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

    def fit_deadline(self, lookup_timeout_s: float) -> float:
        """Shorten :attr:`deadline_s` to end a margin before a caller's ``lookup_timeout_s``; return it.

        The manager calls this with its ``lookup_timeout_s``: a call then
        returns its answered keys before the manager's timeout would take
        the whole group.  A shorter deadline is kept, so a backend shared by
        several managers fits the shortest timeout.

        Raises:
            ValueError: ``lookup_timeout_s`` is not a number of seconds in
                (0, 3600] (the message names it); the deadline is unchanged.
        """
        seconds = lookup_timeout_s
        if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not 0 < seconds <= 3600:
            raise ValueError(f"lookup_timeout_s must be a number of seconds in (0, 3600], got {seconds!r}")
        self.deadline_s = min(self.deadline_s, deadline_under(float(seconds)))
        return self.deadline_s

    def batch_lookup(self, keys: Sequence[Key], req_context: object) -> list[bool]:
        """One verdict per key, within ``deadline_s`` (chunked parallel HEADs, failed chunks retried).

        A key whose HEADs kept failing, or were still running, at the
        deadline reads as ``False`` (counted in :attr:`stats`); such keys
        are marked in the :class:`~kvprobe.backends.base.Verdicts` returned
        (with the shed ones, below), so a verdict cache never remembers them.

        Keys whose HEADs the store's pace could not start before the deadline
        are answered ``False`` at once (``shed`` in :attr:`stats`); a call
        that was shed whole returns all ``False`` without waiting.

        Raises:
            TypeError: a key is not ``bytes`` (before NIXL is called).
            RuntimeError: the backend is closed.
            ObjStoreUnavailableError: not one key was answered by the deadline
                and not every key was shed (the store is down, frozen or
                refusing every request), or the endpoint is not yet verified
                as S3 after a throttled start-up, or was found not to be; the
                manager turns it into MISS for the group.
        """
        del req_context
        if not keys:
            return []
        names = [self.locate(k) for k in keys]
        if self._refused is not None:
            raise ObjStoreUnavailableError(self._refused)
        if self._verified:
            verdicts, answered, shed, unanswered = self._engine.run(names, self.deadline_s)
        else:
            verdicts, answered, shed, unanswered = self._verified_run(names)
        if answered == 0 and shed < len(names):
            raise ObjStoreUnavailableError(
                f"{self._where()}: none of {len(names)} keys answered within {self.deadline_s} s "
                f"(counters so far: {self._engine.counters.snapshot()})"
            )
        return Verdicts(verdicts, unanswered=unanswered) if unanswered else verdicts

    def _verified_run(self, names: list[str]) -> tuple[list[bool], int, int, frozenset[int]]:
        """The call, with one more name never written, whose answer must be "absent" for any verdict to stand.

        Raises:
            ObjStoreUnavailableError: that name was not answered (the store is
                still throttling: nothing is trusted yet), or it read as stored
                (not an S3 server: this call and every later one).
        """
        canary = random_absent_name(self.prefix)
        verdicts, answered, shed, unanswered = self._engine.run([*names, canary], self.deadline_s)
        if len(names) in unanswered:
            raise ObjStoreUnavailableError(
                f"{self._where()}: not yet verified as an S3 store (its start-up was throttled, and a name never "
                f"written was not answered yet): none of {len(names)} verdicts is trusted"
            )
        if verdicts[-1]:
            self._refused = (
                f"{self._where()}: a random object name {canary!r} reads as stored: not an S3 server "
                "(its start-up check was throttled)"
            )
            raise ObjStoreUnavailableError(self._refused)
        self._verified = True
        return verdicts[:-1], answered - 1, shed, unanswered

    @property
    def stats(self) -> dict[str, int]:
        """Counters of the lookups so far (see :class:`kvprobe.backends._obj_lookup.LookupCounters`).

        ``calls``, ``keys``, ``queries`` (lookup requests: NIXL queries and
        boto3 retries), ``failed_queries`` and its split by cause
        (``failed_throttled``, ``failed_server_error``, ``failed_reset``,
        ``failed_timed_out``, ``failed_other``: see ``retry_with_boto3``),
        ``retried_keys``, the keys answered MISS for want of an answer at
        the deadline, by cause: ``miss_failing`` (their HEADs kept failing:
        throttled or erroring), ``miss_in_flight`` (still running: slow or
        frozen server), ``miss_not_started`` (the pool was busy), the keys
        ``shed`` (MISS at once: the store's pace could not start their HEADs
        before the deadline), and ``paced_queries`` (queries that waited for
        the pace).
        """
        return self._engine.counters.snapshot()

    @property
    def pacing(self) -> dict[str, float | int | None]:
        """The shared pace of this store: ``rate`` (HEAD/s; None while unpaced) and its counters.

        ``w_max`` (the rate of the last decrease), ``measured`` (HEADs per
        second whose outcome came back, smoothed), ``decreases`` of the
        rate, of which ``undone`` (they did not help),
        ``holds`` (Retry-After honoured), ``refused`` reservations (keys
        shed), ``served`` (HEADs the store answered per second, smoothed),
        ``answered_heads`` and ``failed_heads`` (throttled or erroring).
        Shared by every backend of the process on the same store.
        A host pace adds ``host_fallbacks`` (calls this process paced alone:
        its file could not be used, written or locked in time) and
        ``host_bad_files`` (files that were not a pace, replaced).
        """
        return self.pacer.snapshot()

    @property
    def pace_trace(self) -> list[dict[str, float | str | None]]:
        """The pace's latest decisions made by this process's calls, oldest first (see ``Pacer.trace``).

        Each: ``at`` (``time.monotonic()``), ``decision`` (``decrease``,
        ``undone`` or ``hold``), ``rate_before`` and ``rate_after`` (HEAD/s,
        None while unpaced), and for a hold ``hold_s``.
        """
        return self.pacer.trace()

    def _head_one(self, name: str) -> Any:
        """One HEAD through boto3: ``{}`` if stored, None if absent; raises boto3's error otherwise."""
        return head_with_boto3(self._client(), self.bucket, name)

    def _query(self, names: Sequence[str]) -> list[Any]:
        with self._pool.agent() as agent:
            return _query_on(agent, names)

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

        A store that is only throttling is accepted, its verdicts trusted once
        a name never written reads absent (see :mod:`kvprobe.backends._obj_check`).

        Raises:
            BucketNotFoundError: HeadBucket (or the listing) said 404 (checked only with boto3).
            ObjStoreUnavailableError: unreachable, timed out, or rejected
                (HeadBucket, or NIXL's probe query raised while the store was
                not throttling), or a random name reads as stored (not S3).
        """
        where = self._where()
        try:
            client = self._client()
        except ImportError:
            warnings.warn(
                f"boto3 is not installed, so NixlObjBackend cannot tell a missing {where} from an empty one; "
                "install kvprobe[s3] for that check",
                RuntimeWarning,
                stacklevel=3,
            )
            client = None
        bucket_check = (
            BucketCheck(False, False) if client is None else check_bucket(client, self.bucket, self.prefix, where)
        )
        self._verified = probe_store(self._query, client, self.bucket, self.prefix, where, bucket_check)

    def open_agents(self) -> int:
        """Create every NIXL agent lookups may use, each having sent one query; return how many are alive.

        Lookups create agents as they need them: ``ceil(num_threads /
        agent_threads)`` while the store answers whole queries, up to
        :attr:`agents` once failures shrink them.  Call this to pay for the
        agents up front, not in the first outage.  Each agent sends one
        unpaced query of ``agent_threads`` names never written (a failure is
        ignored: the agent exists).  Agents still open connections as their
        HEADs overlap, within :attr:`max_connections`.  While this runs it
        holds every agent but one, so a concurrent lookup runs one query at
        a time.

        Raises:
            RuntimeError: the backend is closed, or NIXL could not create an agent.
        """
        with ExitStack() as lent:
            agents = [lent.enter_context(self._pool.agent()) for _ in range(self.agents)]
            for agent in agents:
                names = [random_absent_name(self.prefix) for _ in range(self.agent_threads)]
                try:
                    _query_on(agent, names)
                except Exception:  # a failed HEAD decides nothing here; the agent exists
                    continue
        return len(self._pool.names)

    @property
    def max_connections(self) -> int:
        """The most TCP connections this backend holds to the store at once.

        Each NIXL agent (:attr:`agents` for lookups, one more for
        :meth:`check_connection`) runs at most ``agent_threads`` HEADs at
        once, each on a connection of its own; the boto3 client keeps at
        most ``max(10, agents + 1)``.  Size the process's descriptor limit
        with it: each connection also holds an eventfd.
        """
        return (self.agents + 1) * self.agent_threads + self._boto3_connections

    def close(self) -> None:
        """Release the pool's threads and the NIXL agents; later lookups raise RuntimeError.  Idempotent.

        A query still running finishes in its thread first (bounded by the
        SDK's request timeout); its agent is released then.
        """
        self._engine.close()
        self._pool.close()
        with self._s3_lock:
            self._closed = True
            client, self._s3 = self._s3, None
        if client is not None:
            client.close()

    def _where(self) -> str:
        return f"bucket {self.bucket!r} at {self.endpoint_url or 'AWS'}"

    def __enter__(self) -> NixlObjBackend:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"NixlObjBackend(bucket={self.bucket!r}, endpoint_url={self.endpoint_url!r}, prefix={self.prefix!r})"

    def _client(self) -> Any:
        """The backend's one boto3 client, built at first use under a lock (concurrent retries share it).

        Raises:
            ImportError: boto3 is missing.
            RuntimeError: the backend is closed (no client is built that nobody would close).
        """
        with self._s3_lock:
            if self._closed:
                raise RuntimeError(f"{self!r} is closed")
            if self._s3 is None:
                self._s3 = self._new_client()
            return self._s3

    @property
    def _boto3_connections(self) -> int:
        return max(10, self.agents + 1)

    def _new_client(self) -> Any:
        return new_s3_client(
            self.endpoint_url,
            self.region,
            (self._access_key, self._secret_key, self._session_token),
            timeout_s=self.connect_timeout_s,
            connections=self._boto3_connections,
        )
