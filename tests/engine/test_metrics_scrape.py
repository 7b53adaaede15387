"""kvprobe.metrics, scraped over HTTP as Prometheus would.

A test starts prometheus_client's HTTP server on a free loopback port,
drives managers on FsBackend, fetches /metrics and parses it with
prometheus_client's own parser.
"""

from __future__ import annotations

import os
import signal
import time
import urllib.request
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("prometheus_client", reason="the metrics extra is not installed")

from hypothesis import settings
from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.parser import text_string_to_metric_families
from vllm_harness import settle

from kvprobe.backends import FsBackend
from kvprobe.integrations.vllm import AsyncLookupManager as VllmBase
from kvprobe.metrics import LookupMetrics, MeteredCore, MeteredManager
from kvprobe.statemachine import ReqContext
from kvprobe.statemachine.core import LookupCore
from kvprobe.statemachine.types import InvalidInputError, InvalidValueError
from kvprobe.testing.stateful import lookup_machine

KEYS = [bytes([i]) * 16 + (0).to_bytes(4, "big") for i in range(1, 6)]


@pytest.fixture
def server() -> Iterator[tuple[CollectorRegistry, int]]:
    registry = CollectorRegistry()
    httpd, thread = start_http_server(0, addr="127.0.0.1", registry=registry)
    try:
        yield registry, httpd.server_port
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(5)


def scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of /metrics: (name, sorted labels) -> value."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as reply:
        text = reply.read().decode()
    samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return samples


def value(samples: dict[Any, float], name: str, **labels: str) -> float:
    return samples[(name, tuple(sorted(labels.items())))]


class FsTier(VllmBase):
    def __init__(self, root: str, tier_type: str) -> None:
        super().__init__(tier_type=tier_type, core_class=MeteredCore)
        self.files = FsBackend(root)

    def batch_lookup(self, keys: list[bytes], req_context: Any) -> Any:
        return self.files.batch_lookup(keys, req_context)


def test_metrics_of_two_managers_are_scraped_and_parsed(server: tuple[CollectorRegistry, int], tmp_path: Path) -> None:
    registry, port = server
    backend = FsBackend(tmp_path / "a")
    for key in KEYS[:3]:
        backend.store(key, b"kv")
    m = MeteredManager(backend, name="fs-a")
    LookupMetrics(m).register(registry)
    drop_in = FsTier(str(tmp_path / "a"), "fs-b")
    LookupMetrics(drop_in).register(registry)
    try:
        r1, r2 = ReqContext("r1"), ReqContext("r2")
        assert [m.lookup(k, r1) for k in KEYS] == [None] * 5
        m.lookup(KEYS[0], r2)  # joins the pending probe
        m.flush()
        deadline = time.monotonic() + 10
        while m.core.outstanding and not m.core.inbox and time.monotonic() < deadline:
            time.sleep(0.001)
        assert [m.lookup(k, r1) for k in KEYS] == [True, True, True, False, False]  # step 1 applies them
        m.mark_miss([KEYS[1]])
        for key in KEYS[:2]:
            drop_in.lookup(key, r1)
        drop_in.flush()
        settle(drop_in)
        drop_in.flush()  # a second step with nothing new

        samples = scrape(port)
        a, b = {"tier": "fs-a"}, {"tier": "fs-b"}
        assert value(samples, "kvprobe_probes_created_total", **a) == 5
        assert value(samples, "kvprobe_joins_total", **a) == 1
        assert value(samples, "kvprobe_hits_total", **a) == 3
        assert value(samples, "kvprobe_misses_total", **a) == 2
        assert value(samples, "kvprobe_backend_calls_total", **a) == 1
        assert value(samples, "kvprobe_forced_misses_total", **a) == 1
        assert value(samples, "kvprobe_failures_total", kind="raised", **a) == 0
        assert value(samples, "kvprobe_probe_states", **a) == 5
        assert value(samples, "kvprobe_groups_in_flight", **a) == 0
        assert value(samples, "kvprobe_stuck_calls", **a) == 0
        # Five verdicts, all applied in the step after the one that asked.
        assert value(samples, "kvprobe_lookup_delay_steps_count", **a) == 5
        assert value(samples, "kvprobe_lookup_delay_steps_bucket", le="0.0", **a) == 0
        assert value(samples, "kvprobe_lookup_delay_steps_bucket", le="1.0", **a) == 5
        assert value(samples, "kvprobe_lookup_delay_steps_sum", **a) == 5
        assert value(samples, "kvprobe_lookup_delay_seconds_count", **a) == 5
        assert 0 < value(samples, "kvprobe_lookup_delay_seconds_sum", **a) < 5 * 10
        assert value(samples, "kvprobe_lookup_delay_seconds_bucket", le="+Inf", **a) == 5
        # One group of five keys, one backend call.
        assert value(samples, "kvprobe_group_keys_count", **a) == 1
        assert value(samples, "kvprobe_group_keys_sum", **a) == 5
        assert value(samples, "kvprobe_group_keys_bucket", le="4.0", **a) == 0
        assert value(samples, "kvprobe_group_keys_bucket", le="16.0", **a) == 1
        assert value(samples, "kvprobe_backend_call_duration_seconds_count", **a) == 1
        assert value(samples, "kvprobe_backend_call_duration_seconds_sum", **a) > 0
        # The drop-in, in the same families under its own label.
        assert value(samples, "kvprobe_hits_total", **b) == 2
        assert value(samples, "kvprobe_lookup_delay_steps_count", **b) == 2
        assert value(samples, "kvprobe_group_keys_sum", **b) == 2
        assert value(samples, "kvprobe_backend_call_duration_seconds_count", **b) == 1

        # A failing call is counted by kind, and its MISS verdicts are timed too.
        drop_in.files = None  # type: ignore[assignment]  # batch_lookup now raises AttributeError
        drop_in.lookup(KEYS[4], r2)
        drop_in.flush()
        settle(drop_in)
        samples = scrape(port)
        assert value(samples, "kvprobe_failures_total", kind="raised", **b) == 1
        assert value(samples, "kvprobe_backend_errors_total", **b) == 1
        assert value(samples, "kvprobe_lookup_delay_steps_count", **b) == 3
    finally:
        m.shutdown()
        drop_in.shutdown()
    samples = scrape(port)
    assert value(samples, "kvprobe_probe_states", tier="fs-a") == 0
    assert value(samples, "kvprobe_hits_total", tier="fs-a") == 3  # counters survive shutdown


def test_a_tier_label_is_exported_once(tmp_path: Path) -> None:
    registry = CollectorRegistry()
    first = MeteredManager(FsBackend(tmp_path), name="fs")
    LookupMetrics(first).register(registry)
    second = MeteredManager(FsBackend(tmp_path), name="fs")
    try:
        with pytest.raises(InvalidValueError, match="fs"):
            LookupMetrics(second).register(registry)
        first.shutdown()
        LookupMetrics(second).register(registry)  # a closed manager's label is reused
        assert registry.get_sample_value("kvprobe_probe_states", {"tier": "fs"}) == 0
        second.lookup(KEYS[0], ReqContext("r"))
        assert registry.get_sample_value("kvprobe_probe_states", {"tier": "fs"}) == 1
    finally:
        second.shutdown()
    with pytest.raises(InvalidInputError):
        LookupMetrics(object())  # type: ignore[arg-type]


def test_a_plain_manager_exports_counters_without_histograms(tmp_path: Path) -> None:
    from kvprobe.statemachine import AsyncLookupManager

    registry = CollectorRegistry()
    with AsyncLookupManager(FsBackend(tmp_path), name="plain") as m:
        LookupMetrics(m).register(registry)
        assert registry.get_sample_value("kvprobe_batches_total", {"tier": "plain"}) == 0
        assert registry.get_sample_value("kvprobe_group_keys_count", {"tier": "plain"}) is None


def test_the_metered_core_leaves_the_lookup_hot_path_alone() -> None:
    assert MeteredCore.lookup is LookupCore.lookup
    assert {"flush", "apply"} <= set(vars(MeteredCore)) and "lookup" not in vars(MeteredCore)


# The metered core must not change behaviour: the stateful machine on it.
_Metered = lookup_machine(manager_class=MeteredManager)
_Metered.TestCase.settings = settings(settings(), max_examples=max(10, settings().max_examples // 4))
TestMeteredCoreConforms = _Metered.TestCase


def test_a_counter_read_mid_flush_never_goes_down(tmp_path: Path) -> None:
    registry = CollectorRegistry()
    with MeteredManager(FsBackend(tmp_path), name="mono", worker="manual") as m:
        LookupMetrics(m).register(registry)
        m.lookup(KEYS[0], ReqContext("r"))
        assert registry.get_sample_value("kvprobe_probes_created_total", {"tier": "mono"}) == 1
        # What a scrape between the two halves of a flush reads: the step
        # batch taken, the flushed count not yet added.
        taken, m.core.step_batch = m.core.step_batch, []
        assert m.stats.probes_created == 0
        assert registry.get_sample_value("kvprobe_probes_created_total", {"tier": "mono"}) == 1
        m.core.step_batch = taken
        m.flush()
        m.lookup(KEYS[1], ReqContext("r"))
        assert registry.get_sample_value("kvprobe_probes_created_total", {"tier": "mono"}) == 2


def wait_for(condition: Callable[[], bool], what: str, bound_s: float = 30.0) -> None:
    deadline = time.monotonic() + bound_s
    while not condition():
        assert time.monotonic() < deadline, f"not within {bound_s} s: {what}"
        time.sleep(0.01)


def test_helper_gauges_count_busy_helpers_and_not_killed_ones(
    server: tuple[CollectorRegistry, int], tmp_path: Path
) -> None:
    from gated_backend import GateFileBackend

    from kvprobe.backends.process import ProcessBackend
    from kvprobe.statemachine import AsyncLookupManager

    registry, port = server
    gate = tmp_path / "gate"
    backend = ProcessBackend(partial(GateFileBackend, str(gate)), max_procs=2)
    m = AsyncLookupManager(backend, name="procs")
    LookupMetrics(m).register(registry)
    procs = {"tier": "procs"}
    try:
        samples = scrape(port)
        assert value(samples, "kvprobe_helper_processes", **procs) == 1  # started with the backend
        assert value(samples, "kvprobe_idle_helper_processes", **procs) == 1
        # Two request groups: two calls in flight, each holding a helper.
        m.lookup(KEYS[0], ReqContext("r1"))
        m.lookup(KEYS[1], ReqContext("r2"))
        m.flush()
        wait_for(lambda: len(backend.helper_pids) == 2 and not backend.pids, "both helpers in a call")
        samples = scrape(port)
        assert value(samples, "kvprobe_helper_processes", **procs) == 2
        assert value(samples, "kvprobe_idle_helper_processes", **procs) == 0
        gate.touch()
        settle(m)
        assert [m.lookup(k, ReqContext("r1")) for k in KEYS[:1]] == [True]
        wait_for(lambda: len(backend.pids) == 2, "both helpers back to idle")
        # A helper killed from outside while idle is not live any more,
        # though the backend has not noticed yet.
        victim = backend.pids[0]
        os.kill(victim, signal.SIGKILL)
        wait_for(lambda: value(scrape(port), "kvprobe_helper_processes", **procs) == 1, "the killed helper uncounted")
        samples = scrape(port)
        assert value(samples, "kvprobe_idle_helper_processes", **procs) == 1
        assert victim in backend.helper_pids  # still listed: the gauge counted the live ones, not the list
    finally:
        gate.touch()
        m.shutdown()
        backend.close()


class _CountingTier(FsBackend):
    """A tier with the object backend's two views: its counters and its store's pace."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.stats = {"shed": 3, "retried_keys": 7}
        self.pacing: dict[str, float | int | None] = {"rate": None, "decreases": 2, "holds": 0}


def test_a_backends_own_counters_and_pace_are_exported(tmp_path: Path) -> None:
    from kvprobe.statemachine import AsyncLookupManager

    registry = CollectorRegistry()
    tier = _CountingTier(tmp_path)
    with AsyncLookupManager(tier, name="obj") as m:
        LookupMetrics(m).register(registry)
        value = partial(registry.get_sample_value, labels={"tier": "obj"})
        assert (value("kvprobe_backend_shed_total"), value("kvprobe_backend_retried_keys_total")) == (3, 7)
        assert value("kvprobe_backend_pace_decreases_total") == 2
        assert value("kvprobe_backend_pace_rate") is None  # unpaced: no gauge
        tier.pacing["rate"] = 12.5
        tier.stats["shed"] = 1  # a counter read lower than before never goes down
        assert (value("kvprobe_backend_pace_rate"), value("kvprobe_backend_shed_total")) == (12.5, 3)
