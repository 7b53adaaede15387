"""Figures for the docs, drawn from a ``bench.run_all`` results file: ``python -m bench.plots [--from PATH]``.

``bench.run_all`` takes the measurements (see ``bench.series``) and saves
them (default ``bench/results/latest.json``); this draws them with
matplotlib (extra ``plots``) into ``docs/img/`` (``--out DIR``), so the
figures and the suite's table come from the same runs:

* ``starvation.png`` (benchmark ``scheduler_rate``): the scheduler thread's
  lookup rate over time while the worker probes a block tree of 40,000
  files (8,000 in a ``--quick`` run) in 4 request groups:
  ``NixlPosixBackend`` and ``FsBackend`` in the worker thread,
  ``ProcessBackend(NixlPosixBackend)`` (the same calls in a helper
  process), and idle (no probe in flight).
* ``lookup_delay.png`` (``lookup_delay``): the distribution of lookup delay
  (per verdict, in scheduler steps and in milliseconds) for each backend.
* ``tlc_states.png`` (``tlc_cost``): TLC's distinct states against wall
  time per model config (TLC reports progress once a minute, so a short
  run is its start and end points).

A figure whose benchmark is not in the file is skipped with a line saying
so.  Nothing here measures or asserts a timing.  The machine's load shapes
every curve: compare curves of one run, not runs of different days (each
figure's footer gives the run's date and load average).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from bench.run_all import DEFAULT_OUT as DEFAULT_RESULTS
from bench.series import Series

__all__ = ["DEFAULT_OUT", "FIGURES", "load_results", "main"]

DEFAULT_OUT = Path(__file__).resolve().parents[1] / "docs" / "img"


def load_results(path: Path) -> dict[str, Any]:
    """The results file ``bench.run_all`` wrote.

    Raises:
        FileNotFoundError: there is none at ``path``.
        ValueError: the file is not a ``bench.run_all`` results file.
    """
    record = json.loads(path.read_text())
    if not isinstance(record, dict) or not isinstance(record.get("benchmarks"), dict):
        raise ValueError(f"{path} is not a bench.run_all results file (no 'benchmarks')")
    return record


def _save(fig: Any, path: Path, record: dict[str, Any]) -> Path:
    """Lay out ``fig`` with the run's footer, write it to ``path`` and free it."""
    import matplotlib.pyplot as plt

    fig.tight_layout(rect=(0, 0.03, 1, 1))
    machine = record.get("machine", {})
    load = machine.get("load_average_start") or ["?"]
    command = str(record.get("command", "?")).removeprefix("python -m ")
    text = (
        f"{command}, {str(record.get('date', '?'))[:16].replace('T', ' ')} UTC, {machine.get('cores', '?')} cores "
        f"at load {load[0]}" + (" (quick run: too short to quote)" if record.get("quick") else "")
    )
    fig.text(0.5, 0.005, text, ha="center", va="bottom", fontsize=7, color="0.4")
    fig.savefig(path)
    plt.close(fig)
    return path


# --- scheduler lookup rate over time ---------------------------------------------------


def _binned(series: Series, bin_s: float) -> tuple[list[float], list[float]]:
    if not series.stamps:
        return [], []
    bins = int(series.stamps[-1] / bin_s) + 1
    counts = [0] * bins
    for stamp in series.stamps:
        counts[int(stamp / bin_s)] += series.per_stamp
    # The last bin is partial: drop it.
    return [(i + 0.5) * bin_s * 1000 for i in range(bins - 1)], [c / bin_s for c in counts[:-1]]


def plot_starvation(raw: dict[str, Any], out: Path, record: dict[str, Any]) -> Path:
    import matplotlib.pyplot as plt

    runs = [Series(s["label"], s["stamps"], raw["per_stamp"], s["busy_until"]) for s in raw["series"]]
    longest = max(s.stamps[-1] for s in runs if s.stamps)
    fig, ax = plt.subplots(figsize=(9, 4.8), dpi=110)
    colors = ["0.35", "tab:red", "tab:orange", "tab:blue", "tab:green"]  # idle first
    for series, color in zip(runs, colors, strict=False):
        xs, ys = _binned(series, 0.025 if longest < 1.0 else 0.05)
        ax.plot(xs, [y / 1000 for y in ys], label=series.label, color=color, linewidth=1.6)
        if series.busy_until is not None:
            ax.axvline(series.busy_until * 1000, color=color, linestyle=":", linewidth=1)
    ax.set_xlabel("ms since the flush that handed the worker the probes (dotted: its last verdict applied)")
    ax.set_ylabel("scheduler lookups per ms")
    ax.set_title(
        f"Scheduler lookup rate while the worker probes {raw['n_keys']:,} files ({raw['groups']} request groups)"
    )
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right", fontsize=9)
    return _save(fig, out / "starvation.png", record)


# --- lookup delay distribution -----------------------------------------------------------


def plot_delays(raw: dict[str, Any], out: Path, record: dict[str, Any]) -> Path:
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FixedLocator, MaxNLocator, NullFormatter, ScalarFormatter

    samples: dict[str, list[list[float]]] = raw["samples"]
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.6), dpi=110)
    width = 0.8 / max(len(samples), 1)
    for i, (label, obs) in enumerate(samples.items()):
        total = sum(c for _, _, c in obs) or 1
        most = int(max((s for s, _, _ in obs), default=1))
        xs = list(range(0, most + 1))
        share = [sum(c for s, _, c in obs if s == x) / total for x in xs]
        left.bar([x + (i - (len(samples) - 1) / 2) * width for x in xs], share, width=width, label=label)
        ms = sorted(v for s, sec, c in obs for v in [sec * 1000] * int(c))
        if ms:
            right.plot(ms, [(j + 1) / len(ms) for j in range(len(ms))], label=label, linewidth=1.6)
    left.xaxis.set_major_locator(MaxNLocator(integer=True))  # whole steps, and few ticks when the tail is long
    left.set_xlabel("steps from a key's first lookup to its verdict (1 = the next step)")
    left.set_ylabel("share of verdicts")
    left.set_title("Lookup delay in scheduler steps")
    left.grid(axis="y", alpha=0.3)
    left.legend(fontsize=8)
    right.set_xscale("log")
    right.xaxis.set_major_locator(FixedLocator([5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000]))
    right.xaxis.set_major_formatter(ScalarFormatter())
    right.xaxis.set_minor_formatter(NullFormatter())
    right.set_xlabel("ms from the flush to the verdict being applied (log)")
    right.set_ylabel("share of verdicts at most this late")
    right.set_title("Lookup delay in milliseconds (cumulative)")
    right.grid(alpha=0.3)
    right.legend(fontsize=8, loc="lower right")
    fig.suptitle(
        f"{raw['steps']} steps, {raw['arrivals_per_step']} new requests of {raw['keys_per_request']} keys per step, "
        f"{raw['forward_ms']:.0f} ms forward pass, {raw['tree_files']:,}-file tree"
    )
    return _save(fig, out / "lookup_delay.png", record)


# --- TLC distinct states over time -------------------------------------------------------


def plot_tlc(raw: dict[str, Any], out: Path, record: dict[str, Any]) -> Path:
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.6), dpi=110)
    for config in raw["configs"]:
        points = config.get("points") or []
        if not points:
            continue
        xs = [t for t, _ in points]
        ys = [max(d, 1) for _, d in points]
        label = f"{config['config']} ({config['outcome']}): {ys[-1]:,} in {xs[-1]:.0f} s"
        ax.plot(xs, ys, marker="o", linestyle="--", label=label, linewidth=1.2)
    ax.set_yscale("log")
    ax.set_xlabel("wall seconds (TLC, 1 worker); points are TLC's own progress reports (about one a minute)")
    ax.set_ylabel("distinct states found (log)")
    ax.set_title("TLC: distinct states against time, per model config")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=9)
    return _save(fig, out / "tlc_states.png", record)


#: figure -> (the bench.run_all benchmark whose raw data it draws, the drawing function)
FIGURES: dict[str, tuple[str, Callable[[dict[str, Any], Path, dict[str, Any]], Path]]] = {
    "starvation": ("scheduler_rate", plot_starvation),
    "delay": ("lookup_delay", plot_delays),
    "tlc": ("tlc_cost", plot_tlc),
}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--from", dest="source", type=Path, default=DEFAULT_RESULTS, help=f"results file (default {DEFAULT_RESULTS})"
    )
    parser.add_argument("--only", nargs="*", default=(), choices=list(FIGURES))
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    try:
        record = load_results(args.source)
    except FileNotFoundError:
        print(f"bench.plots: no results at {args.source}: run `python -m bench.run_all` first", file=sys.stderr)
        return 2
    except ValueError as exc:  # json.JSONDecodeError is one
        print(f"bench.plots: {args.source} is not a bench.run_all results file ({exc})", file=sys.stderr)
        return 2
    import matplotlib

    matplotlib.use("Agg")
    args.out.mkdir(parents=True, exist_ok=True)
    drawn = missing = 0
    for name, (bench, draw) in FIGURES.items():
        if args.only and name not in args.only:
            continue
        raw = record["benchmarks"].get(bench, {}).get("raw")
        if not raw:
            print(f"{name}: no {bench} data in {args.source}: run `python -m bench.run_all --only {bench}`")
            missing += 1
            continue
        print(draw(raw, args.out, record))
        drawn += 1
    return 0 if drawn and not missing else 1


if __name__ == "__main__":
    sys.exit(main())
