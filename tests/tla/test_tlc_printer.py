"""Graph dumps printed without TLC's layout hold the same states and edges, and a missing javac costs only time."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from kvprobe.tlc import run_tlc, tla_dir
from kvprobe.tlc_java import find_java
from kvprobe.tlc_printer import plain_printer
from kvprobe.tlc_values import TlaValue, read_state_graph

#: Two keys, one request, two generations: a graph of some thousand states, with values (``told``)
#: long enough for TLC to break them into lines.
SMALL = "CONSTANTS\n Keys = {k1, k2}\n Reqs = {r1}\n MaxGen = 2\n MaxStuck = 0\n MaxDeaths = 0\nSPECIFICATION Spec\n"

needs_javac = pytest.mark.skipif(
    shutil.which("java") is None or shutil.which("javac") is None, reason="the plain printer needs a JDK"
)


def _graph(tmp_path: Path, name: str, plain: bool) -> tuple[set[str], set[tuple[str, str, str]], str]:
    """The dump's states (as canonical text: ids are fingerprints, which differ between runs), edges, and raw text."""
    cfg = tmp_path / "small.cfg"
    cfg.write_text(SMALL)
    dump = tmp_path / name
    dump_args = ["-dump", "dot,actionlabels", str(dump)]
    result = run_tlc(tla_dir() / "MC.tla", cfg, extra_args=dump_args, coverage=False, plain_values=plain)
    assert result.outcome == "ok", result
    states, edges = read_state_graph(Path(f"{dump}.dot"))
    text = {sid: _canonical(state) for sid, state in states.items()}
    return set(text.values()), {(text[a], action, text[b]) for a, action, b in edges}, Path(f"{dump}.dot").read_text()


def _canonical(value: TlaValue | dict[str, TlaValue]) -> str:
    if isinstance(value, dict):
        return "[" + ",".join(f"{_canonical(k)}:{_canonical(v)}" for k, v in sorted(value.items(), key=repr)) + "]"
    if isinstance(value, frozenset | set):
        return "{" + ",".join(sorted(_canonical(v) for v in value)) + "}"
    if isinstance(value, tuple | list):
        return "<<" + ",".join(_canonical(v) for v in value) + ">>"
    return repr(value)


@needs_javac
@pytest.mark.tlc
def test_the_plain_printer_gives_the_same_graph_without_tlcs_layout(cache: Path, tmp_path: Path) -> None:
    laid_out = _graph(tmp_path, "laid-out", plain=False)
    plain = _graph(tmp_path, "plain", plain=True)
    assert len(laid_out[0]) > 100 and len(laid_out[1]) > len(laid_out[0])
    assert plain[:2] == laid_out[:2]
    # Not vacuous: the printer was used (TLC breaks long values into lines; the plain one never does).
    assert "@@\\n " in laid_out[2] and "@@\\n " not in plain[2]
    assert len(list(cache.glob("tlc-plain-printer-*/tlc2/pprint/PrettyPrint.class"))) == 1


@needs_javac
def test_the_printer_is_compiled_once_and_reused(cache: Path) -> None:
    first = plain_printer(find_java())
    assert first is not None and first.parent == cache
    stamp = (first / "tlc2" / "pprint" / "PrettyPrint.class").stat().st_mtime_ns
    assert plain_printer(find_java()) == first
    assert (first / "tlc2" / "pprint" / "PrettyPrint.class").stat().st_mtime_ns == stamp
    assert [p.name for p in cache.iterdir()] == [first.name], "no compile folder left behind"


def test_without_javac_or_turned_off_there_is_no_printer(
    cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_jdk = tmp_path / "jdk" / "bin"
    fake_jdk.mkdir(parents=True)
    (fake_jdk / "java").write_text("#!/bin/sh\nexit 1\n")
    (fake_jdk / "java").chmod(0o755)
    monkeypatch.setenv("PATH", str(fake_jdk))
    assert plain_printer(str(fake_jdk / "java")) is None
    (fake_jdk / "javac").write_text("#!/bin/sh\nexit 1\n")  # a compiler that fails
    (fake_jdk / "javac").chmod(0o755)
    assert plain_printer(str(fake_jdk / "java")) is None
    assert not cache.exists() or not list(cache.glob("tlc-plain-printer-*")), "a failed compile keeps nothing"
    monkeypatch.setenv("KVPROBE_TLC_PLAIN_PRINTER", "0")
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    assert plain_printer(shutil.which("java") or "java") is None
