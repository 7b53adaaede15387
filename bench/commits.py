"""Run one benchmark against several commits side by side: the ``--commits`` option of the runners.

Each commit's library is checked out (``git archive``) into a temporary
directory; every checkout gets the *same* ``bench/`` (from ``bench_rev``),
so only the library differs.  A short Python program (the runner's
*probe*) runs in each checkout as a separate process and prints its
figures as JSON on its last line.  Rounds are interleaved and their order
rotates from round to round, so a slow phase of a loaded machine hits
every commit alike.

``dir:PATH`` instead of a commit runs a source tree prepared by hand (a
variant: a commit with one change undone), copied without ``.git``,
``.venv``, caches and compiled modules: every tree runs pure Python, as a
commit's archive does.  A probe that imports kvprobe from anywhere but its
checkout (an installed kvprobe shadowing it) fails instead of measuring
the wrong code.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Callable, Sequence
from io import BytesIO
from typing import TypeVar

from bench.common import rotated

__all__ = ["add_options", "checkout", "interleaved", "last_json_line", "run_probe"]

_F = TypeVar("_F")


def add_options(parser: argparse.ArgumentParser, bench_rev: str | None, bench_rev_means: str) -> None:
    """``--commits REV [REV ...]`` and ``--bench-rev`` (default ``bench_rev``, described as ``bench_rev_means``)."""
    parser.add_argument(
        "--commits",
        nargs="+",
        metavar="REV",
        help="compare these commits (or dir:PATH trees) side by side; the first is the reference",
    )
    parser.add_argument(
        "--bench-rev",
        default=bench_rev,
        help=f"with --commits: the commit whose bench/ every checkout runs ({bench_rev_means})",
    )


def last_json_line(output: str) -> object:
    """What a probe printed as JSON on its last line (None if it printed no JSON there)."""
    lines = output.strip().splitlines()
    try:
        return json.loads(lines[-1]) if lines else None
    except ValueError:
        return None


def _archive(rev: str, into: str, paths: Sequence[str] = ()) -> None:
    data = subprocess.run(["git", "archive", rev, *paths], capture_output=True, check=True).stdout
    with tarfile.open(fileobj=BytesIO(data)) as tar:
        if sys.version_info >= (3, 12):
            tar.extractall(into, filter="tar")
        else:
            tar.extractall(into)


def checkout(rev: str, bench_rev: str, root: str) -> str:
    """A copy of ``rev``'s tree (or ``dir:PATH``) under ``root`` with ``bench/`` from ``bench_rev``; its path.

    Raises:
        subprocess.CalledProcessError: git cannot archive ``rev`` or ``bench_rev``.
        FileNotFoundError: ``dir:PATH`` names no directory.
    """
    tree = os.path.join(root, re.sub(r"[^A-Za-z0-9]", "_", rev))
    if rev.startswith("dir:"):  # a tree prepared by hand (a variant no commit holds)
        skip = shutil.ignore_patterns(".git", ".venv", "__pycache__", "*.so", "bench")  # bench/ comes from bench_rev
        shutil.copytree(rev[4:], tree, symlinks=True, ignore=skip)
    else:
        os.makedirs(tree)
        _archive(rev, tree)
    shutil.rmtree(os.path.join(tree, "bench"), ignore_errors=True)
    _archive(bench_rev, tree, ["bench"])
    return tree


# Put before every probe: a checkout keeps kvprobe's subpackages at its top
# level (spec/, statemachine/, ... mapped by setuptools' package-dir) and the
# root package either in src/kvprobe (today) or in kvprobe/ (older commits);
# neither layout is a tree PYTHONPATH alone can import, so the probe puts the
# root package first and lets it search the checkout for the subpackages.
_TREE_IMPORTS = """
import os as _os, sys as _sys
if _os.path.isfile(_os.path.join("src", "kvprobe", "__init__.py")):
    _sys.path.insert(0, _os.path.join(_os.getcwd(), "src"))
if _os.path.isfile(_os.path.join("src", "kvprobe", "__init__.py")) or _os.path.isfile(
    _os.path.join("kvprobe", "__init__.py")
):
    import kvprobe as _kvprobe
    _kvprobe.__path__.append(_os.getcwd())
"""
# Appended to every probe: a kvprobe module imported from anywhere but the
# checkout (an installed or editable kvprobe shadowing it) would measure
# the wrong code without a word.
_FROM_TREE_ONLY = """
import os as _os, sys as _sys
_tree = _os.path.realpath(_os.getcwd())
_outside = sorted(
    _m.__file__ for _n, _m in list(_sys.modules.items())
    if _n.split(".")[0] == "kvprobe" and getattr(_m, "__file__", None)
    and not _os.path.realpath(_m.__file__).startswith(_tree + _os.sep)
)
if _outside:
    raise SystemExit(f"kvprobe imported from outside the checkout {_tree}: {_outside[:3]}")
"""


def run_probe(tree: str, code: str) -> str:
    """Run ``code`` in a fresh interpreter importing only ``tree``; its standard output.

    Raises:
        RuntimeError: the probe exited non-zero (its last 800 characters of
            stderr), or it imported a kvprobe module from outside ``tree``.
    """
    env = {**os.environ, "PYTHONPATH": tree}
    command = [sys.executable, "-c", _TREE_IMPORTS + code + _FROM_TREE_ONLY]
    done = subprocess.run(command, cwd=tree, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"probe in {tree} failed ({done.returncode}): {done.stderr[-800:]}")
    return done.stdout


def interleaved(
    revs: Sequence[str], bench_rev: str, rounds: int, probe: str, parse: Callable[[str], _F | None]
) -> dict[str, list[_F]]:
    """``{rev: [parse(probe output) per round]}``: ``probe`` run in a checkout of each rev, rounds interleaved.

    Raises:
        ValueError: no revision given, or fewer than one round.
        RuntimeError: a probe failed, or printed nothing ``parse`` accepts (``parse`` returned None).
        subprocess.CalledProcessError: git cannot archive a revision.
    """
    if not revs or rounds < 1:
        raise ValueError(f"need at least one revision and one round (got {list(revs)}, {rounds} rounds)")
    results: dict[str, list[_F]] = {rev: [] for rev in revs}
    with tempfile.TemporaryDirectory(prefix="kvprobe-bench-commits-") as root:
        trees = {rev: checkout(rev, bench_rev, root) for rev in revs}
        for rnd in range(rounds):
            for rev in rotated(list(revs), rnd):
                figures = parse(run_probe(trees[rev], probe))
                if figures is None:
                    raise RuntimeError(f"the benchmark on {rev} printed no figures")
                results[rev].append(figures)
    return results
