"""TLC runs of tla/default.cfg with a mutant, shared by every test of a session that needs one.

A module of its own (not conftest.py): ``from conftest import`` finds
whichever conftest pytest imported last, which depends on the order of the
command line's paths.
"""

from __future__ import annotations

import functools
import tempfile
from pathlib import Path

from kvprobe.tlc import TlcResult, run_tlc, tla_dir


@functools.cache
def default_mutant_run(mutant: str) -> TlcResult:
    """TLC on tla/default.cfg with ``Mutant`` set (one run per mutant per session, shared by tests)."""
    folder = Path(tempfile.mkdtemp(prefix="kvprobe-mutant-"))
    cfg = folder / "mutant.cfg"
    cfg.write_text((tla_dir() / "default.cfg").read_text().replace('Mutant = "none"', f'Mutant = "{mutant}"'))
    return run_tlc(tla_dir() / "MC.tla", cfg)
