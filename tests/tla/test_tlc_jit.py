"""Which TLC runs stop the JIT at C1 (``\\* kvprobe: jit c1``), and that the runner passes it to Java.

The rule: a run whose graph is small (a recorded trace, one behaviour; a
``tla/`` config of under 50,000 distinct states) runs with
:data:`kvprobe.tlc.QUICK_JIT`, where the optimising compiler would cost
more CPU than it saves; every larger config keeps the full JIT.
"""

from __future__ import annotations

import io
import re
from pathlib import Path
from typing import Any, ClassVar

import pytest

import kvprobe.tlc
from kvprobe.tlc import QUICK_JIT, config_directives, read_trace, run_tlc, tla_dir, trace_to_tla

#: Above this many distinct states C2 pays for itself (kvprobe.tlc.QUICK_JIT's figures).
SMALL_GRAPH = 50_000

DIRECTIVE = "\\* kvprobe: jit c1"


def _readme_distinct_states() -> dict[str, int]:
    """Config name -> the distinct states (or views) tla/README.md's table gives for it."""
    counts: dict[str, int] = {}
    table = (tla_dir() / "README.md").read_text()
    # | `name` | bounds | checks | distinct states (the first number) | time |
    for row in re.finditer(r"^\| `([\w-]+)` \|[^|]*\|[^|]*\| [^|\d]*([\d,]+)", table, re.M):
        counts[row.group(1)] = int(row.group(2).replace(",", ""))
    return counts


def test_the_directive_asks_for_c1_and_nothing_else() -> None:
    assert config_directives(f"{DIRECTIVE}\nCONSTANTS\n") == ([], [QUICK_JIT])
    with pytest.raises(ValueError, match="jit takes only c1"):
        config_directives("\\* kvprobe: jit c2\n")


def test_only_configs_with_a_small_graph_stop_at_c1() -> None:
    counts = _readme_distinct_states()
    quick = sorted(p.stem for p in tla_dir().glob("*.cfg") if DIRECTIVE in p.read_text())
    assert quick, "no config asks for C1"
    for name in quick:
        assert name in counts, f"{name}.cfg asks for C1 but tla/README.md gives no state count for it"
        assert counts[name] < SMALL_GRAPH, (name, counts[name])
    # The large ones keep C2: the rule must not reach them.
    for name in ("default", "keys2", "liveness2", "deadlock"):
        assert name not in quick and counts[name] >= SMALL_GRAPH, (name, counts.get(name))


def test_a_trace_check_stops_at_c1() -> None:
    events = read_trace(Path(__file__).parent / "traces" / "accepted" / "timeout-late-answer.ndjson")
    assert QUICK_JIT in config_directives(trace_to_tla(events)[1])[1]


class _FakeTlc:
    """Stands in for TLC's process: records the command, prints nothing, exits 0."""

    commands: ClassVar[list[list[str]]] = []

    def __init__(self, cmd: list[str], **_: Any) -> None:
        self.commands.append(cmd)
        self.stdout = io.StringIO("")

    def wait(self) -> int:
        return 0

    def poll(self) -> int:
        return 0


@pytest.mark.parametrize(("config", "quick"), [("chain", True), ("default", False)])
def test_the_runner_hands_the_option_to_java_before_the_class_path(
    config: str, quick: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    _FakeTlc.commands = []
    monkeypatch.setattr(kvprobe.tlc.subprocess, "Popen", _FakeTlc)
    run_tlc(tla_dir() / "MC.tla", tla_dir() / f"{config}.cfg")
    (cmd,) = _FakeTlc.commands
    assert (QUICK_JIT in cmd[: cmd.index("-cp")]) is quick, cmd
