"""One slow request group must not hold back the fast ones: sequential vs concurrent worker.

Run from the repository root::

    python -m bench.hotpath.groups            # 5 rounds per configuration, side by side
    python -m bench.hotpath.groups --rounds 1

Each round, one scheduler step looks up 9 requests' keys and flushes: one
batch of 9 groups.  The backend sleeps 2 s for the slow request's group
(first in the batch, the worst place for a sequential worker) and 50 ms for
each of the 8 others.  The loop then keeps stepping (lookup what has no
verdict yet, flush, a 10 ms pause standing for the forward pass) and
records the steps and wall time until the 8 fast groups all have verdicts,
and until all 9 do.  The configurations run one after the other in the same
process, so their ratio is meaningful even on a loaded machine (the
absolute times are not).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Sequence

from bench.common import Row
from kvprobe.statemachine import AsyncLookupManager, ReqContext

__all__ = ["CONFIGS", "main", "measure", "rows", "run_round"]

FAST_S = 0.05
SLOW_S = 2.0
STEP_PAUSE_S = 0.01
FAST_GROUPS = 8


class SleepyBackend:
    """Answers True for every key after sleeping: long for the slow request's keys."""

    def batch_lookup(self, keys: Sequence[bytes], req_context: object) -> list[bool]:
        time.sleep(SLOW_S if keys and keys[0].startswith(b"slow") else FAST_S)
        return [True] * len(keys)


def run_round(concurrent: int) -> tuple[int, float, int, float]:
    """(steps, seconds) until the fast groups have verdicts, then until all do."""
    wants = {"slow": [b"slow-%d" % i for i in range(4)]}
    for g in range(FAST_GROUPS):
        wants[f"fast{g}"] = [b"fast-%d-%d" % (g, i) for i in range(4)]
    contexts = {r: ReqContext(r) for r in wants}
    fast_keys = {(r, k) for r, ks in wants.items() if r != "slow" for k in ks}
    total = sum(len(ks) for ks in wants.values())
    with AsyncLookupManager(SleepyBackend(), max_concurrent_groups=concurrent) as m:
        got: set[tuple[str, bytes]] = set()
        start = time.monotonic()
        steps = 0
        fast_done: tuple[int, float] | None = None
        while True:
            for r, ks in wants.items():
                for k in ks:
                    if (r, k) not in got and m.lookup(k, contexts[r]) is not None:
                        got.add((r, k))
            if fast_done is None and fast_keys <= got:
                fast_done = (steps, time.monotonic() - start)
            if len(got) == total:
                assert fast_done is not None
                return fast_done[0], fast_done[1], steps, time.monotonic() - start
            m.flush()
            steps += 1
            time.sleep(STEP_PAUSE_S)


CONFIGS = (("sequential (max_concurrent_groups=1)", 1), ("concurrent (default, 4)", 4), ("concurrent (9)", 9))


def measure(rounds: int) -> dict[str, list[tuple[int, float, int, float]]]:
    """{configuration: [run_round result per round]}, the configurations interleaved."""
    results: dict[str, list[tuple[int, float, int, float]]] = {name: [] for name, _ in CONFIGS}
    for _ in range(rounds):
        for name, n in CONFIGS:  # interleaved, so load changes hit every configuration alike
            results[name].append(run_round(n))
    return results


def rows(quick: bool) -> list[Row]:
    """The suite's rows (``bench.run_all``): 1 round when quick, else 5."""
    rounds = 1 if quick else 5
    out = []
    for name, runs in measure(rounds).items():
        fast_steps, fast_s = (statistics.median(r[i] for r in runs) for i in range(2))
        out.append(
            Row(
                "groups",
                f"{name}: until the 8 fast groups have verdicts",
                f"{fast_steps:.0f} steps, {fast_s * 1000:.0f} ms",
                f"1 group of {SLOW_S:.0f} s + 8 of {FAST_S * 1000:.0f} ms per step; median of {rounds}",
            )
        )
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    results = measure(args.rounds)
    print(
        f"9 groups per step: 1 taking {SLOW_S:.0f} s (first in the batch), {FAST_GROUPS} taking "
        f"{FAST_S * 1000:.0f} ms; {STEP_PAUSE_S * 1000:.0f} ms per step; median of {args.rounds} rounds"
    )
    print()
    print("| worker | steps until the 8 fast groups have verdicts | wall time | steps until all 9 | wall time |")
    print("|---|---:|---:|---:|---:|")
    for name, _ in CONFIGS:
        runs = results[name]
        fast_steps, fast_s, all_steps, all_s = (statistics.median(r[i] for r in runs) for i in range(4))
        print(f"| {name} | {fast_steps:.0f} | {fast_s * 1000:.0f} ms | {all_steps:.0f} | {all_s * 1000:.0f} ms |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
