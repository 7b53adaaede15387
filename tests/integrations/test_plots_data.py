"""bench.plots' measurements give the data its figures need (no timing is asserted).

Small trees and few steps: these check the shape of the data (a time series
that ends after the worker's last verdict, delays of at least one step per
verdict), so ``python -m bench.plots`` keeps working.
"""

from __future__ import annotations

import pytest

pytest.importorskip("prometheus_client", reason="the metrics extra is not installed")

from bench.plots import Series, _binned, delay_samples, rate_series
from bench.trees import block_tree
from kvprobe.backends.fs import FsBackend


def test_rate_series_covers_the_busy_window_and_idle_has_none() -> None:
    with block_tree(256 + 400) as (root, keys):
        busy = rate_series(FsBackend(root), keys, 2, "busy")
        idle = rate_series(FsBackend(root), keys, 2, "idle", idle_s=0.05)
    assert busy.busy_until is not None and busy.stamps[-1] >= busy.busy_until
    assert busy.stamps == sorted(busy.stamps)
    assert idle.busy_until is None and idle.stamps[-1] >= 0.05


def test_binned_rates_count_every_full_bin() -> None:
    series = Series("s", stamps=[0.001, 0.002, 0.011, 0.025], per_stamp=10)
    xs, ys = _binned(series, 0.01)
    assert xs == [5.0, 15.0]  # bin centres in ms; the partial last bin is dropped
    assert ys == [2000.0, 1000.0]  # lookups per second


def test_delay_samples_are_verdicts_at_least_one_step_late() -> None:
    with block_tree(600) as (root, keys):
        delays = delay_samples(FsBackend(root), keys, steps=4, arrivals=2, keys_per_request=32, forward_ms=2)
    assert delays
    assert all(steps >= 1 and seconds > 0 and count >= 1 for steps, seconds, count in delays)
    assert sum(count for _, _, count in delays) <= 4 * 2 * 32
