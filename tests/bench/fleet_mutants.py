"""The power of ``tests/bench/test_fleet.py``: defects planted in the simulator, each must fail the tests.

Run: ``python tests/bench/fleet_mutants.py`` (from the repository root).  Each
mutant is one textual change to a copy of ``bench/fleet`` in a temporary
directory, put first on ``PYTHONPATH``; the tests run against it and the
mutant is caught when they fail.  Prints one line per mutant and the catch
rate; exits 1 if any mutant survives.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

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
    ("chain-is-per-key", "engine.py", 'if self.mode == "per-key":', 'if self.mode != "window":'),
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
        "engine.py",
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
]


def main() -> int:
    caught = 0
    for name, path, old, new in MUTANTS:
        with tempfile.TemporaryDirectory(prefix="fleet-mutant-") as tmp:
            shutil.copytree(os.path.join(ROOT, "bench"), os.path.join(tmp, "bench"))
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
                    "tests/bench/test_fleet.py",
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
    print(f"\n{caught}/{len(MUTANTS)} mutants caught")
    return 0 if caught == len(MUTANTS) else 1


if __name__ == "__main__":
    sys.exit(main())
