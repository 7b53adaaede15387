"""The README's quickstart runs as written, and its commands exist."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def python_blocks(text: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", text, flags=re.S)


def test_quickstart_runs() -> None:
    blocks = python_blocks((ROOT / "README.md").read_text())
    assert blocks, "README has no python block"
    quickstart = blocks[0]
    assert len(quickstart.strip().splitlines()) <= 16
    exec(compile(quickstart, "README.md quickstart", "exec"), {"__name__": "readme"})


def test_readme_commands_are_make_targets_ci_runs() -> None:
    readme = (ROOT / "README.md").read_text()
    makefile = (ROOT / "Makefile").read_text()
    for target in ("check", "test"):
        assert f"make {target}" in readme
        assert re.search(rf"^{target}:", makefile, flags=re.M)
    assert "make test" in (ROOT / ".ci" / "run").read_text()
