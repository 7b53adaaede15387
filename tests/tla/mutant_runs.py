"""TLC runs of a mutant on its config (tla/default.cfg for most), shared by every test of a session that needs one.

A module of its own (not conftest.py): ``from conftest import`` finds
whichever conftest pytest imported last, which depends on the order of the
command line's paths.

TLC is deterministic for the same model, config and arguments (breadth
first, one worker), so a run is made once per session and its result shared:
:func:`mutant_run` for the tests that read a result, and
:func:`shared_tlc_runs` for the tests that go through ``kvprobe check``
(which then gets the very result TLC gave for the config it wrote, or runs
TLC if no test asked for that config before).
"""

from __future__ import annotations

import atexit
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

from kvprobe import check_report
from kvprobe.check import reach_config
from kvprobe.tlc import TlcResult, run_tlc, tla_dir
from kvprobe.tlc_mutants import find_mutant, mutant_config, root_module

_folder: Path | None = None


def run_folder() -> Path:
    """The folder of the session's config files: made on first use, removed when the process exits.

    Not made at import, so collecting the tests (``--collect-only``) leaves
    nothing behind.
    """
    global _folder
    if _folder is None:
        _folder = Path(tempfile.mkdtemp(prefix="kvprobe-mutant-"))
        atexit.register(shutil.rmtree, _folder, ignore_errors=True)
    return _folder


#: The runs made so far, by (root module, every module's text, config text, workers, arguments).
_RUNS: dict[tuple[object, ...], TlcResult] = {}


def _cached_run(
    spec: Path, cfg_text: str, workers: int, extra_args: tuple[str, ...], *, coverage: bool = True
) -> TlcResult:
    """One TLC run per (model, config text, workers, arguments, coverage) per session.

    The model is its modules' text, not their folder: a test's copy of tla/
    (``KVPROBE_TLA_DIR``) shares the runs of tla/ itself while it holds the
    same modules.
    """
    modules = tuple(sorted((p.name, p.read_text()) for p in spec.parent.glob("*.tla")))
    key = (spec.name, modules, cfg_text, workers, extra_args, coverage)
    if key not in _RUNS:
        cfg = run_folder() / f"run-{abs(hash(key))}.cfg"
        cfg.write_text(cfg_text)
        _RUNS[key] = run_tlc(spec, cfg, workers=workers, extra_args=extra_args, coverage=coverage)
    return _RUNS[key]


def mutant_run(mutant: str, clause: str) -> TlcResult:
    """TLC on the config ``mutant`` is caught on (tla/default.cfg for most) with its overrides.

    One run per mutant per session, shared by tests.  ``clause`` is the
    property meant to catch it; for a mutant of tla/reach.cfg only that
    reachability property is checked (:func:`kvprobe.check.reach_config`).
    """
    config = find_mutant(mutant).config
    text = (tla_dir() / f"{config}.cfg").read_text()
    if config == "reach":
        text = reach_config(text, clause)
    # As `kvprobe check --mutant` runs it: without coverage, so the two share it.
    return _cached_run(tla_dir() / root_module(mutant), mutant_config(text, mutant), 1, (), coverage=False)


def _shared_run_tlc(
    spec: Path,
    config: Path,
    *,
    workers: int = 1,
    extra_args: Sequence[str] = (),
    extra_files: Mapping[str, str] | None = None,
    coverage: bool = True,
) -> TlcResult:
    assert extra_files is None, "runs with extra files are not shared"
    return _cached_run(spec, config.read_text(), workers, tuple(extra_args), coverage=coverage)


@pytest.fixture
def shared_tlc_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    """``kvprobe check --quiet`` runs TLC through the session's shared runs."""
    monkeypatch.setattr(check_report, "run_tlc", _shared_run_tlc)
