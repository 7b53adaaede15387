"""The ``kvprobe`` command: ``kvprobe check`` (TLC) and ``kvprobe conform`` (a backend).

Each subcommand lives in its own module and is imported only when used, so
``kvprobe check`` needs nothing beyond the core install and ``kvprobe
conform --help`` works without Hypothesis.

Exit status: the subcommand's (see ``kvprobe check --help`` and ``kvprobe
conform --help``); 2 for a usage error here; 130 when interrupted (Ctrl-C);
141 when the output pipe closed early (``kvprobe check --list | head``),
as for a shell command ended by SIGPIPE, without a traceback.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Sequence

from kvprobe import __version__

__all__ = ["EXIT_BROKEN_PIPE", "EXIT_INTERRUPTED", "main"]

EXIT_INTERRUPTED = 130
EXIT_BROKEN_PIPE = 141

SUBCOMMANDS = {
    "check": ("kvprobe.check", "run the TLC model checker on the TLA+ model"),
    "conform": ("kvprobe.conform", "run the stateful conformance machine against your backend"),
}


def main(argv: Sequence[str] | None = None) -> int:
    """Dispatch to a subcommand; returns its exit code (2 for a usage error).

    Never raises for Ctrl-C or a closed output pipe: they become exit codes
    130 and 141 with at most one line on stderr.
    """
    try:
        return _dispatch(list(sys.argv[1:] if argv is None else argv))
    except KeyboardInterrupt:
        print("\nkvprobe: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # The reader went away (| head).  Point stdout at /dev/null so the
        # interpreter's final flush does not raise a second time.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_BROKEN_PIPE


def _dispatch(args: list[str]) -> int:
    if args and args[0] in ("-V", "--version"):
        from kvprobe.build_info import build_info

        print(f"kvprobe {__version__} ({build_info().describe()})")
        return 0
    if not args or args[0] in ("-h", "--help"):
        print("usage: kvprobe {check,conform} [options]   (kvprobe --version; kvprobe COMMAND --help)\n")
        for name, (_, summary) in SUBCOMMANDS.items():
            print(f"  {name:<8} {summary}")
        return 0 if args else 2
    name, rest = args[0], args[1:]
    if name not in SUBCOMMANDS:
        print(f"kvprobe: unknown command {name!r}; choose from {', '.join(SUBCOMMANDS)}", file=sys.stderr)
        return 2
    module = importlib.import_module(SUBCOMMANDS[name][0])
    code: int = module.main(rest)
    sys.stdout.flush()  # a closed pipe shows here, inside main's handler
    return code


if __name__ == "__main__":
    sys.exit(main())
