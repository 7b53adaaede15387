"""What ``kvprobe check`` prints while TLC runs and after: progress, results, counterexamples.

* :class:`TlcProgress` runs TLC (:func:`kvprobe.tlc.run_tlc`) and shows how it
  is going on stderr: a live line on a terminal; elsewhere (CI logs, pipes)
  a start line, a line about every ``every_s`` seconds and an end line
  (:class:`kvprobe.progress.Progress` in log mode).
* :func:`report` prints a run's result on stdout: the summary line, and for
  a violation the counterexample in plain words (:mod:`kvprobe.explain`)
  first, then, with ``raw``, TLC's own form (:func:`format_trace`).
"""

from __future__ import annotations

import re
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from kvprobe.explain import explain
from kvprobe.progress import Progress
from kvprobe.tlc import Message, Step, TlcResult, coverage_line, run_tlc

__all__ = ["TlcProgress", "format_trace", "report", "summary"]

# TLC's messages (tlc2.output.EC) that say how a run is going.
_MSG_PROGRESS = 2200  # Progress(depth) at ...: N states generated (R s/min), M distinct states found, ...
_MSG_PHASES = (2185, 2190, 2192)  # Starting..., Computing initial states..., Finished computing initial states
_PROGRESS = re.compile(
    r"Progress\((\d+)\).*?([\d,]+) states generated(?: \(([\d,]+) s/min\))?.*?([\d,]+) distinct"
    r".*?([\d,]+) states left"
)


class TlcProgress:
    """Runs TLC and shows its progress on stderr (nothing at all if ``quiet``).

    ``every_s`` is the least time between two progress lines when stderr is
    not a terminal.  Raises what :func:`kvprobe.tlc.run_tlc` raises.
    """

    def __init__(self, *, quiet: bool, every_s: float) -> None:
        self.quiet = quiet
        self.display = Progress(sys.stderr, log_every_s=every_s)

    def run(
        self,
        what: str,
        spec: Path,
        config: Path,
        *,
        workers: int,
        extra_args: Sequence[str] = (),
        extra_files: Mapping[str, str] | None = None,
        coverage: bool = True,
    ) -> TlcResult:
        """Run TLC on ``spec`` with ``config``; ``what`` names the run in the start and end lines.

        ``coverage``: TLC counts each action's steps (the coverage line of an
        OK run), at some cost in CPU (see :func:`kvprobe.tlc.run_tlc`).
        """
        if self.quiet:
            return run_tlc(
                spec, config, workers=workers, extra_args=extra_args, extra_files=extra_files, coverage=coverage
            )
        plural = "s" if workers > 1 else ""
        self.display.note(f"kvprobe check: TLC started on {what} ({spec.name}, {workers} worker{plural})")
        try:
            with self.display.heartbeat():
                result = run_tlc(
                    spec,
                    config,
                    workers=workers,
                    extra_args=extra_args,
                    extra_files=extra_files,
                    on_message=self,
                    coverage=coverage,
                )
        finally:
            self.display.clear()
        self.display.note(f"kvprobe check: TLC finished {what} after {result.seconds:.1f} s")
        return result

    def __call__(self, msg: Message) -> None:
        """Show one of TLC's messages if it says how the run is going."""
        text = msg.text.strip()
        if msg.code == _MSG_PROGRESS:
            found = _PROGRESS.search(text)
            if found:
                depth, gen, per_min, distinct, left = found.groups()
                rate = f", {_int(per_min) / 60:,.0f} states/s" if per_min else ""
                self.display.show(
                    f"TLC: depth {depth}, {distinct} distinct states, {gen} generated{rate}, {left} on queue",
                    force=True,
                )
        elif msg.code in _MSG_PHASES or text.startswith(("Checking temporal properties", "Checking 1 branches")):
            self.display.show(f"TLC: {text.splitlines()[0]}", force=True)


def _int(text: str) -> int:
    return int(text.replace(",", ""))


def summary(result: TlcResult) -> str:
    """States generated, distinct states, depth and time of a run, as one phrase."""
    parts = []
    if result.generated is not None:
        parts.append(f"{result.generated} states generated")
    if result.distinct is not None:
        parts.append(f"{result.distinct} distinct states")
    if result.depth is not None:
        parts.append(f"depth {result.depth}")
    parts.append(f"{result.seconds:.1f} s")
    return ", ".join(parts)


def report(result: TlcResult, label: str, properties: Sequence[str], *, raw: bool = False) -> None:
    """Print a run's result: OK with coverage, TLC's errors, or the counterexample and what it violates.

    A counterexample is told in plain words first; ``raw`` adds TLC's form.
    """
    if result.outcome == "ok":
        print(f"kvprobe check {label}: OK, no violation: {summary(result)}")
        print(coverage_line(result))
        return
    if result.outcome == "error":
        print(f"kvprobe check {label}: TLC could not check the model (exit {result.exit_code}):", file=sys.stderr)
        for error in result.errors:
            print("  " + error.replace("\n", "\n  "), file=sys.stderr)
        print(f"kvprobe check {label}: SPEC ERROR: {summary(result)}")
        return
    name = result.property or (" / ".join(properties) if properties else "a temporal property")
    kind = {"invariant": "safety property", "liveness": "liveness property", "deadlock": "deadlock"}[result.outcome]
    violated = "deadlock" if result.outcome == "deadlock" else result.property or next(iter(properties), None)
    print(explain(result.trace, violated))
    if raw:
        print(f"Counterexample ({len(result.trace)} states) violating {name}, as TLC gives it:")
        print(format_trace(result.trace))
    verdict = "DEADLOCK reached" if result.outcome == "deadlock" else f"VIOLATED {kind} {name}"
    print(f"kvprobe check {label}: {verdict}: {summary(result)}")


def format_trace(steps: Sequence[Step]) -> str:
    """Numbered steps; the first shows every variable, later ones only what changed."""
    lines: list[str] = []
    previous: dict[str, str] = {}
    for step in steps:
        if not step.values:  # the end of a lasso: "Back to state N" or "Stuttering"
            lines.append(f"  -> {step.action}")
            continue
        changed = {k: v for k, v in step.values.items() if previous.get(k) != v}
        lines.append(f"  {step.number}. {step.action}")
        for name in sorted(changed):
            lines.append(f"       {name} = {changed[name]}")
        if not changed:
            lines.append("       (no variable changed)")
        previous = step.values
    return "\n".join(lines)
