"""The power of the fleet's tests: defects planted in the simulator, each must fail the tests.

Run: ``python tests/bench/fleet_mutants.py [NAME ...]`` (from the repository
root; names pick mutants, none: all).  Each mutant is one textual change to a
copy of ``bench/fleet`` in a temporary directory, put first on
``PYTHONPATH``; the tests (:data:`TESTS`) run against it and the mutant is
caught when they fail.  Prints one line per mutant and the catch rate; exits
1 if any mutant survives.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TESTS = ["tests/bench/test_fleet.py", "tests/bench/test_fleet_scaling.py", "tests/bench/test_fleet_report.py"]

# (name, file under bench/fleet, text, replacement)
MUTANTS = [
    (
        "head-not-counted",
        "engine.py",
        "self.fleet.heads_sent += chunk.stop - chunk.start",
        "self.fleet.heads_sent += chunk.stop - chunk.start - (chunk.attempt > 0)",
    ),
    ("store-never-throttles", "store.py", "throttled = part.tokens < 1.0", "throttled = False"),
    (
        "store-limit-ignored",
        "store.py",
        "part.tokens = self._depth if tokens > self._depth else tokens",
        "part.tokens = tokens",
    ),
    (
        "chain-is-per-key",
        "modes.py",
        '"chain": lambda lazy, window0: Chain(),',
        '"chain": lambda lazy, window0: PerKey(lazy),',
    ),
    (
        "chain-answers-while-pending",
        "modes.py",
        "if answer.pending or not (answer.stopped_at_miss",
        "if not (answer.stopped_at_miss",
    ),
    (
        "retry-dropped",
        "engine.py",
        'call.plan.failed(chunk, now, "throttled")\n                self._enqueue(call, now)',
        'call.plan.failed(chunk, now, "throttled")',
    ),
    (
        "throttled-answers-count",
        "engine.py",
        "if throttled:\n                call.plan.failed",
        "if False:\n                call.plan.failed",
    ),
    (
        "unknown-read-as-hit",
        "modes.py",
        "while cursor < limit and states[cursor].verdict:",
        "while cursor < limit and states[cursor].verdict is not False:",
    ),
    (
        "outcome-lost",
        "engine.py",
        "        self.core.inbox.append(outcome)\n",
        "        self.core.inbox.append(outcome) if outcome.group.group_id % 7 else None\n",
    ),
    ("no-cleanup", "engine.py", "            core.cleanup(req_id)\n", "            pass\n"),
    ("unseeded-jitter", "sim.py", "erng = random.Random(rng.random())", "erng = random.Random()"),
    ("never-split", "store.py", "self._split(index, now)", "pass"),
    ("split-on-any-throttle", "store.py", "if part.hot_since is None or now - part.last_throttle > 1.0:", "if True:"),
    ("fifo-pool", "engine.py", "self.queue.put(call if self.fair else None,", "self.queue.put(None,"),
    ("deadline-ignored", "engine.py", "self.fleet.schedule(plan.end, self._deadline, call)", "pass"),
    # The scaling above max_sim_engines, made wrong on purpose.
    (
        "store-limit-not-scaled",
        "sim.py",
        "head_limit_per_s=sc.store.head_limit_per_s / scale",
        "head_limit_per_s=sc.store.head_limit_per_s",
    ),
    (
        "store-limit-scaled-by-sqrt",
        "sim.py",
        "head_limit_per_s=sc.store.head_limit_per_s / scale",
        "head_limit_per_s=sc.store.head_limit_per_s / math.sqrt(scale)",
    ),
    (
        "load-not-scaled-back",
        "sim.py",
        "heads_per_s = store.measured / sc.window_s * scale",
        "heads_per_s = store.measured / sc.window_s",
    ),
    # The bill and the writes.
    ("503s-billed", "sim.py", "billed = store.measured - store.measured_throttled", "billed = store.measured"),
    ("lost-blocks-not-rewritten", "sim.py", "(blocks - hits) / len(answered)", "(blocks - stored) / len(answered)"),
    # Real time.
    ("round-weighs-its-start", "realtime.py", "max(0.0, min(end, hours) - start)", "max(0.0, min(end, hours))"),
    ("every-partition-splits", "realtime.py", 'partitions + r["hot_partitions"]', "2 * partitions"),
    ("hot-without-the-whole-window", "store.py", "part.hot_since <= self.measure_from", "part.hot_since >= 0"),
]


def main(argv: list[str] | None = None) -> int:
    names = sys.argv[1:] if argv is None else argv
    unknown = set(names) - {m[0] for m in MUTANTS}
    if unknown:
        print(f"no such mutants: {sorted(unknown)}")
        return 2
    chosen = [m for m in MUTANTS if not names or m[0] in names]
    caught = 0
    for name, path, old, new in chosen:
        with tempfile.TemporaryDirectory(prefix="fleet-mutant-") as tmp:
            shutil.copytree(os.path.join(ROOT, "bench"), os.path.join(tmp, "bench"))
            # bench.common finds the docs next to bench/: the copy reads the real ones.
            os.symlink(os.path.join(ROOT, "docs"), os.path.join(tmp, "docs"))
            target = os.path.join(tmp, "bench", "fleet", path)
            with open(target) as f:
                text = f.read()
            if old not in text:
                print(f"{name}: the text to mutate is gone from {path}; update this list")
                return 2
            with open(target, "w") as f:
                f.write(text.replace(old, new, 1))
            env = {**os.environ, "PYTHONPATH": os.pathsep.join([tmp, ROOT])}
            proc = subprocess.run(
                [
                    sys.executable,
                    "-P",
                    "-m",
                    "pytest",
                    "-q",
                    "-x",
                    "-p",
                    "no:cacheprovider",
                    *TESTS,
                ],
                cwd=ROOT,
                env=env,
                capture_output=True,
                text=True,
            )
            status = "caught" if proc.returncode != 0 else "SURVIVED"
            caught += proc.returncode != 0
            failed = [line for line in proc.stdout.splitlines() if line.startswith("FAILED")]
            print(f"{name:24} {status}  {failed[0] if failed else ''}"[:160], flush=True)
    print(f"\n{caught}/{len(chosen)} mutants caught")
    return 0 if caught == len(chosen) else 1


if __name__ == "__main__":
    sys.exit(main())
