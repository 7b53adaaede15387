"""The chaos campaign's object-store fault: a Ceph RGW gateway frozen, then thawed.

:class:`ObjOutage` drives one fault on a running :class:`~kvprobe.testing.rgw.RgwServer`
while a manager over a :class:`~kvprobe.backends.nixl_obj.NixlObjBackend`
serves the campaign's requests:

* at random times (a first one early, so short runs see it) it freezes the
  gateway (SIGSTOP: connections accepted, nothing answers) for a random
  0.5-3 s, and admits one request of :data:`BIG_GROUP` absent keys to the
  manager, so a 2,000-key group is on the wire during the outage;
* at the thaw it starts a *recovery probe*: a fresh request for a stored key
  no other request holds, asked every step, re-asked under a new request id
  after each MISS (the MISS of a call that met the outage); the time from
  the thaw (the start of the step that sends SIGCONT) to its first True is
  the recovery time, which must not exceed ``2 * lookup_timeout_s + 2 s``.

Everything it keeps is a few ints and floats: it cannot grow with the run.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kvprobe.statemachine import AsyncLookupManager, ReqContext

__all__ = ["BIG_GROUP", "LOOKUP_TIMEOUT_S", "ObjOutage", "ObjTier", "objstore_unavailable", "recovery_keys"]

#: Keys of the request admitted at each freeze (the issue's group size).
BIG_GROUP = 2000
#: The manager's timeout, and the backend's deadline below it (docs/backends.md).
LOOKUP_TIMEOUT_S = 1.0
DEADLINE_S = 0.8
#: Mean seconds between the end of one outage's recovery and the next freeze.
MEAN_GAP_S = 8.0


def objstore_unavailable() -> str | None:
    """Why the object-store fault cannot run here (one line), or None."""
    from kvprobe.backends.obj_parts import nixl_unavailable
    from kvprobe.testing.rgw import rgw_missing

    why = nixl_unavailable()
    if why is not None:
        return f"NIXL not importable: {why}"
    return rgw_missing()


class ObjTier:
    """A Ceph RGW cluster on loopback, a bucket holding ``stored``, and a NixlObjBackend on it.

    ``close()`` closes the backend and stops the cluster (by its pids).

    Raises:
        S3ServerError: the cluster did not start (nothing is left running).
        ObjStoreUnavailableError / ImportError: the backend could not be built.
    """

    def __init__(self, stored: list[bytes]) -> None:
        from kvprobe.backends.nixl_obj import NixlObjBackend
        from kvprobe.testing.rgw import RgwServer

        self.server = RgwServer()
        self.server.start()
        try:
            self.server.create_bucket("chaos")
            self.backend = NixlObjBackend(bucket="chaos", deadline_s=DEADLINE_S, **self.server.credentials())
            for key in stored:
                self.backend.store(key, b"block")
            # Build every agent before anything is measured: the backend
            # builds its extra agents only when failures shrink its queries
            # (in an outage), and no lookup builds one after this.  Their
            # connections keep opening as HEADs overlap; the campaign holds
            # those to the backend's bound, apart from the other descriptors.
            self.backend.open_agents()
        except BaseException:
            self.server.close()
            raise

    def close(self) -> None:
        try:
            self.backend.close()
        finally:
            if self.server.frozen:
                self.server.thaw()
            self.server.close()


def recovery_keys(n: int) -> list[bytes]:
    """Stored keys only recovery probes ask for (no campaign request holds them)."""
    return [hashlib.sha256(b"chaos-recovery-%d" % i).digest()[:16] for i in range(n)]


def big_group_keys(outage: int) -> list[bytes]:
    """``BIG_GROUP`` keys never stored (a True among them is a wrong verdict)."""
    return [hashlib.sha256(b"chaos-big-%d-%d" % (outage, i)).digest()[:16] for i in range(BIG_GROUP)]


@dataclass
class OutageTally:
    freezes: int = 0
    recoveries: int = 0
    late_recoveries: int = 0  # no True within the bound after a thaw
    longest_recovery_s: float = 0.0
    longest_freeze_s: float = 0.0


class ObjOutage:
    """Freezes and thaws the gateway at random; measures recovery after each thaw.

    Args:
        server: a started RgwServer (any LocalS3Server with freeze/thaw).
        m: the manager over the object backend (scheduler thread only).
        probes: stored keys reserved for recovery probes.
        bound_s: the recovery bound (``2 * lookup_timeout_s + 2``).
        first_freeze_s: seconds after ``start`` of the first freeze.
        admit_big: ``admit_big(req_id, keys)`` hands each outage's 2,000-key
            request to the campaign, which looks it up every step and checks
            its verdicts.
    """

    def __init__(
        self,
        server: Any,
        m: AsyncLookupManager,
        probes: list[bytes],
        *,
        bound_s: float,
        first_freeze_s: float,
        admit_big: Callable[[str, list[bytes]], None],
    ) -> None:
        self.admit_big = admit_big
        self.server = server
        self.m = m
        self.probes = probes
        self.bound_s = bound_s
        self.tally = OutageTally()
        self._first_freeze_s = first_freeze_s
        self._next_freeze = 0.0
        self._frozen_at: float | None = None
        self._thaw_at = 0.0
        self._thawed_at: float | None = None  # a recovery is being measured
        self._probe_ctx: ReqContext | None = None
        self._probe_key = b""
        self._probe_n = 0
        self.problems: list[str] = []

    def start(self, now: float) -> None:
        self._next_freeze = now + self._first_freeze_s

    @property
    def busy(self) -> bool:
        """Frozen, or a recovery still being measured."""
        return self._frozen_at is not None or self._thawed_at is not None

    def tick(self, rng: random.Random, now: float, ending: bool) -> None:
        """One scheduler step: freeze, thaw, or advance the recovery probe."""
        if self._frozen_at is not None:
            if now >= self._thaw_at or ending:
                self.thaw(now)
            return
        if self._thawed_at is not None:
            self._advance_probe(rng, now)
            return
        if not ending and now >= self._next_freeze:
            self.tally.freezes += 1
            self.server.freeze()
            self._frozen_at = now
            self._thaw_at = now + rng.uniform(0.5, 3.0)
            self.admit_big(f"s3-big-{self.tally.freezes}", big_group_keys(self.tally.freezes))

    def thaw(self, now: float) -> None:
        """Thaw now (also at the end of the run: the server must be left answering)."""
        if self._frozen_at is None:
            return
        self.tally.longest_freeze_s = max(self.tally.longest_freeze_s, now - self._frozen_at)
        self._frozen_at = None
        # Timed from this step's start, at or before SIGCONT (never after it),
        # and before thaw() waits for the gateway to answer.
        self._thawed_at = now
        self.server.thaw()
        self._new_probe()

    def _new_probe(self) -> None:
        self._probe_n += 1
        self._probe_ctx = ReqContext(f"s3-recovery-{self._probe_n}")
        self._probe_key = self.probes[self._probe_n % len(self.probes)]

    def _advance_probe(self, rng: random.Random, now: float) -> None:
        assert self._thawed_at is not None and self._probe_ctx is not None
        elapsed = now - self._thawed_at
        verdict = self.m.lookup(self._probe_key, self._probe_ctx)
        if verdict is True:
            self.tally.recoveries += 1
            self.tally.longest_recovery_s = max(self.tally.longest_recovery_s, elapsed)
            if elapsed > self.bound_s:
                self._late(elapsed)
            self._end_probe(rng, now)
        elif elapsed > self.bound_s + 30:
            self._late(elapsed)  # never recovered: give up so the campaign can go on
            self._end_probe(rng, now)
        elif verdict is False:
            # The answer of a call that met the outage: ask again as a new request.
            self.m.cleanup(self._probe_ctx.req_id)
            self._new_probe()

    def _late(self, elapsed: float) -> None:
        self.tally.late_recoveries += 1
        self.tally.longest_recovery_s = max(self.tally.longest_recovery_s, elapsed)
        if len(self.problems) < 10:
            self.problems.append(f"objstore: a stored key answered True only {elapsed:.1f} s after the thaw")

    def _end_probe(self, rng: random.Random, now: float) -> None:
        assert self._probe_ctx is not None
        self.m.cleanup(self._probe_ctx.req_id)
        self._probe_ctx = None
        self._thawed_at = None
        self._next_freeze = now + rng.expovariate(1 / MEAN_GAP_S)
