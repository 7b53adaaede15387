"""Figures for the docs: ``python -m bench.plots [--quick] [--only NAME ...] [--out DIR]``.

Draws, with matplotlib (extra ``plots``), into ``docs/img/``:

* ``starvation.png``: the scheduler thread's lookup rate over time (lookups
  of already-resolved keys, as a waiting request re-scanning its prefix
  does) while the worker probes a block tree of 40,000 files (8,000 with
  ``--quick``) in 4 request groups: ``NixlPosixBackend`` and ``FsBackend``
  in the worker thread, ``ProcessBackend(NixlPosixBackend)`` (the same calls
  in a helper process), and idle (no probe in flight).  Same setup as
  ``bench.starvation`` (its tree and its backends), sampled as a time series.
* ``lookup_delay.png``: the distribution of lookup delay (per verdict, in
  scheduler steps and in milliseconds) for each backend, from a scheduler
  loop on a :class:`~kvprobe.metrics.MeteredManager` (the delays are the
  ones ``kvprobe.metrics`` exports).
* ``tlc_states.png``: TLC's distinct states against wall time per model
  config (the configs ``bench.tlc_cost`` runs; TLC reports progress once a
  minute, so a short run is its start and end points).

Nothing here asserts a timing.  The machine's load shapes every curve:
compare curves of one run, not runs of different days.
"""

from __future__ import annotations

import argparse
import logging
import random
import re
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from bench.starvation import chunked_nixl, resolve_hot_keys
from bench.trees import block_tree
from kvprobe.backends.fs import FsBackend
from kvprobe.backends.process import ProcessBackend
from kvprobe.metrics import MeteredCore, MeteredManager
from kvprobe.statemachine import AsyncLookupManager, ReqContext

__all__ = ["PLOTS", "delay_samples", "main", "rate_series", "tlc_series"]

DEFAULT_OUT = Path(__file__).resolve().parents[1] / "docs" / "img"
PLOTS = ("starvation", "delay", "tlc")
del chunked_nixl  # imported to fail early if bench.starvation's NIXL helpers moved


def _nixl(root: str) -> Any:
    from kvprobe.backends.nixl_posix import NixlPosixBackend

    return NixlPosixBackend(root)


def _close(backend: Any) -> None:
    close = getattr(backend, "close", None)
    if callable(close):
        close()


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


def _binned(series: Series, bin_s: float) -> tuple[list[float], list[float]]:
    if not series.stamps:
        return [], []
    bins = int(series.stamps[-1] / bin_s) + 1
    counts = [0] * bins
    for stamp in series.stamps:
        counts[int(stamp / bin_s)] += series.per_stamp
    # The last bin is partial: drop it.
    return [(i + 0.5) * bin_s * 1000 for i in range(bins - 1)], [c / bin_s for c in counts[:-1]]


def plot_starvation(out: Path, quick: bool) -> Path:
    import matplotlib.pyplot as plt

    n_keys = 8_000 if quick else 40_000
    groups = 4
    with block_tree(n_keys + 256) as (root, keys):
        makers: dict[str, Callable[[], Any]] = {
            "NixlPosixBackend (worker thread)": lambda: _nixl(root),
            "FsBackend (worker thread)": lambda: FsBackend(root),
            "ProcessBackend(NixlPosixBackend)": lambda: ProcessBackend(partial(_nixl, root)),
        }
        runs: list[Series] = []
        for label, make in makers.items():
            backend = make()
            try:
                runs.append(rate_series(backend, keys, groups, label))
            finally:
                _close(backend)
        longest = max((s.busy_until or 0.0) for s in runs)
        backend = _nixl(root)
        try:
            runs.insert(0, rate_series(backend, keys, groups, "idle (nothing in flight)", idle_s=longest + 0.15))
        finally:
            _close(backend)
    fig, ax = plt.subplots(figsize=(9, 4.8), dpi=110)
    colors = ["0.35", "tab:red", "tab:orange", "tab:blue"]  # idle first, then the makers' order
    for series, color in zip(runs, colors, strict=True):
        xs, ys = _binned(series, 0.025 if quick else 0.05)
        ax.plot(xs, [y / 1000 for y in ys], label=series.label, color=color, linewidth=1.6)
        if series.busy_until is not None:
            ax.axvline(series.busy_until * 1000, color=color, linestyle=":", linewidth=1)
    ax.set_xlabel("ms since the flush that handed the worker the probes (dotted: its last verdict applied)")
    ax.set_ylabel("scheduler lookups per ms")
    ax.set_title(f"Scheduler lookup rate while the worker probes {n_keys:,} files ({groups} request groups)")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right", fontsize=9)
    fig.tight_layout()
    path = out / "starvation.png"
    fig.savefig(path)
    plt.close(fig)
    return path


# --- lookup delay distribution -----------------------------------------------------------


def delay_samples(
    backend: Any,
    keys: Sequence[bytes],
    steps: int,
    arrivals: int = 4,
    keys_per_request: int = 256,
    forward_ms: float = 15.0,
    seed: int = 5,
) -> list[tuple[int, float, int]]:
    """Run a scheduler loop on a MeteredManager; return its (steps, seconds, verdicts) delays."""
    rng = random.Random(seed)
    m = MeteredManager(backend, name="delay")
    core = m.core
    assert isinstance(core, MeteredCore)
    core.raw_delays = []
    live: list[tuple[ReqContext, list[bytes]]] = []
    serial = 0
    try:
        for _ in range(steps):
            for _ in range(arrivals):
                live.append((ReqContext(f"r{serial}"), rng.sample(list(keys), keys_per_request)))
                serial += 1
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


def plot_delays(out: Path, quick: bool) -> Path:
    import matplotlib.pyplot as plt

    steps = 15 if quick else 60
    with block_tree(20_000) as (root, keys):
        makers: dict[str, Callable[[], Any]] = {
            "FsBackend": lambda: FsBackend(root),
            "NixlPosixBackend": lambda: _nixl(root),
            "ProcessBackend(FsBackend)": lambda: ProcessBackend(partial(FsBackend, root)),
            "ProcessBackend(NixlPosixBackend)": lambda: ProcessBackend(partial(_nixl, root)),
        }
        samples: dict[str, list[tuple[int, float, int]]] = {}
        for label, make in makers.items():
            backend = make()
            try:
                samples[label] = delay_samples(backend, keys, steps)
            finally:
                _close(backend)
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.6), dpi=110)
    width = 0.8 / len(samples)
    for i, (label, obs) in enumerate(samples.items()):
        total = sum(c for _, _, c in obs) or 1
        most = max((s for s, _, _ in obs), default=1)
        xs = list(range(0, most + 1))
        share = [sum(c for s, _, c in obs if s == x) / total for x in xs]
        left.bar([x + (i - (len(samples) - 1) / 2) * width for x in xs], share, width=width, label=label)
        ms = sorted(v for s, sec, c in obs for v in [sec * 1000] * c)
        if ms:
            right.plot(ms, [(j + 1) / len(ms) for j in range(len(ms))], label=label, linewidth=1.6)
    longest = max((s for obs in samples.values() for s, _, _ in obs), default=1)
    left.set_xticks(range(0, longest + 1))
    left.set_xlabel("steps from a key's first lookup to its verdict (1 = the next step)")
    left.set_ylabel("share of verdicts")
    left.set_title("Lookup delay in scheduler steps")
    left.grid(axis="y", alpha=0.3)
    left.legend(fontsize=8)
    right.set_xscale("log")
    from matplotlib.ticker import FixedLocator, NullFormatter, ScalarFormatter

    right.xaxis.set_major_locator(FixedLocator([5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000]))
    right.xaxis.set_major_formatter(ScalarFormatter())
    right.xaxis.set_minor_formatter(NullFormatter())
    right.set_xlabel("ms from the flush to the verdict being applied (log)")
    right.set_ylabel("share of verdicts at most this late")
    right.set_title("Lookup delay in milliseconds (cumulative)")
    right.grid(alpha=0.3)
    right.legend(fontsize=8, loc="lower right")
    fig.suptitle(f"{steps} steps, 4 new requests of 256 keys per step, 15 ms forward pass, 20,000-file tree")
    fig.tight_layout()
    path = out / "lookup_delay.png"
    fig.savefig(path)
    plt.close(fig)
    return path


# --- TLC distinct states over time -------------------------------------------------------

_STATS = re.compile(r"([\d,]+) states generated.*?([\d,]+) distinct states found")


def tlc_series(quick: bool, long: bool = False) -> dict[str, list[tuple[float, int]]]:
    """Per config: (seconds, distinct states) at each progress report TLC printed, and the end."""
    from kvprobe.tlc import MSG_PROGRESS, MSG_STATS, run_tlc, tla_dir

    folder = tla_dir()
    out: dict[str, list[tuple[float, int]]] = {}
    for cfg in sorted(folder.glob("*.cfg")):
        first = cfg.read_text().splitlines()[0]
        if "reachability" in first or (quick and cfg.stem != "default") or ("(long)" in first and not long):
            continue
        points: list[tuple[float, int]] = []
        t0 = time.monotonic()

        def note(msg: Any, points: list[tuple[float, int]] = points, t0: float = t0) -> None:
            if msg.code in (MSG_PROGRESS, MSG_STATS):
                found = _STATS.search(msg.text)
                if found:
                    points.append((time.monotonic() - t0, int(found.group(2).replace(",", ""))))

        result = run_tlc(folder / "MC.tla", cfg, workers=1, on_message=note)
        label = f"{cfg.stem} ({result.outcome})"
        out[label] = points
    return out


def plot_tlc(out: Path, quick: bool, long: bool = False) -> Path:
    import matplotlib.pyplot as plt

    series = tlc_series(quick, long)
    fig, ax = plt.subplots(figsize=(8, 4.6), dpi=110)
    for label, points in series.items():
        if not points:
            continue
        xs = [t for t, _ in points]
        ys = [max(d, 1) for _, d in points]
        ax.plot(xs, ys, marker="o", linestyle="--", label=f"{label}: {ys[-1]:,} in {xs[-1]:.0f} s", linewidth=1.2)
    ax.set_yscale("log")
    ax.set_xlabel("wall seconds (TLC, 1 worker); points are TLC's own progress reports (about one a minute)")
    ax.set_ylabel("distinct states found (log)")
    ax.set_title("TLC: distinct states against time, per model config")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=9)
    fig.tight_layout()
    path = out / "tlc_states.png"
    fig.savefig(path)
    plt.close(fig)
    return path


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller trees, fewer steps, only TLC's default config")
    parser.add_argument("--long", action="store_true", help="also the TLC configs marked (long)")
    parser.add_argument("--only", nargs="*", default=(), choices=PLOTS)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    logging.disable(logging.INFO)  # NIXL logs every agent it creates at INFO
    import matplotlib

    matplotlib.use("Agg")
    args.out.mkdir(parents=True, exist_ok=True)
    for name in PLOTS:
        if args.only and name not in args.only:
            continue
        t0 = time.perf_counter()
        if name == "starvation":
            path = plot_starvation(args.out, args.quick)
        elif name == "delay":
            path = plot_delays(args.out, args.quick)
        else:
            path = plot_tlc(args.out, args.quick, args.long)
        print(f"{path} ({time.perf_counter() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
