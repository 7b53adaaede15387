"""Cost of the checks: TLC per config, and Hypothesis examples per second.

* TLC: every ``tla/*.cfg`` except the reachability config (which is made of
  properties that must fail, one TLC run each; ``kvprobe check --config
  reach`` times it) is run through :func:`kvprobe.tlc.run_tlc`, as ``kvprobe
  check`` does: distinct states, states generated, wall time, distinct states
  per second.  Configs whose first comment line says "(long)" run only with
  ``--long``; ``--quick`` runs only ``default``.
* Hypothesis: the shipped stateful machine
  (:func:`kvprobe.testing.stateful.lookup_machine`, manual worker, in-memory
  tier) under the ``ci`` profile when one is registered (else an equivalent
  stand-in: derandomized, 100 examples, no deadline), counting examples.

Both parts are optional: if the model or the machine is not there yet, the
row says so instead of failing.
Run: ``python -m bench.checks.tlc_cost [--quick]``.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.common import Row

__all__ = ["hypothesis_rate", "main", "rows", "selected_configs", "tlc_costs"]

_STATS = re.compile(r"([\d,]+) states generated.*?([\d,]+) distinct states found")


def selected_configs(quick: bool, long: bool = False) -> list[Path]:
    """The ``tla/*.cfg`` files a cost run measures, in name order.

    Not the reachability config (its witnesses are meant to fail); with
    ``quick`` only ``default``; a config whose first line says "(long)" only
    with ``long``.
    """
    from kvprobe.tlc import tla_dir

    chosen = []
    for cfg in sorted(tla_dir().glob("*.cfg")):
        first = cfg.read_text().splitlines()[0]
        if "reachability" in first or (quick and cfg.stem != "default") or ("(long)" in first and not long):
            continue
        chosen.append(cfg)
    return chosen


def tlc_costs(quick: bool, workers: int = 1, long: bool = False) -> list[dict[str, Any]]:
    """Per selected config: TLC's result, wall time, distinct states per second and its progress.

    ``points`` are (seconds, distinct states) from TLC's progress reports,
    the series ``bench.plots`` draws.  A config TLC cannot run (no Java, no
    jar) is a row with ``error`` rather than an exception.
    """
    try:
        from kvprobe.tlc import MSG_PROGRESS, MSG_STATS, run_tlc, tla_dir

        configs = selected_configs(quick, long)
    except ImportError as exc:
        return [{"config": "-", "error": f"kvprobe.tlc not available: {exc}"}]
    out: list[dict[str, Any]] = []
    for cfg in configs:
        points: list[tuple[float, int]] = []
        t0 = time.perf_counter()

        def note(msg: Any, points: list[tuple[float, int]] = points, t0: float = t0) -> None:
            if msg.code in (MSG_PROGRESS, MSG_STATS):
                found = _STATS.search(msg.text)
                if found:
                    points.append((round(time.perf_counter() - t0, 3), int(found.group(2).replace(",", ""))))

        try:
            res = run_tlc(tla_dir() / "MC.tla", cfg, workers=workers, on_message=note)
        except Exception as exc:  # a missing Java or jar is a row, not a crash
            out.append({"config": cfg.stem, "error": f"{type(exc).__name__}: {exc}"})
            continue
        wall = time.perf_counter() - t0
        out.append(
            {
                "config": cfg.stem,
                "outcome": res.outcome,
                "distinct": res.distinct,
                "generated": res.generated,
                "depth": res.depth,
                "wall_s": round(wall, 3),
                "states_per_s": (res.distinct or 0) / wall if wall else 0.0,
                "points": points,
            }
        )
    return out


def hypothesis_rate() -> dict[str, Any]:
    try:
        from hypothesis import settings
        from hypothesis.stateful import run_state_machine_as_test

        from kvprobe.testing.stateful import lookup_machine
    except ImportError as exc:
        return {"error": f"stateful machine not available: {exc}"}
    try:
        profile = settings.get_profile("ci")
        source = "ci profile"
    except Exception:  # InvalidArgument: no such profile registered
        profile = settings(max_examples=100, derandomize=True, deadline=None, database=None)
        source = "stand-in for ci (100 examples, derandomized)"
    machine = lookup_machine()
    runs = 0

    class Counted(machine):  # type: ignore[misc, valid-type]
        def teardown(self) -> None:
            nonlocal runs
            runs += 1
            super().teardown()

    t0 = time.perf_counter()
    run_state_machine_as_test(Counted, settings=settings(profile, database=None))
    wall = time.perf_counter() - t0
    return {"source": source, "examples": runs, "wall_s": wall, "per_s": runs / wall}


def report(tlc: list[dict[str, Any]], hyp: dict[str, Any]) -> str:
    lines = [
        "| TLC config | outcome | distinct states | generated | depth | wall s | distinct/s |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in tlc:
        if "error" in r:
            lines.append(f"| {r['config']} | {r['error']} | | | | | |")
        else:
            # A simulation (deep.cfg) reports no distinct or generated count.
            distinct = "n/a" if r["distinct"] is None else f"{r['distinct']:,}"
            generated = "n/a" if r["generated"] is None else f"{r['generated']:,}"
            lines.append(
                f"| {r['config']} | {r['outcome']} | {distinct} | {generated} | {r['depth']} "
                f"| {r['wall_s']:.1f} | {r['states_per_s']:,.0f} |"
            )
    lines.append("")
    if "error" in hyp:
        lines.append(f"Hypothesis: {hyp['error']}")
    else:
        lines.append(
            f"Hypothesis ({hyp['source']}): {hyp['examples']} examples in {hyp['wall_s']:.1f} s "
            f"= {hyp['per_s']:.1f} examples/s"
        )
    return "\n".join(lines)


def rows(quick: bool) -> list[Row]:
    out = []
    for r in tlc_costs(quick):
        if "error" in r:
            out.append(Row("model checking", f"TLC {r['config']}", "n/a", r["error"][:80]))
        else:
            out.append(
                Row(
                    "model checking",
                    f"TLC {r['config']} ({r['outcome']})",
                    f"{r['distinct']:,} distinct states in {r['wall_s']:.1f} s",
                    f"{r['states_per_s']:,.0f} distinct/s, {r['generated']:,} generated",
                )
            )
    hyp = hypothesis_rate()
    if "error" in hyp:
        out.append(Row("model checking", "Hypothesis examples/s", "n/a", hyp["error"][:80]))
    else:
        out.append(
            Row(
                "model checking",
                "Hypothesis examples/s",
                f"{hyp['per_s']:.1f}",
                f"{hyp['examples']} examples in {hyp['wall_s']:.1f} s, {hyp['source']}",
            )
        )
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--long", action="store_true", help="also the configs marked (long)")
    args = parser.parse_args(argv)
    print(report(tlc_costs(args.quick, long=args.long), hypothesis_rate()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
