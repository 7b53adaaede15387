"""mypy --strict over every module of the package, each under its import name.

mypy names a module after the folder it sits in, so ``spec/lifecycle.py``
would be checked as ``spec.lifecycle`` and ``kvprobe.spec`` would not be
found.  This runner hands mypy the package-dir mapping's modules as explicit
sources (dotted name, real path): errors name the real files, and the
options are pyproject.toml's ``[tool.mypy]``.

    python -m buildtools.typecheck        # exit 1 on any error
"""

from __future__ import annotations

import sys

from mypy import build
from mypy.errors import CompileError
from mypy.main import process_options
from mypy.modulefinder import BuildSource

from buildtools.layout import ROOT, source_modules


def main(argv: list[str] | None = None) -> int:
    """Type-check the package; extra arguments go to mypy (e.g. ``--no-incremental``)."""
    modules = source_modules()
    # process_options needs one target to accept the command line; the
    # sources it finds are replaced by the mapping's.
    _, options = process_options(["--config-file", str(ROOT / "pyproject.toml"), *(argv or []), str(modules[0].path)])
    sources = [BuildSource(str(module.path.relative_to(ROOT)), module.name, None) for module in modules]
    try:
        result = build.build(sources, options)
        messages = result.errors
    except CompileError as exc:
        messages = exc.messages
    for line in messages:
        print(line)
    errors = sum(": error:" in line for line in messages)
    print(f"{'Found ' + str(errors) + ' errors' if errors else 'Success: no issues'} in {len(sources)} source files")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
