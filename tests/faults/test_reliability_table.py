"""The fault matrix's regeneration: a run replaces only the rows of the tests it ran, in the data file and the page."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fault_harness import COLUMNS, Row, by_file, merged_rows, row_cells, write_matrix

from bench.docdata import check_doc


def _row(fault: str, command: str) -> Row:
    return Row(fault, "backend", "1/1", 0.002, 0, "counters", command)


OLD = [
    row_cells(_row("a", "pytest tests/faults/test_x.py::test_a")),
    row_cells(_row("b first", "pytest tests/faults/test_x.py::test_b")),
    row_cells(_row("b second", "pytest tests/faults/test_x.py::test_b")),
    row_cells(_row("c", "pytest 'tests/faults/test_y.py::test_c[p | q]'")),
]


def test_rows_of_the_tests_run_are_replaced_in_place_and_others_kept() -> None:
    new = [_row("b new", "pytest tests/faults/test_x.py::test_b"), _row("d", "pytest tests/faults/test_z.py::test_d")]
    assert [cells[0] for cells in merged_rows(OLD, new)] == ["a", "b new", "c", "d"]


def test_a_run_that_recorded_nothing_keeps_the_table() -> None:
    assert merged_rows(OLD, []) == OLD


def test_a_row_has_one_cell_per_column_and_its_command_last() -> None:
    cells = row_cells(_row("a", "pytest x::y"))
    assert len(cells) == len(COLUMNS) and cells[-1] == "`x::y`" and cells[3] == "2 ms"


def _page(tmp_path: Path) -> Path:
    page = tmp_path / "performance.md"
    page.write_text("# P\n\n## The fault matrix\n\n<!-- data: faults#by-file -->\n\n## Next\n")
    return page


def test_write_matrix_merges_into_the_data_file_and_the_page_quotes_it(tmp_path: Path) -> None:
    page, data = _page(tmp_path), tmp_path / "faults.json"
    write_matrix([_row("a", "pytest x::a"), _row("b", "pytest x::b")], 0, data, page)
    write_matrix([_row("b again", "pytest x::b")], 1, data, page)
    written = json.loads(data.read_text())
    assert [r[0] for r in written["tables"]["matrix"]["rows"]] == ["a", "b again"]
    assert "exit status 1" in written["note"]
    assert check_doc(page, tmp_path) == ([], {"faults"})
    assert "| `x` | 2 | 2/2 | 2 ms | 0 |" in page.read_text()


def test_write_matrix_refuses_a_page_that_does_not_quote_it(tmp_path: Path) -> None:
    page = tmp_path / "performance.md"
    page.write_text("# P\n")
    with pytest.raises(ValueError, match="does not quote faults#by-file"):
        write_matrix([_row("a", "pytest x::a")], 0, tmp_path / "faults.json", page)


def test_by_file_sums_each_files_rows_and_counts_rows_without_verdicts_apart() -> None:
    rows = [
        ["f1", "b", "7/7", "2 ms", "0", "c", "`test_a.py::t1`"],
        ["f2", "b", "3/4", "900 ms", "1", "c", "`test_a.py::t2[p]`"],
        ["f3", "b", "none due: closed", "5 ms", "0", "c", "`test_b.py::t3`"],
    ]
    assert by_file(rows) == [
        ["`test_a.py`", "2", "10/11", "900 ms", "1"],
        ["`test_b.py`", "1", "0/0 (and 1 with none due)", "5 ms", "0"],
    ]
