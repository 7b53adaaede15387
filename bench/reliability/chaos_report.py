"""The chaos campaign's tally, its checks, and its printed report.

:func:`evaluate` names every check of :mod:`bench.reliability.chaos` and
says which passed; :func:`print_report` prints the figures as a Markdown
table, then one PASS or FAIL line per check.
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass, field
from typing import Any

from bench.reliability.chaos_s3 import LOOKUP_TIMEOUT_S

__all__ = ["SLACK_FDS", "SLACK_RSS_MIB", "SLACK_THREADS", "Tally", "evaluate", "flat", "print_report"]

#: How far a resource may rise after the warm-up and still count as flat.
SLACK_THREADS = 8
SLACK_FDS = 16
SLACK_RSS_MIB = 8.0


@dataclass
class Tally:
    steps: int = 0
    requests_finished: int = 0
    lookups: int = 0
    wrong_verdicts: int = 0
    late_requests: int = 0  # waited longer than the bound
    longest_wait_s: float = 0.0
    forks: int = 0
    fork_failures: int = 0
    dispatcher_kills: int = 0
    dropped_managers: int = 0
    helpers_frozen: int = 0
    helpers_killed: int = 0
    mark_misses: int = 0
    problems: list[str] = field(default_factory=list)


def flat(series: array[float], n_samples: int, slack: float, warm_samples: int = 0) -> tuple[float, float, bool]:
    """(max of the warm-up, max after it, whether the latter exceeds the former by at most ``slack``).

    The warm-up is the first quarter of the samples, at least the first 5
    and at least ``warm_samples`` (always leaving one sample after it).
    """
    # Pools of threads and helpers fill up during the first seconds, and the
    # S3 campaign's threads and helpers settle only after its first outage
    # and recovery, so its warm-up lasts until then.  (The store's
    # connections, which grow towards the backend's bound at any time, are
    # not in the fds series: the campaign counts them apart.)
    quarter = max(1, n_samples // 4, min(max(5, warm_samples), n_samples - 1))
    warm = max(series[:quarter])
    after = max(series[quarter:n_samples]) if n_samples > quarter else warm
    return warm, after, after <= warm + slack


def evaluate(tally: Tally, fig: dict[str, Any]) -> dict[str, bool]:
    """The campaign's checks by name: True where it passed."""
    checks = {
        "wrong verdicts 0": tally.wrong_verdicts == 0,
        "waiting requests without a verdict 0": tally.late_requests == 0,
        "len(m) 0 at the end": all(v == 0 for v in fig["leftovers"].values()),
        "fork children all exited 0": tally.fork_failures == 0,
        "threads flat after warm-up": fig["threads"][2],
        "fds flat after warm-up (the store's connections apart)": fig["fds"][2],
        "RSS flat after warm-up": fig["rss_mib"][2],
        "no other problem": not tally.problems,
    }
    s3 = fig["s3"]
    if s3 is not None:
        checks["S3 frozen at least once, every thaw recovered"] = s3.freezes >= 1 and s3.recoveries == s3.freezes
        checks["S3: a stored key True within 2 x lookup_timeout_s + 2 s of every thaw"] = s3.late_recoveries == 0
        most, bound = fig["store_connections"]
        checks["S3 connections within the backend's max_connections"] = most <= bound
    return checks


def print_report(header: str, tally: Tally, fig: dict[str, Any], checks: dict[str, bool], s3_skipped: str) -> None:
    """Print ``header``, the figures as a Markdown table, then a PASS or FAIL line per check.

    ``s3_skipped`` says why the S3 part did not run (printed only when ``fig`` has no S3 figures).
    """
    s3 = fig["s3"]
    print(header)
    print("| | |")
    print("|---|---|")
    rows = [
        ("steps / lookups / requests finished", f"{tally.steps:,} / {tally.lookups:,} / {tally.requests_finished:,}"),
        ("wrong verdicts", tally.wrong_verdicts),
        ("waiting requests without a verdict (over the bound)", tally.late_requests),
        ("longest wait for a request's verdicts", f"{tally.longest_wait_s:.2f} s"),
        ("len(m) at the end", fig["leftovers"]),
        ("backend faults injected (raise / short / hang past timeout)", fig["injected"]),
        ("dispatcher threads killed", tally.dispatcher_kills),
        ("fork children (failed)", f"{tally.forks} ({tally.fork_failures})"),
        ("managers dropped without shutdown", tally.dropped_managers),
        ("helper processes frozen / killed", f"{tally.helpers_frozen} / {tally.helpers_killed}"),
        ("forced misses", tally.mark_misses),
        ("threads: max during warm-up / max after", "{:.0f} / {:.0f}".format(*fig["threads"][:2])),
        ("fds besides the store's connections: max in warm-up / after", "{:.0f} / {:.0f}".format(*fig["fds"][:2])),
        ("RSS MiB: max during warm-up / max after", "{:.1f} / {:.1f}".format(*fig["rss_mib"][:2])),
        ("resource samples", fig["samples"]),
    ]
    if s3 is not None:
        rows[-1:-1] = [
            (
                "S3 gateway frozen (2,000-key request in flight each time) / recovered",
                f"{s3.freezes} / {s3.recoveries}",
            ),
            (
                "S3 longest freeze / longest recovery after a thaw (bound)",
                (f"{s3.longest_freeze_s:.1f} s / {s3.longest_recovery_s:.2f} s ({2 * LOOKUP_TIMEOUT_S + 2:.0f} s)"),
            ),
        ]
        rows.append(("S3 connections: most sampled / max_connections", "{} / {}".format(*fig["store_connections"])))
        rows.append(("S3 backend counters and pace", fig["s3_backend"]))
        rows.append(("S3 manager's calls (worker side)", fig["calls"].get("objstore")))
    else:
        rows.append(("S3 freeze/thaw", f"not run ({s3_skipped})"))
    for name, value in rows:
        print(f"| {name} | {value} |")
    for name, ok in checks.items():
        print(f"{'PASS' if ok else 'FAIL'}: {name}")
    for problem in tally.problems:
        print("problem:", problem)
