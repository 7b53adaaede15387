"""Prometheus metrics for lookup managers (extra ``metrics``: ``prometheus_client``).

One :class:`LookupMetrics` per manager, labelled ``tier=<name>``, exports:

* counters ``kvprobe_<counter>_total``: every counter of
  :class:`~kvprobe.statemachine.types.Stats`, and
  ``kvprobe_failures_total{kind=...}`` per failure kind;
* gauges: ``kvprobe_probe_states`` (states held), ``kvprobe_groups_in_flight``
  (groups submitted and not answered), ``kvprobe_stuck_calls`` (calls running
  past the timeout), ``kvprobe_helper_processes`` and
  ``kvprobe_idle_helper_processes`` (live helper processes, all of them and
  those not in a call, when the backend exposes ``helper_pids`` and ``pids``
  as ``ProcessBackend`` does);
* histograms, when the manager runs on :class:`MeteredCore`:
  ``kvprobe_lookup_delay_steps`` and ``kvprobe_lookup_delay_seconds`` (per
  key verdict, from the step of the key's first lookup to the verdict),
  ``kvprobe_backend_call_duration_seconds`` (per request group) and
  ``kvprobe_group_keys`` (keys per request group).

Theory of operation.  The scheduler's hot path is ``lookup``; nothing here
touches it.  :class:`MeteredCore` overrides only ``flush`` (stamp each
submitted group with the step number and the time; count its keys) and
``apply`` (when a group's first outcome is applied, observe how many keys it
resolved, after how many steps and seconds), plus the inbox's ``append``,
which the worker calls once per group when it publishes: it notes how long
the worker spent on that group.  The scheduler thread only appends
raw observations to queues at flush and drain, once per group, never per
lookup; they are sorted into histogram buckets when Prometheus scrapes.  A key's first lookup happens during the
step its probe is flushed in, so "steps" counts flushes from that step to
the one whose lookups (or flush) applied the verdict (1 is the least an
asynchronous design can do) and "seconds" starts at that flush (the
lookup itself is not timed).  A group's backend duration is its call's
own, from the call's start until its result was read to the end (for a
timed-out call, until the worker gave up on it), as the worker timed it
(``GroupOutcome.call_s``); an outcome a worker of its own publishes
untimed is timed from its flush.  Late answers of timed-out calls and
groups failed without a call are not counted.

Counters and gauges are read from the manager when Prometheus scrapes (from
the scrape thread; the values are plain integers, so a scrape sees each one
as of some moment of the step).  Several managers can share a registry:
their collectors are merged into one family per metric name, as Prometheus
requires.

Usage::

    from prometheus_client import start_http_server
    from kvprobe.metrics import LookupMetrics, MeteredManager

    m = MeteredManager(backend, name="fs")      # or the vLLM drop-in with core_class=MeteredCore
    LookupMetrics(m).register()                 # the default registry
    start_http_server(9400, addr="127.0.0.1")
"""

from __future__ import annotations

import bisect
import os
import threading
import time
import weakref
from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import fields
from typing import Any, Protocol

from prometheus_client.core import (
    REGISTRY,
    CollectorRegistry,
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from kvprobe.statemachine.core import LookupCore
from kvprobe.statemachine.manager import AsyncLookupManager
from kvprobe.statemachine.types import Batch, FailureKind, GroupOutcome, InvalidInputError, InvalidValueError

__all__ = ["Histogram", "LookupMetrics", "MeteredCore", "MeteredManager"]

#: Bucket upper bounds (the +Inf bucket is added).
DELAY_STEP_BUCKETS = (0.0, 1.0, 2.0, 3.0, 4.0, 6.0, 8.0, 12.0, 16.0, 32.0, 64.0)
DELAY_SECOND_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
CALL_SECOND_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0, 30.0)
GROUP_KEY_BUCKETS = (1.0, 4.0, 16.0, 64.0, 256.0, 1024.0, 4096.0, 16384.0, 65536.0)

_COUNTER_HELP = {
    "probes_created": "Probes created (a key looked up with no state held)",
    "probes_submitted": "Probes submitted to the worker at a flush",
    "joins": "Lookups that joined a probe pending in the same step",
    "in_flight_reuses": "Lookups that joined a probe already in flight",
    "never_probed": "Probes reclaimed before any flush (every request left)",
    "orphans_reclaimed": "Probes reclaimed when answered or forced after every request left",
    "stale_results_dropped": "Per-key results dropped because the probe was no longer in flight",
    "forced_misses": "mark_miss applied to a live probe",
    "hits": "Verdicts applied: stored",
    "misses": "Verdicts applied: not stored (failures included)",
    "batches": "Flushes that submitted a batch",
    "backend_calls": "batch_lookup calls made (one per request group)",
    "backend_errors": "batch_lookup calls that raised or answered wrongly",
    "timeouts": "batch_lookup calls that exceeded the timeout",
    "saturated": "Groups failed at once because too many calls were stuck",
    "worker_deaths": "Worker deaths noticed",
    "late_results": "Answers of timed-out calls that arrived later (dropped)",
    "unknown_cleanups": "cleanup() of a request id the manager did not know",
    "unknown_mark_miss": "mark_miss() keys with no state",
}


class Histogram:
    """Fixed-bucket counts, a sum and a count; thread-safe (one lock per update batch)."""

    def __init__(self, bounds: Sequence[float]) -> None:
        if list(bounds) != sorted(set(bounds)):
            raise InvalidValueError(f"bucket bounds must be strictly increasing, got {list(bounds)}")
        self.bounds = tuple(float(b) for b in bounds)
        self._counts = [0] * (len(self.bounds) + 1)  # the last is +Inf
        self._sum = 0.0
        self._lock = threading.Lock()

    def observe(self, value: float, count: int = 1) -> None:
        """Record ``count`` observations of ``value``."""
        index = bisect.bisect_left(self.bounds, value)
        with self._lock:
            self._counts[index] += count
            self._sum += value * count

    def observe_all(self, values: Iterable[float]) -> None:
        """Record one observation of each value."""
        bounds = self.bounds
        with self._lock:
            for value in values:
                self._counts[bisect.bisect_left(bounds, value)] += 1
                self._sum += value

    def snapshot(self) -> tuple[list[tuple[str, float]], float]:
        """(cumulative ``(le, count)`` buckets ending with ``+Inf``, sum), consistent with each other."""
        with self._lock:
            counts = list(self._counts)
            total = self._sum
        buckets = []
        running = 0
        for bound, count in zip((*(repr(b) for b in self.bounds), "+Inf"), counts, strict=True):
            running += count
            buckets.append((bound, float(running)))
        return buckets, total

    @property
    def count(self) -> int:
        """Observations recorded."""
        with self._lock:
            return sum(self._counts)


class _StampedInbox(deque[GroupOutcome]):
    """The core's inbox; ``append`` (called by the worker per group) notes how long the group's call took."""

    def __init__(self, core: MeteredCore) -> None:
        super().__init__()
        self._core = weakref.ref(core)

    def append(self, outcome: GroupOutcome) -> None:
        core = self._core()
        if core is not None and not outcome.late and outcome.failure is not FailureKind.SATURATED:
            stamp = core._submitted.get(outcome.group.group_id)
            if stamp is not None:
                # The call's own duration, as the worker timed it.  Groups run
                # at once, so nothing seen here (such as the previous
                # publication) tells when this one's call began; an outcome
                # the worker did not time is timed from its flush.
                seconds = outcome.call_s
                core._call_seconds.append(time.perf_counter() - stamp[1] if seconds is None else seconds)
        super().append(outcome)


class MeteredCore(LookupCore):
    """A :class:`LookupCore` that notes observations at flush and apply (never at lookup).

    The scheduler thread only appends raw observations to queues (a few
    hundred nanoseconds per request group); :meth:`fold` sorts them into the
    histograms, from the scrape thread when Prometheus collects, or at a
    flush once more than :attr:`FOLD_AT` are waiting (bounding memory when
    nobody scrapes).
    """

    #: Raw observations held before a flush folds them itself.
    FOLD_AT = 65536

    def __init__(self) -> None:
        super().__init__()
        self.inbox = _StampedInbox(self)
        self.steps = 0  # flushes so far: the index of the current step
        # group id -> (step it was flushed in, perf_counter at the flush)
        self._submitted: dict[int, tuple[int, float]] = {}
        # Raw observations, appended by the scheduler (and the worker, for
        # call durations) and folded by fold(); deques, so no lock is needed.
        self._flushed: deque[Batch] = deque()
        self._delays: deque[tuple[int, float, int]] = deque()
        self._call_seconds: deque[float] = deque()
        self._fold_lock = threading.Lock()
        self.delay_steps = Histogram(DELAY_STEP_BUCKETS)
        self.delay_seconds = Histogram(DELAY_SECOND_BUCKETS)
        self.call_seconds = Histogram(CALL_SECOND_BUCKETS)
        self.group_keys = Histogram(GROUP_KEY_BUCKETS)
        #: Set to a list to also keep each folded delay observation as
        #: ``(steps, seconds, verdicts)`` (``bench.plots`` draws them).
        self.raw_delays: list[tuple[int, float, int]] | None = None

    def flush(self) -> Batch | None:
        """Flush action, plus: stamp each submitted group with the step and the time."""
        batch = super().flush()
        step = self.steps
        self.steps = step + 1
        if batch is not None:
            stamp = (step, time.perf_counter())
            submitted = self._submitted
            for group in batch.groups:
                submitted[group.group_id] = stamp
            self._flushed.append(batch)
            if len(self._delays) + len(self._flushed) > self.FOLD_AT:
                self.fold()
        return batch

    def apply(self, outcome: GroupOutcome) -> None:
        """Apply action, plus: at a group's first outcome, note the delay of the verdicts it set."""
        stats = self._stats
        before = stats.hits + stats.misses
        super().apply(outcome)
        stamp = self._submitted.pop(outcome.group.group_id, None)
        if stamp is not None:
            resolved = stats.hits + stats.misses - before
            if resolved:
                self._delays.append((self.steps - stamp[0], time.perf_counter() - stamp[1], resolved))

    def shutdown(self, message: str = "the lookup manager was shut down") -> None:
        """Shutdown action; what was observed stays in the histograms."""
        super().shutdown(message)
        self._submitted.clear()
        self.fold()

    def fold(self) -> None:
        """Sort the waiting raw observations into the histograms (any thread)."""
        with self._fold_lock:
            for batch in _drain(self._flushed):
                self.group_keys.observe_all(float(len(group.states)) for group in batch.groups)
            delays = list(_drain(self._delays))
            if self.raw_delays is not None:
                self.raw_delays.extend(delays)
            for steps, seconds, count in delays:
                self.delay_steps.observe(float(steps), count)
                self.delay_seconds.observe(seconds, count)
            self.call_seconds.observe_all(_drain(self._call_seconds))


def _drain(queue: deque[Any]) -> Iterator[Any]:
    """Pop from the left until empty (safe while another thread appends)."""
    while True:
        try:
            yield queue.popleft()
        except IndexError:
            return


class MeteredManager(AsyncLookupManager):
    """An :class:`AsyncLookupManager` running on :class:`MeteredCore` (same arguments)."""

    core_class = MeteredCore


class _HasManager(Protocol):
    @property
    def manager(self) -> AsyncLookupManager: ...


class LookupMetrics:
    """The Prometheus collector of one manager, labelled ``tier=<name>``.

    Args:
        manager: a kvprobe :class:`AsyncLookupManager` or anything with a
            ``.manager`` that is one (the vLLM drop-in).  Histograms are
            exported when it runs on :class:`MeteredCore`.
        tier: the label value; default the manager's name.

    Raises:
        InvalidInputError: ``manager`` is neither.
    """

    def __init__(self, manager: AsyncLookupManager | _HasManager, tier: str | None = None) -> None:
        inner = manager if isinstance(manager, AsyncLookupManager) else getattr(manager, "manager", None)
        if not isinstance(inner, AsyncLookupManager):
            raise InvalidInputError(
                f"LookupMetrics needs a kvprobe AsyncLookupManager or a drop-in, got {type(manager).__name__}"
            )
        self.manager = inner
        self.tier = inner.name if tier is None else tier
        # The highest value exported per counter: a scrape that reads the
        # manager in the middle of a flush could see probes_created one
        # step behind, and a counter must never go down.
        self._exported: dict[str, int] = {}
        if not isinstance(self.tier, str):
            raise InvalidInputError(f"tier must be a string, got {type(self.tier).__name__}")

    def register(self, registry: CollectorRegistry = REGISTRY) -> LookupMetrics:
        """Export this manager through ``registry``; return self.

        Raises:
            InvalidValueError: a live manager with the same tier label is
                already exported there (a closed one is replaced).
        """
        _exporter(registry).add(self)
        return self

    def unregister(self, registry: CollectorRegistry = REGISTRY) -> None:
        """Stop exporting this manager through ``registry`` (no error if it was not)."""
        _exporter(registry).remove(self)

    def _monotonic(self, name: str, value: int) -> int:
        exported = max(self._exported.get(name, 0), value)
        self._exported[name] = exported
        return exported

    def collect(self) -> Iterator[Metric]:
        """This manager's metric families (one sample set, labelled with its tier)."""
        tier = self.tier
        m = self.manager
        stats = m.stats
        for f in fields(stats):
            if f.name == "failures":
                continue
            family = CounterMetricFamily(f"kvprobe_{f.name}", _COUNTER_HELP[f.name], labels=["tier"])
            family.add_metric([tier], float(self._monotonic(f.name, getattr(stats, f.name))))
            yield family
        failures = CounterMetricFamily(
            "kvprobe_failures", "Request groups resolved as MISS by a failure, by kind", labels=["tier", "kind"]
        )
        for kind in FailureKind:
            count = self._monotonic(f"failures:{kind.value}", stats.failures.get(kind.value, 0))
            failures.add_metric([tier, kind.value], float(count))
        yield failures
        yield _gauge("kvprobe_probe_states", "Probe states held", tier, len(m))
        yield _gauge(
            "kvprobe_groups_in_flight", "Request groups submitted and not answered", tier, len(m.core.outstanding)
        )
        stuck = getattr(m.worker, "stuck_calls", None)
        if isinstance(stuck, int):
            yield _gauge("kvprobe_stuck_calls", "Backend calls running past the lookup timeout", tier, stuck)
        helpers = getattr(m.backend, "helper_pids", None)
        if isinstance(helpers, list):
            live = sum(map(_alive, helpers))
            yield _gauge(
                "kvprobe_helper_processes", "Live helper processes of the backend, idle or in a call", tier, live
            )
        idle = getattr(m.backend, "pids", None)
        if isinstance(idle, list):
            yield _gauge(
                "kvprobe_idle_helper_processes",
                "Live helper processes of the backend not in a call",
                tier,
                sum(map(_alive, idle)),
            )
        yield from self._backend_counters(tier, m.backend)
        core = m.core
        if isinstance(core, MeteredCore):
            core.fold()
            yield _histogram(
                "kvprobe_lookup_delay_steps", "Steps from a key's first lookup to its verdict", tier, core.delay_steps
            )
            yield _histogram(
                "kvprobe_lookup_delay_seconds",
                "Seconds from the flush of a key's first lookup to its verdict",
                tier,
                core.delay_seconds,
            )
            yield _histogram(
                "kvprobe_backend_call_duration_seconds",
                "Worker time per request group (one batch_lookup call)",
                tier,
                core.call_seconds,
            )
            yield _histogram("kvprobe_group_keys", "Keys per request group submitted", tier, core.group_keys)

    def _backend_counters(self, tier: str, backend: object) -> Iterator[Metric]:
        """A backend's own counters (``stats``: the object tier's queries, retries, ``shed``...) and its pace.

        Each integer of a backend's ``stats`` dict is exported as the counter
        ``kvprobe_backend_<name>_total``; a ``pacing`` dict as the gauges
        ``kvprobe_backend_pace_rate``, ``_w_max`` (HEAD/s, absent while
        unpaced), ``_measured`` and ``_served``, and ``kvprobe_backend_pace_<counter>_total``.
        Backends without them add nothing.
        """
        families = []
        stats = getattr(backend, "stats", None)
        if isinstance(stats, dict):
            families += [(f"backend_{name}", value) for name, value in sorted(stats.items())]
        pacing = getattr(backend, "pacing", None)
        if isinstance(pacing, dict):
            for name, help_text in _PACE_GAUGES.items():
                value = pacing.get(name)
                if isinstance(value, (int, float)) and not isinstance(value, bool):
                    yield _gauge(f"kvprobe_backend_pace_{name}", help_text, tier, value)
            families += [
                (f"backend_pace_{name}", value) for name, value in sorted(pacing.items()) if name not in _PACE_GAUGES
            ]
        for name, value in families:
            if isinstance(value, int) and not isinstance(value, bool):
                family = CounterMetricFamily(f"kvprobe_{name}", f"The backend's {name[8:]} counter", labels=["tier"])
                family.add_metric([tier], float(self._monotonic(name, value)))
                yield family


#: The pace's rates, exported as gauges (each absent while None: unpaced); its other integers are counters.
_PACE_GAUGES = {
    "rate": "The store's shared pace, HEAD/s (absent: unpaced)",
    "w_max": "The rate of the pace's last decrease, HEAD/s (absent: unpaced)",
    "measured": "HEADs per second whose outcome came back, smoothed over the pace's windows",
    "served": "HEADs per second the store answered, smoothed over the pace's windows",
}


def _alive(pid: int) -> bool:
    """Whether process ``pid`` is running (not gone, not a zombie awaiting its parent's wait)."""
    # A helper killed from outside stays in its backend's lists until the
    # backend next uses it; it must not count as live meanwhile.
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            # The state letter follows the ")" that closes the command name.
            return f.read().rpartition(b")")[2][1:2] not in (b"Z", b"X")
    except OSError:  # no /proc (not Linux): kill(0) said it exists
        return True


def _gauge(name: str, help_text: str, tier: str, value: float) -> GaugeMetricFamily:
    family = GaugeMetricFamily(name, help_text, labels=["tier"])
    family.add_metric([tier], float(value))
    return family


def _histogram(name: str, help_text: str, tier: str, hist: Histogram) -> HistogramMetricFamily:
    family = HistogramMetricFamily(name, help_text, labels=["tier"])
    buckets, total = hist.snapshot()
    family.add_metric([tier], buckets, total)
    return family


class _Exporter(Collector):
    """The one collector a registry holds: merges every attached manager's families by name."""

    def __init__(self) -> None:
        self._members: list[LookupMetrics] = []
        self._lock = threading.Lock()

    def add(self, metrics: LookupMetrics) -> None:
        with self._lock:
            for other in self._members:
                if other.tier == metrics.tier and other is not metrics:
                    if not other.manager.closed:
                        raise InvalidValueError(f"a live manager with tier label {metrics.tier!r} is already exported")
                    self._members.remove(other)
                    break
            if metrics not in self._members:
                self._members.append(metrics)

    def remove(self, metrics: LookupMetrics) -> None:
        with self._lock:
            if metrics in self._members:
                self._members.remove(metrics)

    def collect(self) -> Iterator[Metric]:
        # One scrape at a time (the HTTP server may run two at once): each
        # member's monotonic counters are read and updated together.
        merged: dict[str, Metric] = {}
        with self._lock:
            for member in self._members:
                for family in member.collect():
                    into = merged.get(family.name)
                    if into is None:
                        merged[family.name] = family
                    else:
                        into.samples.extend(family.samples)
        yield from merged.values()

    def describe(self) -> list[Metric]:
        # Names are fixed, but which appear depends on the members: tell the
        # registry nothing, so adding members never trips its duplicate check.
        return []


_EXPORTERS: weakref.WeakKeyDictionary[CollectorRegistry, _Exporter] = weakref.WeakKeyDictionary()
_EXPORTERS_LOCK = threading.Lock()


def _exporter(registry: CollectorRegistry) -> _Exporter:
    with _EXPORTERS_LOCK:
        exporter = _EXPORTERS.get(registry)
        if exporter is None:
            exporter = _EXPORTERS[registry] = _Exporter()
            registry.register(exporter)
        return exporter
