"""The measurements behind the figures; ``bench.run_all`` takes them and ``bench.plots`` draws them.

Three benchmarks of ``bench.run_all``, each returning its table rows and its
raw series (plain JSON data, saved by ``run_all`` in its results file):

* ``scheduler_rate`` (:func:`scheduler_rate`): the scheduler thread's lookup
  completion times (lookups of already-resolved keys, as a waiting request
  re-scanning its prefix does) while the worker probes a block tree of
  40,000 files (8,000 with ``quick``) in 4 request groups:
  ``NixlPosixBackend`` and ``FsBackend`` in the worker thread,
  ``ProcessBackend(NixlPosixBackend)`` (the same calls in a helper process),
  and idle (no probe in flight).  Same setup as ``bench.reliability.starvation``,
  sampled as a time series.
* ``lookup_delay`` (:func:`lookup_delay`): per verdict, the steps and
  seconds from a key's first lookup to its verdict, per backend, from a
  scheduler loop on a :class:`~kvprobe.metrics.MeteredManager` (the delays
  ``kvprobe.metrics`` exports).
* ``tlc_cost`` (:func:`tlc_cost`): TLC per model config (the configs
  ``bench.checks.tlc_cost`` runs), with the distinct-state count at each progress
  report TLC printed, and the Hypothesis examples per second of
  ``bench.checks.tlc_cost``.

Nothing here asserts a timing.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from bench.common import Row, rows_from_output
from bench.reliability.starvation import resolve_hot_keys
from bench.trees import block_tree
from kvprobe.backends.fs import FsBackend
from kvprobe.backends.process import ProcessBackend
from kvprobe.metrics import MeteredCore, MeteredManager
from kvprobe.statemachine import AsyncLookupManager, ReqContext

__all__ = ["Series", "delay_samples", "lookup_delay", "rate_series", "scheduler_rate", "tlc_cost"]

IDLE_LABEL = "idle (nothing in flight)"


def _nixl(root: str) -> Any:
    from kvprobe.backends.nixl_posix import NixlPosixBackend

    return NixlPosixBackend(root)


def _close(backend: Any) -> None:
    close = getattr(backend, "close", None)
    if callable(close):
        close()


def _measure_each(makers: dict[str, Callable[[], Any]], measure: Callable[[Any], Any]) -> dict[str, Any]:
    """``measure(backend)`` for a fresh backend of each maker, closed afterwards."""
    out = {}
    for label, make in makers.items():
        backend = make()
        try:
            out[label] = measure(backend)
        finally:
            _close(backend)
    return out


# --- scheduler lookup rate over time ---------------------------------------------------


@dataclass
class Series:
    """Lookup completion times (seconds since the flush), and when the worker finished."""

    label: str
    stamps: list[float] = field(default_factory=list)
    per_stamp: int = 256
    busy_until: float | None = None


def rate_series(backend: Any, keys: Sequence[bytes], groups: int, label: str, idle_s: float | None = None) -> Series:
    """Time the scheduler's lookups of 256 resolved keys, pass after pass.

    With ``idle_s`` None: right after a flush that hands the worker
    ``keys[256:]`` in ``groups`` request groups, until their last verdict is
    applied plus a short tail.  With ``idle_s``: no probe in flight, for
    that long.
    """
    hot_ctx = ReqContext("hot")
    hot, big = keys[:256], keys[256:]
    per = -(-len(big) // groups)
    series = Series(label)
    with AsyncLookupManager(backend, name="plots") as m:
        pairs = resolve_hot_keys(m, hot, hot_ctx)
        if idle_s is None:
            for g in range(groups):
                ctx = ReqContext(f"big-{g}")
                for key in big[g * per : (g + 1) * per]:
                    m.lookup(key, ctx)
        lookup = m.lookup
        clock = time.perf_counter
        t0 = clock()
        if idle_s is None:
            m.flush()
        stamps = series.stamps
        tail_until = t0 + idle_s if idle_s is not None else None
        while True:
            for key, ctx in pairs:
                lookup(key, ctx)
            now = clock()
            stamps.append(now - t0)
            if tail_until is None and not m.core.outstanding:
                series.busy_until = now - t0
                tail_until = now + 0.15
            if tail_until is not None and now >= tail_until:
                break
    return series


def _mean_rate(series: Series, until: float) -> float:
    """Lookups per second up to ``until`` seconds."""
    done = sum(1 for s in series.stamps if s <= until) * series.per_stamp
    return done / until if until > 0 else 0.0


def scheduler_rate(quick: bool) -> tuple[list[Row], dict[str, Any]]:
    """Rows (busy/idle mean lookup rate per backend) and the raw series."""
    n_keys = 8_000 if quick else 40_000
    groups = 4
    with block_tree(n_keys + 256) as (root, keys):
        makers: dict[str, Callable[[], Any]] = {
            "NixlPosixBackend (worker thread)": lambda: _nixl(root),
            "FsBackend (worker thread)": lambda: FsBackend(root),
            "ProcessBackend(NixlPosixBackend)": lambda: ProcessBackend(partial(_nixl, root)),
        }
        busy: dict[str, Series] = _measure_each(makers, lambda b: rate_series(b, keys, groups, ""))
        longest = max((s.busy_until or 0.0) for s in busy.values())
        idle: Series = _measure_each(
            {IDLE_LABEL: lambda: _nixl(root)}, lambda b: rate_series(b, keys, groups, "", idle_s=longest + 0.15)
        )[IDLE_LABEL]
    idle_rate = _mean_rate(idle, idle.stamps[-1])
    rows = []
    for label, series in busy.items():
        window = series.busy_until or 0.0
        rows.append(
            Row(
                "scheduler_rate",
                f"{label}: mean lookup rate while busy / idle",
                f"{_mean_rate(series, window) / idle_rate:.2f}" if idle_rate else "n/a",
                f"{n_keys:,} files / {groups} groups, busy {window:.2f} s; idle {idle_rate / 1e6:.2f} M lookups/s",
            )
        )
    raw = {
        "n_keys": n_keys,
        "groups": groups,
        "per_stamp": idle.per_stamp,
        "series": [
            {"label": label, "stamps": [round(s, 6) for s in series.stamps], "busy_until": series.busy_until}
            for label, series in [(IDLE_LABEL, idle), *busy.items()]
        ],
    }
    return rows, raw


# --- lookup delay distribution -----------------------------------------------------------


def delay_samples(
    backend: Any,
    keys: Sequence[bytes],
    steps: int,
    arrivals: int = 4,
    keys_per_request: int = 256,
    forward_ms: float = 15.0,
    seed: int = 5,
    settle_s: float = 10.0,
) -> list[tuple[int, float, int]]:
    """Run a scheduler loop on a MeteredManager; return its (steps, seconds, verdicts) delays.

    ``steps`` steps take arrivals; then steps go on without arrivals until
    every request has its verdicts (at most ``settle_s`` seconds), so that a
    worker the machine's load slows down still has its answers sampled.
    """
    rng = random.Random(seed)
    m = MeteredManager(backend, name="delay")
    core = m.core
    assert isinstance(core, MeteredCore)
    core.raw_delays = []
    live: list[tuple[ReqContext, list[bytes]]] = []
    serial = 0
    try:
        settle_until: float | None = None
        step = 0
        while step < steps or live:
            if step < steps:
                for _ in range(arrivals):
                    live.append((ReqContext(f"r{serial}"), rng.sample(list(keys), keys_per_request)))
                    serial += 1
            elif settle_until is None:
                settle_until = time.monotonic() + settle_s
            elif time.monotonic() > settle_until:
                break
            step += 1
            still = []
            for ctx, wanted in live:
                verdicts = [m.lookup(k, ctx) for k in wanted]
                if None in verdicts:
                    still.append((ctx, wanted))
                else:
                    m.cleanup(ctx.req_id)
            live = still
            m.flush()
            time.sleep(forward_ms / 1000)
        core.fold()
        return list(core.raw_delays)
    finally:
        m.shutdown()


def _weighted_quantile(values: Sequence[tuple[float, int]], q: float) -> float:
    """The ``q`` quantile of values given with counts."""
    ordered = sorted(values)
    total = sum(c for _, c in ordered)
    seen = 0
    for value, count in ordered:
        seen += count
        if seen >= q * total:
            return value
    return ordered[-1][0]


def lookup_delay(quick: bool) -> tuple[list[Row], dict[str, Any]]:
    """Rows (median and p90 delay per backend) and the raw (steps, seconds, count) samples."""
    steps, tree, arrivals, keys_per_request, forward_ms = (15 if quick else 60), 20_000, 4, 256, 15.0
    with block_tree(tree) as (root, keys):
        makers: dict[str, Callable[[], Any]] = {
            "FsBackend": lambda: FsBackend(root),
            "NixlPosixBackend": lambda: _nixl(root),
            "ProcessBackend(FsBackend)": lambda: ProcessBackend(partial(FsBackend, root)),
            "ProcessBackend(NixlPosixBackend)": lambda: ProcessBackend(partial(_nixl, root)),
        }
        samples: dict[str, list[tuple[int, float, int]]] = _measure_each(
            makers, lambda b: delay_samples(b, keys, steps, arrivals, keys_per_request, forward_ms)
        )
    rows = []
    for label, obs in samples.items():
        if not obs:
            rows.append(Row("lookup_delay", label, "n/a", "no verdict recorded"))
            continue
        in_steps = [(float(s), c) for s, _, c in obs]
        in_ms = [(sec * 1000, c) for _, sec, c in obs]
        rows.append(
            Row(
                "lookup_delay",
                f"{label}: delay median / p90",
                f"{_weighted_quantile(in_steps, 0.5):.0f} / {_weighted_quantile(in_steps, 0.9):.0f} steps, "
                f"{_weighted_quantile(in_ms, 0.5):.0f} / {_weighted_quantile(in_ms, 0.9):.0f} ms",
                f"{sum(c for _, c in in_steps):,} verdicts, {steps} steps",
            )
        )
    raw = {
        "steps": steps,
        "tree_files": tree,
        "arrivals_per_step": arrivals,
        "keys_per_request": keys_per_request,
        "forward_ms": forward_ms,
        "samples": {label: [[s, round(sec, 6), c] for s, sec, c in obs] for label, obs in samples.items()},
    }
    return rows, raw


# --- TLC distinct states over time -------------------------------------------------------


def tlc_cost(quick: bool) -> tuple[list[Row], dict[str, Any]]:
    """Rows for each TLC config and for Hypothesis (``bench.checks.tlc_cost``), and the raw per-config progress."""
    from bench.checks.tlc_cost import hypothesis_rate, report as tlc_report, tlc_costs

    configs = tlc_costs(quick)
    hyp = hypothesis_rate()
    raw = {"configs": configs, "hypothesis": hyp}
    try:
        text = tlc_report(configs, hyp)
    except Exception as exc:  # a table it cannot print must not lose the measurements
        return [Row("model checking", "TLC table", "n/a", f"{type(exc).__name__}: {exc}"[:100])], raw
    rows = rows_from_output("model checking", text, 0)
    rows.append(Row("model checking", "Hypothesis examples/s", text.splitlines()[-1]))
    return rows, raw
