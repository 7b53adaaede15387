"""The side-by-side commit benchmarks read their probes' output strictly.

A probe that printed nothing usable must be reported as a failed run, never
read as figures (a bench that silently compares empty lists compares nothing).
"""

from __future__ import annotations

import json

from bench.hotpath.cost import parse_ratios
from bench.reliability.starvation import KINDS, parse_figures


def test_starvation_figures_are_read_from_the_probes_last_line() -> None:
    figures = {kind: {"NixlPosixBackend": [0.5, 0.25]} for kind in KINDS}
    out = "NIXL says hello\n" + json.dumps(figures) + "\n"
    assert parse_figures(out) == figures


def test_starvation_output_without_every_kind_is_no_figures() -> None:
    partial = {"busy/idle": {"NixlPosixBackend": [0.5]}}
    assert parse_figures(json.dumps(partial)) == {}
    assert parse_figures("") == {}
    assert parse_figures("Traceback (most recent call last):") == {}
    assert parse_figures("[1, 2]") == {}


def test_hotpath_ratios_are_read_from_the_probes_last_line() -> None:
    assert parse_ratios('noise\n{"all lookups": 0.77, "scheduler total": 0.7}') == {
        "all lookups": 0.77,
        "scheduler total": 0.7,
    }
    assert parse_ratios("not json") == {}
