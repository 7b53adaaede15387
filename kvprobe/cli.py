"""The ``kvprobe`` command: ``kvprobe check`` (TLC) and ``kvprobe conform`` (a backend).

Each subcommand lives in its own module and is imported only when used.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence

__all__ = ["main"]

SUBCOMMANDS = {
    "check": ("kvprobe.check", "run the TLC model checker on the TLA+ model"),
    "conform": ("kvprobe.conform", "run the stateful conformance machine against your backend"),
}


def main(argv: Sequence[str] | None = None) -> int:
    """Dispatch to a subcommand; returns its exit code (2 for a usage error)."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        print("usage: kvprobe {check,conform} [options]\n")
        for name, (_, summary) in SUBCOMMANDS.items():
            print(f"  {name:<8} {summary}")
        return 0 if args else 2
    name, rest = args[0], args[1:]
    if name not in SUBCOMMANDS:
        print(f"kvprobe: unknown command {name!r}; choose from {', '.join(SUBCOMMANDS)}", file=sys.stderr)
        return 2
    module = importlib.import_module(SUBCOMMANDS[name][0])
    code: int = module.main(rest)
    return code


if __name__ == "__main__":
    sys.exit(main())
