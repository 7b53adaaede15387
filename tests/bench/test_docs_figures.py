"""The figures the docs quote agree with the data files they come from (``bench.docdata``).

The first test checks the real docs; the others plant one disagreement each
in a small copy and require the check to name it, so the first cannot pass
by checking nothing.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from bench.common import DOCS_DIR
from bench.docdata import CHECKED_DOCS, SAME_RUN, DataFileError, check_all, dumps, load, provenance, render, requote


def test_the_docs_agree_with_their_data_files() -> None:
    assert check_all() == []


def test_every_picture_in_docs_img_is_drawn_from_a_tracked_data_file_that_names_it() -> None:
    pictures = sorted(p.name for p in (DOCS_DIR / "img").glob("*.png"))
    claimed = sorted(
        str(json.loads(f.read_text()).get("figure", "")).removeprefix("img/")
        for f in (DOCS_DIR / "data").glob("*.json")
    )
    assert pictures and set(pictures) <= set(claimed)


X, D = "\u00d7", "\u2013"  # the multiplication sign and the en dash the docs write ratios with

DATA: dict[str, Any] = {
    "title": "t",
    "date": "2026-12-04",
    "machine": {"cpu": "C", "cores": 2, "python": "3.11.7", "build": "pure", "load": "1"},
    "command": "python -m bench.x",
    "source": "a test",
    "figure": "img/p.png",
    "tables": {
        "r": {"columns": ["op", "ratio"], "rows": [["scheduler total", f"0.93{X}"], ["flush", f"0.88{D}0.90{X}"]]}
    },
}


def _docs(tmp_path: Path, text: str, data: dict[str, Any] = DATA, picture: bool = True) -> Path:
    """A docs folder whose performance.md is ``text``, with data file d.json and (optionally) img/p.png."""
    (tmp_path / "data").mkdir(parents=True)
    (tmp_path / "img").mkdir()
    (tmp_path / "data" / "d.json").write_text(dumps(data))
    if picture:
        (tmp_path / "img" / "p.png").write_bytes(b"\x89PNG")
    (tmp_path / "performance.md").write_text(text)
    return tmp_path


def _quoted(table: str = "r") -> str:
    return "\n".join([f"<!-- data: d#{table} -->", *render(DATA, table)]) + "\n"


GOOD = (
    "# P\n\n## Section\n\n"
    + _quoted()
    + f"\nThe step costs 0.93{X}; flush 0.88{D}0.90{X}.\n\n![p](img/p.png)\n\nDrawn from [d](data/d.json).\n"
)


def _check(docs: Path) -> list[str]:
    return check_all(docs, ("performance.md",))


def test_a_consistent_copy_passes(tmp_path: Path) -> None:
    assert _check(_docs(tmp_path, GOOD)) == []


def test_a_changed_table_cell_is_named_with_its_line(tmp_path: Path) -> None:
    problems = _check(_docs(tmp_path, GOOD.replace(f"| scheduler total | 0.93{X} |", f"| scheduler total | 0.92{X} |")))
    assert len(problems) == 1
    assert "performance.md:10: table d#r disagrees" in problems[0] and f"0.93{X}" in problems[0]


def test_a_row_added_to_a_quoted_table_is_named(tmp_path: Path) -> None:
    problems = _check(
        _docs(tmp_path, GOOD.replace(f"| flush | 0.88{D}0.90{X} |\n", f"| flush | 0.88{D}0.90{X} |\n| x | 2 |\n"))
    )
    assert problems == ["performance.md:12: table d#r has rows docs/data/d.json lacks"]


def test_a_changed_provenance_line_is_a_disagreement(tmp_path: Path) -> None:
    problems = _check(_docs(tmp_path, GOOD.replace("CPU: C,", "CPU: D,")))
    assert len(problems) == 1 and "table d#r disagrees" in problems[0]


def test_a_ratio_in_prose_that_no_quoted_table_holds_is_named(tmp_path: Path) -> None:
    problems = _check(_docs(tmp_path, GOOD.replace(f"flush 0.88{D}0.90{X}", f"flush 0.88{D}0.91{X}")))
    assert problems == [f"performance.md:13: the ratio 0.88{D}0.91{X} is in no table this section quotes"]


def test_a_ratio_in_a_section_that_quotes_no_table_is_named(tmp_path: Path) -> None:
    problems = _check(_docs(tmp_path, GOOD + f"\n## Another\n\nIt costs 0.93{X} there too.\n"))  # line 21
    assert problems == [f"performance.md:21: the ratio 0.93{X} is in no table this section quotes"]


def test_a_table_not_quoted_from_data_is_named_in_performance_md(tmp_path: Path) -> None:
    problems = _check(_docs(tmp_path, GOOD + "\n| a | b |\n|---|---|\n| x | 1.5 |\n"))
    assert problems == ["performance.md:19: a table not quoted from docs/data (<!-- data: NAME#ID -->)"]


def test_a_marker_naming_a_missing_file_or_table_is_named(tmp_path: Path) -> None:
    problems = _check(_docs(tmp_path, GOOD.replace("<!-- data: d#r -->", "<!-- data: d#nope -->")))
    assert any("has no table 'nope'" in p for p in problems)
    problems = _check(_docs(tmp_path / "2", GOOD.replace("<!-- data: d#r -->", "<!-- data: e#r -->")))
    assert any("e.json: no such data file" in p for p in problems)


def test_a_picture_without_its_data_or_whose_data_names_another_is_named(tmp_path: Path) -> None:
    problems = _check(_docs(tmp_path, GOOD.replace("Drawn from [d](data/d.json).", "Drawn from a run.")))
    assert problems == ["performance.md:15: img/p.png has no caption citing its data file (data/NAME.json)"]
    problems = _check(_docs(tmp_path / "1", GOOD, picture=False))
    assert problems == ["performance.md:15: img/p.png does not exist"]
    other = {**DATA, "figure": "img/q.png"}
    problems = _check(_docs(tmp_path / "2", GOOD, other))
    assert problems == ["performance.md:15: data/d.json draws 'img/q.png', not img/p.png"]


def test_an_unshown_picture_and_an_unquoted_data_file_are_named(tmp_path: Path) -> None:
    docs = _docs(tmp_path, "# P\n\nNothing quoted.\n")
    assert _check(docs) == [
        "docs/img/p.png: shown by none of performance.md",
        "docs/data/d.json: quoted by none of performance.md",
    ]


def test_a_data_file_without_its_provenance_is_refused(tmp_path: Path) -> None:
    machine = {k: v for k, v in DATA["machine"].items() if k != "build"}
    (tmp_path / "d.json").write_text(json.dumps({**DATA, "machine": machine, "source": None} | {"command": None}))
    (tmp_path / "e.json").write_text(json.dumps({k: v for k, v in DATA.items() if k != "date"}))
    (tmp_path / "f.json").write_text("[1, 2]")
    with pytest.raises(DataFileError, match=r"lacks machine\.build"):
        load("d", tmp_path)
    with pytest.raises(DataFileError, match="lacks date"):
        load("e", tmp_path)
    with pytest.raises(DataFileError, match="not a JSON object"):
        load("f", tmp_path)


def test_the_fleet_table_is_quoted_as_bench_fleet_prints_it(tmp_path: Path) -> None:
    # The docs quote other tables of fleet.json; its grid is quoted here, in a copy, as bench.fleet prints it.
    docs = tmp_path / "docs"
    shutil.copytree(DOCS_DIR, docs)
    grid = ["", "## The grid", "", "<!-- data: fleet#runs -->", *render(load("fleet"), "runs")]
    with (docs / "performance.md").open("a") as doc:
        doc.write("\n".join(grid) + "\n")
    assert check_all(docs, CHECKED_DOCS) == []
    fleet = json.loads((docs / "data" / "fleet.json").read_text())
    fleet["runs"][3]["throttled_fraction"] = 0.5  # the 10-engine per-key row of the table
    (docs / "data" / "fleet.json").write_text(dumps(fleet))
    problems = [p for p in check_all(docs, CHECKED_DOCS) if "fleet" in p]
    assert len(problems) == 1 and "table fleet#runs disagrees" in problems[0] and "50.0%" in problems[0]


def test_a_second_table_of_the_same_run_in_a_section_says_so_and_a_new_section_says_it_all(tmp_path: Path) -> None:
    data = {key: value for key, value in DATA.items() if key != "figure"}  # no picture to draw
    full, same = render(data, "r"), render(data, "r", same_run=True)
    assert same[0] == SAME_RUN and same[1:] == full[1:]
    table = "<!-- data: d#r -->\n{}\n"
    section_a = "## A\n\n" + table.format("\n".join(full)) + "\nThen:\n\n" + table.format("\n".join(same))
    section_b = "\n## B\n\n" + table.format("\n".join(full))
    assert _check(_docs(tmp_path / "ok", "# P\n\n" + section_a + section_b, data, picture=False)) == []
    # The whole line again in the same section, or the short one in a new section: each is named.
    repeated = section_a.replace(SAME_RUN, full[0])
    short_in_b = section_b.replace(full[0], SAME_RUN)
    for name, text in [("repeated", repeated + section_b), ("short", section_a + short_in_b)]:
        problems = _check(_docs(tmp_path / name, "# P\n\n" + text, data, picture=False))
        assert len(problems) == 1 and "table d#r disagrees" in problems[0], (name, problems)


def test_requote_writes_the_short_line_for_a_second_table_of_the_same_run(tmp_path: Path) -> None:
    doc = tmp_path / "p.md"
    data = DATA | {"tables": {**DATA["tables"], "s": DATA["tables"]["r"]}}
    doc.write_text("## A\n\n<!-- data: d#r -->\n\n<!-- data: d#s -->\n\n## B\n\n<!-- data: d#s -->\n")
    assert requote(doc, "d", data) == []
    text = doc.read_text()
    assert text.count(SAME_RUN) == 1 and text.count(provenance(data)) == 2, text
    assert text.index(SAME_RUN) < text.index("## B")
