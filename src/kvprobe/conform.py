"""``kvprobe conform MODULE:FACTORY``: the stateful machine against your backend.

The factory is a zero-argument callable, importable as ``MODULE:FACTORY``,
that returns a fresh tier and the means to set its ground truth: a
:class:`kvprobe.testing.stateful.Target`, any ``BlockStore`` (an object with
``batch_lookup``, ``store`` and ``remove``), or a ``(backend, store, remove)``
tuple.  It is called once per generated run; the machine removes its pool of
keys first, then stores and removes blocks between steps and checks every
verdict the manager reports against what it stored, along with the rest of
the contract (see :mod:`kvprobe.testing.stateful`).

Every answer the tier gives is audited against what the factory stored, and
a call slower than ``--timeout`` (default 1 s) fails the run: behind a
manager with that timeout, its keys would resolve as MISS.

``MODULE`` is found in the current directory first, as ``python -m`` finds
it.  Nothing is written to that directory (Hypothesis's caches go to a
temporary one).  ``--seed N`` reproduces a run and its report exactly: the
shrinking is bounded by a number of runs, not by time, unless a slow tier
reaches its time bound (the report then says so).

Needs Hypothesis (``pip install 'kvprobe[conform]'``); ``--help`` works without it.

Exit status: 0 when every example passed, 1 when the machine found a failing
example (printed, minimal, with the steps that reproduce it), 2 for a usage
error (bad arguments, a factory that cannot be imported, raises on its
first call, or returns the wrong thing), in one line on stderr.

Example::

    kvprobe conform kvprobe.testing.stateful:memory_factory --examples 200
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

__all__ = ["DEFAULT_TIMEOUT_S", "INSTALL_HINT", "load_factory", "main"]

#: The default bound on one backend call, in seconds (``--timeout``).
DEFAULT_TIMEOUT_S = 1.0

INSTALL_HINT = "kvprobe conform needs Hypothesis: pip install 'kvprobe[conform]'"


def load_factory(spec: str) -> Callable[[], object]:
    """Import ``MODULE:FACTORY`` (attribute paths like ``mod:Class.make`` work).

    The module is looked up on ``sys.path``; ``kvprobe conform`` puts the
    current directory first on it, as ``python -m`` does.

    Raises:
        ValueError: ``spec`` is not ``MODULE:NAME`` or names something not callable.
        ImportError: the module is nowhere on ``sys.path`` (the message names
            it and the current directory), or importing it failed (the
            message names the module and the error inside it).
        AttributeError: the module has no such attribute.
    """
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise ValueError(f"expected MODULE:FACTORY, got {spec!r}")
    obj: object = _import(module_name)
    for part in attr.split("."):
        obj = getattr(obj, part)
    if not callable(obj):
        raise ValueError(f"{spec} is a {type(obj).__name__}, not a callable factory")
    return obj


def _import(module_name: str) -> object:
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        # The module itself (or its package) is missing, or something it imports is.
        if exc.name is not None and (module_name == exc.name or module_name.startswith(exc.name + ".")):
            raise ImportError(
                f"no module named {module_name!r} in the current directory ({os.getcwd()}) "
                "or on the Python path (sys.path)",
                name=module_name,
            ) from exc
        raise ImportError(f"importing {module_name!r} failed: {exc}", name=module_name) from exc


@contextmanager
def _from_the_current_directory() -> Iterator[None]:
    """While the block runs: the current directory first on ``sys.path``, as ``python -m`` puts it, and
    no bytecode written (importing the user's module leaves no ``__pycache__`` beside it).

    The ``kvprobe`` script's own directory is first on ``sys.path`` otherwise, so a
    factory in the user's directory could not be imported.
    """
    cwd = os.getcwd()
    added = not any(os.path.abspath(entry or os.curdir) == cwd for entry in sys.path)
    if added:
        sys.path.insert(0, cwd)
    writes_bytecode, sys.dont_write_bytecode = sys.dont_write_bytecode, True
    try:
        yield
    finally:
        sys.dont_write_bytecode = writes_bytecode
        if added and cwd in sys.path:
            sys.path.remove(cwd)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kvprobe conform",
        description="Run kvprobe's stateful conformance machine against a backend factory "
        "(needs Hypothesis: pip install 'kvprobe[conform]').",
        epilog="exit status: 0 every example passed, 1 a failing example was found, 2 usage error",
    )
    parser.add_argument("factory", metavar="MODULE:FACTORY", help="zero-argument callable returning the tier")
    parser.add_argument("--examples", type=int, default=100, help="generated runs (default 100)")
    parser.add_argument("--steps", type=int, default=50, help="maximum steps per run (default 50)")
    parser.add_argument(
        "--worker",
        choices=("manual", "thread"),
        default="manual",
        help="manual: the machine pumps the worker (every interleaving); thread: the real ThreadedWorker",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_TIMEOUT_S,
        metavar="SECONDS",
        help=f"a backend call slower than this fails (default {DEFAULT_TIMEOUT_S:g}; 0: no bound)",
    )
    parser.add_argument("--derandomize", action="store_true", help="the same examples on every run (for CI)")
    parser.add_argument("--seed", type=int, help="generate from this seed (a failure report gives its seed)")
    parser.add_argument("--no-shrink", action="store_true", help="report the first failing example as found (faster)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the conformance machine; return the exit status (0 pass, 1 fail, 2 usage)."""
    try:
        args = _parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    except SystemExit as exc:  # argparse exits on --help and on errors
        return 0 if exc.code == 0 else 2
    if args.examples < 1 or args.steps < 1 or args.timeout < 0:
        print("kvprobe conform: --examples and --steps must be at least 1, --timeout at least 0", file=sys.stderr)
        return 2
    try:
        import hypothesis  # noqa: F401  (only to say which extra is missing)
    except ImportError:
        print(INSTALL_HINT, file=sys.stderr)
        return 2
    # NIXL logs each agent it creates at INFO on stdout, once per generated run:
    # quiet unless the user asked for a level (NIXL_LOG_LEVEL=INFO shows them).
    os.environ.setdefault("NIXL_LOG_LEVEL", "WARN")
    from kvprobe.progress import Progress
    from kvprobe.testing.stateful import run_conformance
    from kvprobe.testing.stateful.report import plural

    progress = Progress(sys.stderr)
    try:
        with _from_the_current_directory():
            factory = load_factory(args.factory)
            result = run_conformance(
                factory,
                examples=args.examples,
                steps=args.steps,
                worker=args.worker,
                derandomize=args.derandomize,
                shrink=not args.no_shrink,
                seed=args.seed,
                timeout_s=args.timeout or None,
                on_run=lambda n: progress.show(
                    f"conform: {plural(n, 'run')} (up to {plural(args.examples, 'example')}, then shrinking)"
                ),
            )
    except Exception as exc:  # the factory cannot be imported, called, or used: the user's to fix
        progress.clear()
        print(f"kvprobe conform: cannot use {args.factory}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    progress.clear()
    seeded = "derandomized" if result.seed is None else f"seed {result.seed}"
    print(f"kvprobe conform {args.factory} (worker={result.worker}, {seeded})")
    if result.passed:
        runs = f"{plural(result.examples, 'example')} of up to {plural(args.steps, 'step')}"
        print(f"PASS: {runs} in {result.seconds:.1f} s")
        return 0
    print(f"FAIL after {result.seconds:.1f} s: the backend, driven through AsyncLookupManager, broke the contract:")
    print(result.failure)
    if result.seed is not None:
        print(f"Reproduce: {_reproduce_command(args, result.seed)}")
    return 1


def _reproduce_command(args: argparse.Namespace, seed: int) -> str:
    """The command that runs the same examples again: the factory, the seed, and the options that shape the runs."""
    words = ["kvprobe conform", args.factory, "--seed", str(seed)]
    defaults = _parser().parse_args([args.factory])
    for option in ("examples", "steps", "worker", "timeout"):
        if getattr(args, option) != getattr(defaults, option):
            words += [
                f"--{option}",
                f"{getattr(args, option):g}" if option == "timeout" else str(getattr(args, option)),
            ]
    if args.no_shrink:
        words.append("--no-shrink")
    return " ".join(words)
