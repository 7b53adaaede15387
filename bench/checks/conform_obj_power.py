"""The power of ``kvprobe conform`` on the object tier: which defects of the object engine it fails.

``python -m bench.checks.conform_obj_power`` starts a Ceph RGW
(:class:`kvprobe.testing.rgw.RgwServer`) and a fault proxy in front of it
answering a share of the requests ``500 InternalError``
(``tests/conform/obj_defects.py``: loss that is not load), then runs the
default ``kvprobe conform`` (manual worker, 100 examples of up to 50 steps,
shrinking off) with ``--timeout`` (default ``obj_defects.TIMEOUT_S``, 5 s)
from seeds 0..N-1 (``--seeds``, default 10) on each defect of ``OBJ_DEFECTS``, and on the honest ``NixlObjBackend``
from fewer seeds (``--control-seeds``, default 3: its failures would be
false alarms; each passing seed takes about a minute).  Per tier: the seeds
whose run failed, of those the ones whose report names the tier's wrong
answer (``TierAnswersTruthfully``; the others are Hypothesis's report that a
replay of the failing run went differently, as the proxy's faults do), and
the generated runs to the first failure (median and worst).  Each failure
of the honest engine is printed whole after the table.

With ``--write`` the figures go to ``docs/data/conform-obj-power-<timeout>s-<date>.json``
and the table quoting them in docs/performance.md is rewritten.
Nothing is asserted: ``tests/conform/test_obj_defects.py`` is the CI case.
"""

from __future__ import annotations

import argparse
import datetime
import importlib
import os
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.common import DOCS_DIR
from bench.docdata import DATA_DIR, dumps, machine_record, requote

__all__ = ["main", "power"]

_TIERS_DIR = Path(__file__).resolve().parents[2] / "tests" / "conform"
BUCKET = "kvprobe-conform-power"
COMMAND = "python -m bench.checks.conform_obj_power"


def power(factory: Any, seeds: int, label: str, timeout_s: float) -> dict[str, Any]:
    """Run the default conform from ``seeds`` seeds (shrinking off); the failures and how they read."""
    from kvprobe.testing.stateful import run_conformance

    failed = named = 0
    runs: list[int] = []
    reports: list[str] = []
    for seed in range(seeds):
        print(f"{label}: seed {seed + 1}/{seeds}, {failed} failed", file=sys.stderr, flush=True)
        result = run_conformance(factory, seed=seed, shrink=False, timeout_s=timeout_s)
        if not result.passed:
            failed += 1
            named += "TierAnswersTruthfully: the tier answered" in result.failure
            runs.append(result.runs)
            reports.append(f"seed {seed}: {result.failure}")
    return {"failed": failed, "named": named, "seeds": seeds, "runs": runs, "reports": reports}


def _row(name: str, defect: str, got: dict[str, Any]) -> list[str]:
    runs = got["runs"]
    to_first = f"{statistics.median(runs):.0f} / {max(runs)}" if runs else "-"
    return [name, defect, f"{got['failed']}/{got['seeds']}", f"{got['named']}/{got['failed']}", to_first]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=10, help="seeds per defect (default 10)")
    parser.add_argument("--control-seeds", type=int, default=3, help="seeds for the honest engine (default 3)")
    parser.add_argument("--timeout", type=float, default=None, help="conform's --timeout (default 5 s)")
    parser.add_argument("--write", action="store_true", help="write docs/data and requote docs/performance.md")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(_TIERS_DIR))
    obj_defects: Any = importlib.import_module("obj_defects")
    if args.timeout is None:
        args.timeout = obj_defects.TIMEOUT_S

    from kvprobe.testing.faultproxy import FaultProxy
    from kvprobe.testing.rgw import RgwServer

    started = time.monotonic()
    rows: list[list[str]] = []
    false_alarms: list[str] = []
    with RgwServer() as server:
        server.create_bucket(BUCKET)
        creds = server.credentials()
        os.environ.update(
            {
                "AWS_ACCESS_KEY_ID": creds["access_key"],
                "AWS_SECRET_ACCESS_KEY": creds["secret_key"],
                "AWS_REGION": creds["region"],
                "KVPROBE_CONFORM_BUCKET": BUCKET,
            }
        )
        writer = server.client()
        with FaultProxy(creds["endpoint_url"], error500=obj_defects.ERROR_SHARE, seed=1) as proxy:
            tiers = [*((name, defect) for name, (_, defect) in obj_defects.OBJ_DEFECTS.items())]
            tiers.append(("honest (control)", "none: every failure here is a false alarm"))
            for name, defect in tiers:
                seeds = args.control_seeds if name.startswith("honest") else args.seeds
                if not seeds:
                    continue
                make = obj_defects.defect_class(name.split()[0])
                got = power(obj_defects.proxied_factory(make, proxy.endpoint_url, writer), seeds, name, args.timeout)
                rows.append(_row(name, defect, got))
                if name.startswith("honest"):
                    false_alarms = got["reports"]
    columns = [
        "object engine",
        "defect",
        "seeds failed",
        "of them naming the wrong answer",
        "runs to it, median / worst",
    ]
    print("| " + " | ".join(columns) + " |\n|" + "---|" * len(columns))
    print("\n".join("| " + " | ".join(row) + " |" for row in rows))
    for report in false_alarms:  # the honest engine failed: what it answered, to explain
        print(f"\nThe honest engine's failure, {report}")
    minutes = (time.monotonic() - started) / 60
    print(f"\n({minutes:.0f} minutes in all)")
    if args.write:
        _write(columns, rows, args, f"RGW behind a proxy answering {obj_defects.ERROR_SHARE:.0%} of requests 500")
    return 0


def _write(columns: list[str], rows: list[list[str]], args: argparse.Namespace, note: str) -> None:
    today = datetime.datetime.now(datetime.timezone.utc)
    name = f"conform-obj-power-{args.timeout:g}s-{today:%Y-%m-%d}"
    data = {
        "title": "kvprobe conform against three defects of the object engine and the honest one, on Ceph RGW",
        "date": f"{today:%Y-%m-%d %H:%M} UTC",
        "machine": machine_record(),
        "command": f"{COMMAND} --seeds {args.seeds} --control-seeds {args.control_seeds} "
        f"--timeout {args.timeout:g} --write",
        "note": note,
        "source": f"written by {COMMAND}",
        "tables": {"defects": {"columns": columns, "rows": rows}},
    }
    path = DATA_DIR / f"{name}.json"
    path.write_text(dumps(data))
    missing = requote(DOCS_DIR / "performance.md", name, data)
    print(f"wrote {path}" + (f"; not quoted in docs/performance.md yet: {missing}" if missing else ""))


if __name__ == "__main__":
    sys.exit(main())
