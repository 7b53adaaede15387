"""The figures the docs quote, kept in ``docs/data/*.json`` and checked against the docs.

The convention (``tests/bench/test_docs_figures.py`` enforces it on the docs
listed in :data:`CHECKED_DOCS`):

* **A data file** ``docs/data/NAME.json`` holds one run's figures and where
  they come from: ``title``, ``date``, ``machine`` (``cpu``, ``cores``,
  ``python``, ``build``: pure or compiled, ``load``; "not recorded" where the
  run did not say), ``command`` (and optionally ``note``: how many runs, say) and
  ``source`` (how the figures got here: the runner that wrote the file, or
  the printed table they were copied from).
  Its ``tables`` map an id to ``{"columns": [...], "rows": [[...], ...]}``,
  every cell a string as the docs show it.  A data file that backs a picture
  names it: ``"figure": "img/NAME.png"``.
* **A table in a doc** that quotes a data file follows the line
  ``<!-- data: NAME#ID -->`` and is, line for line, :func:`render`'s output:
  a line saying when, where and how it was measured (or, when the table
  quoted before it in the same section comes from the same file,
  :data:`SAME_RUN`), a blank line, the Markdown table.
  ``python -m bench.docdata render NAME#ID`` prints it.  The fleet's data
  file (``bench.fleet``'s results) is quoted as the fixed-width
  block ``python -m bench.fleet --from-json`` prints.
* In ``performance.md`` every table is quoted so.
* **A ratio in prose** (a number or a range of two, then the multiplication
  sign, as in "0.93" or "0.97" to "0.98" followed by it) must be a figure of a table
  quoted in the same section (between two headings); a section that quotes
  no table quotes no ratio.
* **A picture** ``![...](img/NAME.png)`` is followed by a caption citing its
  data file (``data/NAME.json``), which must name that picture; every
  picture in ``docs/img`` is cited, and every data file is quoted somewhere.

``python -m bench.docdata check`` prints every disagreement (exit 1 if any).
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from bench.common import DOCS_DIR, load_average, machine

__all__ = [
    "CHECKED_DOCS",
    "DATA_DIR",
    "DataFileError",
    "check_all",
    "check_doc",
    "dumps",
    "load",
    "machine_record",
    "main",
    "render",
    "requote",
]

DATA_DIR = DOCS_DIR / "data"
#: The docs whose figures must agree with docs/data.
CHECKED_DOCS = ("performance.md", "plots.md", "fleet.md")
#: The docs in which every table is quoted from docs/data (the others also hold tables of parameters).
ONLY_QUOTED_TABLES = ("performance.md",)
PROVENANCE = ("title", "date", "machine", "command", "source")
MACHINE = ("cpu", "cores", "python", "build", "load")

#: The provenance line of a table whose data file the table before it (same section) quoted too.
SAME_RUN = "*The same run as the table above.*"

_MARKER = re.compile(r"^<!-- data: ([\w.-]+)#([\w-]+) -->$")
_RATIO = re.compile(r"(\d+(?:\.\d+)?)(?:[\u2013-](\d+(?:\.\d+)?))?\u00d7")  # 0.93x, 0.97-0.98x (en dash, times)
_PICTURE = re.compile(r"!\[[^\]]*\]\((img/[\w.-]+\.png)\)")
_CITED = re.compile(r"\(data/([\w.-]+)\.json\)")


class DataFileError(ValueError):
    """A data file that is missing, not JSON, or lacks what the convention asks of it."""


def load(name: str, data_dir: Path = DATA_DIR) -> dict[str, Any]:
    """The data file ``NAME.json``.

    Raises:
        DataFileError: there is none, it is not a JSON object, or it lacks a provenance key.
    """
    path = data_dir / f"{name}.json"
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise DataFileError(f"{path}: no such data file") from None
    except ValueError as exc:
        raise DataFileError(f"{path}: not JSON ({exc})") from None
    if not isinstance(data, dict):
        raise DataFileError(f"{path}: not a JSON object")
    missing = [key for key in PROVENANCE if key not in data]
    missing += [f"machine.{key}" for key in MACHINE if key not in data.get("machine", {})]
    if missing:
        raise DataFileError(f"{path}: lacks {', '.join(missing)}")
    return data


_SCALAR = r'(?:"(?:[^"\\]|\\.)*"|-?[\d.eE+-]+|true|false|null)'
_FLAT_LIST = re.compile(r"\[\s*\n\s*(" + _SCALAR + r"(?:,\s*\n\s*" + _SCALAR + r")*)\s*\n\s*\]")


def dumps(data: dict[str, Any]) -> str:
    """``data`` as a data file: indented JSON with each list of plain values (a table row) on one line."""
    text = json.dumps(data, indent=1, ensure_ascii=False)
    return _FLAT_LIST.sub(lambda m: "[" + re.sub(r",\s*\n\s*", ", ", m.group(1)) + "]", text) + "\n"


def provenance(data: dict[str, Any]) -> str:
    """One line: when, on what, and with which command (and how many runs) the figures were measured."""
    m = data["machine"]
    note = f", {data['note']}" if isinstance(data.get("note"), str) else ""
    command = data["command"] if data["command"] == "not recorded" else f"`{data['command']}`"
    return (
        f"*{data['date']}. CPU: {m['cpu']}, {m['cores']} cores. Python {m['python']}; build: {m['build']}. "
        f"Load: {m['load']}. Command: {command}{note}.*"
    )


def _fleet_lines(data: dict[str, Any]) -> list[str]:
    from bench.fleet.__main__ import header, row

    run_columns = all("wall_s" in r for r in data["runs"])
    return [header(run_columns), *(row(r, run_columns) for r in data["runs"])]


def render(data: dict[str, Any], table: str, *, same_run: bool = False) -> list[str]:
    """The lines a doc shows for ``table`` of ``data``: provenance, a blank line, the table.

    With ``same_run`` (the table before it in the section quotes the same
    file) the provenance is :data:`SAME_RUN`.

    Raises:
        DataFileError: ``data`` has no such table.
    """
    said = SAME_RUN if same_run else provenance(data)
    if table == "runs" and "runs" in data:  # bench.fleet's results
        return [said, "", "```", *_fleet_lines(data), "```"]
    found = data.get("tables", {}).get(table)
    if not isinstance(found, dict) or "columns" not in found or "rows" not in found:
        raise DataFileError(f"{data['title']!r} has no table {table!r}")
    lines = ["| " + " | ".join(found["columns"]) + " |", "|" + "---|" * len(found["columns"])]
    lines += ["| " + " | ".join(row) + " |" for row in found["rows"]]
    return [said, "", *lines]


def quoted_before(lines: Sequence[str], at: int) -> str | None:
    """The data file that the marker before line index ``at`` quotes, in the same section (None: none)."""
    for line in reversed(lines[:at]):
        if line.startswith("#"):
            return None
        if marker := _MARKER.match(line):
            return marker.group(1)
    return None


def machine_record() -> dict[str, Any]:
    """This machine as a data file records it: :func:`bench.common.machine` and the 1-minute load now."""
    now = load_average()
    return {**machine(), "load": f"{now[0]} at the end of the run" if now else "not recorded"}


def requote(doc: Path, name: str, data: dict[str, Any]) -> list[str]:
    """Rewrite, in ``doc``, each table quoted as ``NAME#ID`` (every time) by its rendering; return the ids not quoted.

    A generator calls this after writing ``docs/data/NAME.json`` so the doc
    shows the new figures; a table the doc does not quote is left to the
    caller to place (the returned ids).

    Raises:
        FileNotFoundError: ``doc`` does not exist.
    """
    lines = doc.read_text().splitlines()
    quoted: set[str] = set()
    at = 0
    while at < len(lines):
        marker = _MARKER.match(lines[at])
        at += 1
        if marker is None or marker.group(1) != name or marker.group(2) not in data["tables"]:
            continue
        table = marker.group(2)
        quoted.add(table)
        end = at
        if end < len(lines) and lines[end].startswith("*"):  # the provenance line, then its blank line
            end += 1
            if end < len(lines) and not lines[end]:
                end += 1
        while end < len(lines) and lines[end].startswith("|"):
            end += 1
        lines[at:end] = render(data, table, same_run=quoted_before(lines, at - 1) == name)
    missing = [table for table in data["tables"] if table not in quoted]
    doc.write_text("\n".join(lines) + "\n")
    return missing


def _sections(lines: Sequence[str]) -> Iterator[list[tuple[int, str]]]:
    """The doc's lines split at headings, each with its line number (outside fenced blocks)."""
    section: list[tuple[int, str]] = []
    fenced = False
    for number, line in enumerate(lines, 1):
        if line.startswith("```"):
            fenced = not fenced
        if line.startswith("#") and not fenced:
            yield section
            section = []
        section.append((number, line))
    yield section


def _numbers(cells: Sequence[str]) -> set[str]:
    return {n for cell in cells for n in re.findall(r"\d+(?:\.\d+)?", cell.replace(",", ""))}


def check_doc(path: Path, data_dir: Path = DATA_DIR) -> tuple[list[str], set[str]]:
    """Every disagreement between ``path`` and the data files it quotes; and the data files it quotes."""
    lines = path.read_text().splitlines()
    only_quoted = path.name in ONLY_QUOTED_TABLES
    problems: list[str] = []
    quoted: set[str] = set()
    for section in _sections(lines):
        figures: set[str] = set()
        prose: list[tuple[int, str]] = []
        skip_until = 0
        previous: str | None = None  # the data file of the section's last quoted table
        for index, (number, line) in enumerate(section):
            if number <= skip_until:
                continue
            marker = _MARKER.match(line)
            if marker:
                name, table = marker.groups()
                quoted.add(name)
                same_run, previous = previous == name, name
                try:
                    expected = render(load(name, data_dir), table, same_run=same_run)
                except DataFileError as exc:
                    problems.append(f"{path.name}:{number}: {exc}")
                    continue
                shown = [text for _, text in section[index + 1 : index + 1 + len(expected)]]
                if shown != expected:
                    padded = [*shown, *[""] * (len(expected) - len(shown))]
                    bad = next((i for i, (a, b) in enumerate(zip(padded, expected, strict=True)) if a != b), 0)
                    problems.append(
                        f"{path.name}:{number + 1 + bad}: table {name}#{table} disagrees with docs/data/{name}.json: "
                        f"shows {shown[bad] if bad < len(shown) else '(nothing)'!r}, the data gives {expected[bad]!r}"
                    )
                after = section[index + 1 + len(expected) : index + 2 + len(expected)]
                if shown == expected and after and after[0][1].startswith("|"):
                    problems.append(
                        f"{path.name}:{after[0][0]}: table {name}#{table} has rows docs/data/{name}.json lacks"
                    )
                figures |= _numbers(expected)
                skip_until = number + len(expected)
            elif line.startswith("|"):
                if only_quoted and (index == 0 or not section[index - 1][1].startswith("|")):
                    problems.append(f"{path.name}:{number}: a table not quoted from docs/data (<!-- data: NAME#ID -->)")
            elif not line.startswith("    "):
                prose.append((number, line))
        for number, line in prose:
            for match in _RATIO.finditer(line):
                for value in filter(None, match.groups()):
                    if value not in figures:
                        problems.append(
                            f"{path.name}:{number}: the ratio {match.group(0)} is in no table this section quotes"
                        )
    problems += _check_pictures(path, lines, data_dir)
    return problems, quoted


def _check_pictures(path: Path, lines: Sequence[str], data_dir: Path) -> list[str]:
    problems = []
    for number, line in enumerate(lines, 1):
        for picture in _PICTURE.findall(line):
            if not (path.parent / picture).is_file():
                problems.append(f"{path.name}:{number}: {picture} does not exist")
            caption = " ".join(lines[number : number + 6])
            cited = _CITED.search(caption)
            if cited is None:
                problems.append(f"{path.name}:{number}: {picture} has no caption citing its data file (data/NAME.json)")
                continue
            try:
                claims = load(cited.group(1), data_dir).get("figure")
            except DataFileError as exc:
                problems.append(f"{path.name}:{number}: {exc}")
                continue
            if claims != picture:
                problems.append(f"{path.name}:{number}: data/{cited.group(1)}.json draws {claims!r}, not {picture}")
    return problems


def check_all(docs_dir: Path = DOCS_DIR, docs: Sequence[str] = CHECKED_DOCS) -> list[str]:
    """Every disagreement in ``docs``, every picture nothing cites and every data file nothing quotes."""
    data_dir = docs_dir / "data"
    problems: list[str] = []
    quoted: set[str] = set()
    shown_pictures: set[str] = set()
    for doc in docs:
        path = docs_dir / doc
        found, names = check_doc(path, data_dir)
        problems += found
        quoted |= names
        text = path.read_text()
        shown_pictures |= set(_PICTURE.findall(text))
        quoted |= set(_CITED.findall(text))
    for picture in sorted((docs_dir / "img").glob("*.png")):
        if f"img/{picture.name}" not in shown_pictures:
            problems.append(f"docs/img/{picture.name}: shown by none of {', '.join(docs)}")
    for data_file in sorted(data_dir.glob("*.json")):
        try:
            load(data_file.stem, data_dir)
        except DataFileError as exc:
            problems.append(str(exc))
        if data_file.stem not in quoted:
            problems.append(f"docs/data/{data_file.name}: quoted by none of {', '.join(docs)}")
    return problems


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["check"] and len(args) == 1:
        problems = check_all()
        print("\n".join(problems) or f"the figures of {', '.join(CHECKED_DOCS)} agree with docs/data")
        return 1 if problems else 0
    if args[:1] == ["render"] and len(args) == 2 and "#" in args[1]:
        name, table = args[1].split("#", 1)
        print("\n".join([f"<!-- data: {name}#{table} -->", *render(load(name), table)]))
        return 0
    print("usage: python -m bench.docdata check | render NAME#TABLE", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
