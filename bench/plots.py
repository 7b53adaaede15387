"""Figures for the docs, drawn from measurements saved in files: ``python -m bench.plots [--from PATH]``.

``bench.run_all`` takes the measurements (see ``bench.series``) and saves
each run in a new file under ``bench/results/``; this draws them with
matplotlib (extra ``plots``) into ``bench/results/img/`` (``--out DIR``),
each figure from the newest run that measured it (``--from PATH``: from
that file only):

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

``--update-docs`` draws into ``docs/img/`` instead and writes, beside each
picture, the data it was drawn from to ``docs/data/NAME.json`` (the run's
command, date and machine, and that benchmark's measurements), which the
picture's caption cites (:mod:`bench.docdata`); ``--from`` such a file
redraws it.  A data file of ``docs/data`` that holds a table and a
``plot`` entry (``{"table": ID, "label_columns": N, "ylabel": ...}``) is
drawn as bars: each row's cells, written "median (min-max)", as a bar with
its spread.

A figure whose benchmark is not in the file is skipped with a line saying
so.  Nothing here measures or asserts a timing.  The machine's load shapes
every curve: compare curves of one run, not runs of different days (each
figure's footer gives the run's date and load average).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from bench.common import DOCS_DIR, RESULTS_DIR
from bench.docdata import DATA_DIR, dumps
from bench.run_all import results_files
from bench.series import Series

__all__ = ["DEFAULT_OUT", "FIGURES", "load_results", "main", "plot_spread_table"]

DEFAULT_OUT = RESULTS_DIR / "img"
DOCS_OUT = DOCS_DIR / "img"


def load_results(path: Path) -> dict[str, Any]:
    """A results file ``bench.run_all`` wrote, or a data file of ``docs/data`` with a table to draw.

    Raises:
        FileNotFoundError: there is none at ``path``.
        ValueError: the file is neither (no 'benchmarks', no 'tables' with a 'plot').
    """
    record = json.loads(path.read_text())
    if isinstance(record, dict) and (
        isinstance(record.get("benchmarks"), dict) or ("tables" in record and "plot" in record)
    ):
        return record
    raise ValueError(f"{path} is not a bench.run_all results file (no 'benchmarks') nor a table to draw")


def _save(fig: Any, path: Path, record: dict[str, Any]) -> Path:
    """Lay out ``fig`` with the run's footer, write it to ``path`` and free it."""
    import matplotlib.pyplot as plt

    fig.tight_layout(rect=(0, 0.03, 1, 1))
    machine = record.get("machine", {})
    load = machine.get("load", (machine.get("load_average_start") or ["?"])[0])
    command = str(record.get("command", "?")).removeprefix("python -m ")
    date = str(record.get("date", "?"))
    if re.match(r"\d{4}-\d\d-\d\dT", date):  # a bench.run_all results file: ISO time
        date = date[:16].replace("T", " ") + " UTC"
    text = f"{command}; {date}; {machine.get('cores', '?')} cores at load {load}" + (
        " (quick run: too short to quote)" if record.get("quick") else ""
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


# --- a table of docs/data: medians with their spread, as bars ---------------------------------


def _spread(cell: str) -> tuple[float, float, float]:
    """(median, min, max) from a cell written "median (min-max)".

    Raises:
        ValueError: the cell is not written so.
    """
    found = re.fullmatch(r"\**([\d.]+)\**\s*\(([\d.]+)\s*[\u2013-]\s*([\d.]+)\)", cell.strip())
    if found is None:
        raise ValueError(f"{cell!r} is not 'median (min-max)'")
    med, lo, hi = (float(x) for x in found.groups())
    return med, lo, hi


def plot_spread_table(data: dict[str, Any], out: Path) -> Path:
    """Bars of one table of a docs/data file (its ``plot`` entry says which, and how rows are labelled).

    Raises:
        KeyError: the file has no ``plot`` or ``figure`` entry, or no such table.
        ValueError: a cell is not "median (min-max)".
    """
    import matplotlib.pyplot as plt

    spec = data["plot"]
    table = data["tables"][spec["table"]]
    n_labels = int(spec["label_columns"])
    series = table["columns"][n_labels:]
    labels: list[str] = []
    carried = [""] * n_labels
    for row in table["rows"]:
        carried = [cell or above for cell, above in zip(row[:n_labels], carried, strict=True)]
        labels.append(f"{table['columns'][0]} " + ", ".join(carried))
    fig, ax = plt.subplots(figsize=(10, 4.8), dpi=110)
    width = 0.8 / len(labels)
    for i, (label, row) in enumerate(zip(labels, table["rows"], strict=True)):
        spreads = [_spread(cell) for cell in row[n_labels:]]
        xs = [x + (i - (len(labels) - 1) / 2) * width for x in range(len(series))]
        errors = [[med - lo for med, lo, _ in spreads], [hi - med for med, _, hi in spreads]]
        ax.bar(xs, [med for med, _, _ in spreads], width=width, yerr=errors, capsize=3, label=label)
    ax.set_xticks(range(len(series)), series)
    ax.set_ylabel(spec["ylabel"])
    ax.set_ylim(bottom=0)
    ax.set_title(data["title"])
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    return _save(fig, out / Path(data["figure"]).name, data)


def _newest_with(bench: str, files: Sequence[Path]) -> dict[str, Any] | None:
    """The newest results file among ``files`` (newest first) that holds ``bench``'s raw data."""
    for path in files:
        try:
            record = load_results(path)
        except ValueError:
            continue
        if record.get("benchmarks", {}).get(bench, {}).get("raw"):
            return record
    return None


def _doc_data(name: str, bench: str, record: dict[str, Any]) -> dict[str, Any]:
    """What --update-docs writes beside a picture: the run's provenance and the benchmark drawn."""
    machine = record.get("machine", {})
    load = machine.get("load_average_start")
    return {
        "title": f"{bench} of one bench.run_all run",
        "date": f"{str(record.get('date', '?'))[:16].replace('T', ' ')} UTC",
        "machine": {
            **dict.fromkeys(("cpu", "cores", "python", "build"), "not recorded"),
            "load": f"{load[0]} at the start" if load else "not recorded",
            **machine,
        },
        "command": record.get("command", "not recorded"),
        "source": "written by python -m bench.plots --update-docs from that run's results file",
        "figure": f"img/{name}",
        "quick": record.get("quick", False),
        "benchmarks": {bench: record["benchmarks"][bench]},
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--from", dest="source", type=Path, default=None, help="results file (default: the newest)")
    parser.add_argument("--only", nargs="*", default=(), choices=list(FIGURES))
    parser.add_argument("--out", type=Path, default=None, help=f"directory (default {DEFAULT_OUT})")
    parser.add_argument("--update-docs", action="store_true", help=f"draw into {DOCS_OUT} and write docs/data")
    args = parser.parse_args(argv)
    out = DOCS_OUT if args.update_docs else (args.out or DEFAULT_OUT)
    files = [args.source] if args.source is not None else results_files()
    if not files:
        print(f"bench.plots: no results in {RESULTS_DIR}: run `python -m bench.run_all` first", file=sys.stderr)
        return 2
    source = files[0] if args.source is not None else RESULTS_DIR
    try:
        record = load_results(files[0])
    except FileNotFoundError:
        print(f"bench.plots: no results at {files[0]}: run `python -m bench.run_all` first", file=sys.stderr)
        return 2
    except ValueError as exc:  # json.JSONDecodeError is one
        print(f"bench.plots: {files[0]} is not a bench.run_all results file ({exc})", file=sys.stderr)
        return 2
    import matplotlib

    matplotlib.use("Agg")
    out.mkdir(parents=True, exist_ok=True)
    if "plot" in record:  # a table of docs/data
        print(plot_spread_table(record, out))
        return 0
    drawn = missing = 0
    for name, (bench, draw) in FIGURES.items():
        if args.only and name not in args.only:
            continue
        found = _newest_with(bench, files)
        if found is None:
            print(f"{name}: no {bench} data in {source}: run `python -m bench.run_all --only {bench}`")
            missing += 1
            continue
        picture = draw(found["benchmarks"][bench]["raw"], out, found)
        print(picture)
        if args.update_docs:
            data = DATA_DIR / f"{picture.stem}.json"
            data.parent.mkdir(parents=True, exist_ok=True)
            data.write_text(dumps(_doc_data(picture.name, bench, found)))
            print(data)
        drawn += 1
    return 0 if drawn and not missing else 1


if __name__ == "__main__":
    sys.exit(main())
