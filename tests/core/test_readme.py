"""The README runs as written, and every number it quotes that a test can read agrees with its source."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys

from doc_facts import ROOT, default_invariants, expected_power, model_actions, mutant_counts, power_table, trace_power

README = (ROOT / "README.md").read_text()
TIMES, EN_DASH = "\u00d7", "\u2013"  # how the docs write 0.82x and 0.93-0.94


def python_blocks(text: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", text, flags=re.S)


def section(text: str, title: str) -> str:
    """The body of the ``## title`` section."""
    found = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", text, flags=re.M | re.S)
    assert found is not None, f"no section '## {title}'"
    return found.group(1)


def test_quickstart_runs() -> None:
    blocks = python_blocks(README)
    assert blocks, "README has no python block"
    quickstart = blocks[0]
    assert len(quickstart.strip().splitlines()) <= 16
    exec(compile(quickstart, "README.md quickstart", "exec"), {"__name__": "readme"})


def test_readme_is_a_landing_page() -> None:
    assert len(README.splitlines()) <= 170, "about 150 lines: details belong in docs/"


def test_readme_commands_are_make_targets_ci_runs() -> None:
    makefile = (ROOT / "Makefile").read_text()
    ci = (ROOT / ".ci" / "run").read_text()
    for target in ("check", "test", "test-long"):
        assert f"make {target}" in README
        assert re.search(rf"^{target}:", makefile, flags=re.M)
    # CI runs both halves of the suite: nothing marked long goes unrun.  A
    # target made only of others may be run as those parts (CI runs
    # test-long's stages and its quiet tests apart, with jobs between them).
    for target in ("test", "test-long"):
        if re.search(rf"^make {target}$", ci, flags=re.M):
            continue
        parts = re.search(rf"^{target}: *([\w -]+)$", makefile, flags=re.M)
        assert parts is not None and "\t" not in makefile[parts.end() : parts.end() + 2], f"CI does not run {target}"
        for part in parts.group(1).split():
            assert re.search(rf"^make {part}( [A-Z0-9_]+=\S*)*$", ci, flags=re.M), f"CI does not run {target}'s {part}"


def test_the_make_test_figure_is_not_more_than_the_suite_holds() -> None:
    # The figure is CI's count on the date quoted; tests may be added since, none lost.
    quoted = re.search(r"`make test` ran (\d[\d,]*) tests in", README)
    assert quoted is not None, "the README quotes make test's count"
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    collected = re.search(r"^(\d+) tests collected", done.stdout, flags=re.M)
    assert collected is not None, done.stdout[-2000:] + done.stderr[-2000:]
    assert int(quoted.group(1).replace(",", "")) <= int(collected.group(1))


def test_power_table_counts_the_declared_defects() -> None:
    assert power_table(README) == expected_power((ROOT / "docs" / "performance.md").read_text())
    assert trace_power(README) == [mutant_counts()["core_named"]]


def test_action_and_invariant_counts_are_the_models() -> None:
    actions = model_actions()
    stated = re.findall(r"(\d+) actions \((\d+) of the scheduler, (\d+) of the worker\) and\s+`Terminated`", README)
    assert len(stated) == 1, "the README states the action count once"
    total, scheduler, worker = map(int, stated[0])
    assert "Terminated" in actions and total == len(actions - {"Terminated"}) == scheduler + worker
    assert re.findall(r"\b(\d+) actions\b", README) == [str(total)]
    invariants = re.findall(r"the \*design\*: (\d+) invariants", README)
    assert invariants == [str(len(default_invariants()))]


def test_performance_ratios_are_those_of_docs_performance() -> None:
    """Each ratio the README quotes is in docs/performance.md, in a section of the date quoted with it."""

    def normal(text: str) -> str:
        return text.replace(TIMES, "x").replace(EN_DASH, "-").replace("*", "")

    sections = re.split(r"^#.*$", normal((ROOT / "docs" / "performance.md").read_text()), flags=re.M)
    ratio = rf"(\d+\.\d+(?:{EN_DASH}\d+\.\d+)?{TIMES}?)"
    # Every ratio between the previous parenthesis and a "(... DATE" is of that date.
    spans = re.findall(r"([^()]*)\([^()]*?(\d{4}-\d\d-\d\d)", section(README, "Performance"))
    quoted = [(figure, date) for text, date in spans for figure in re.findall(ratio, text)]
    assert len(quoted) >= 3, "the README quotes the headline ratios, each with its date"
    for figure, date in quoted:
        assert any(normal(figure) in s and date in s for s in sections), (
            f"README quotes {figure} of {date}; no section of docs/performance.md of that date has it"
        )


def test_quoted_benchmark_commands_exist() -> None:
    modules = set(re.findall(r"python -m\s+(bench(?:\.\w+)+)", README))
    assert modules
    for module in modules:
        assert importlib.util.find_spec(module) is not None, module


def test_links_resolve() -> None:
    for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", README):
        if "://" not in target:
            assert (ROOT / target).exists(), f"README links {target}, which does not exist"


def _contract_block() -> str:
    found = re.search(r"```\n(.*?)```", section(README, "The contract in brief"), flags=re.S)
    assert found is not None, "the contract section has no code block"
    return found.group(1)


def test_the_contract_block_shows_every_constructor_option_with_its_default() -> None:
    import ast
    import inspect

    from kvprobe import AsyncLookupManager

    block = _contract_block()
    call = block[block.index("AsyncLookupManager(backend") : block.index("m.lookup(")]
    code = "\n".join(line.split("#", 1)[0] for line in call.splitlines())  # comments aside
    shown = dict(re.findall(r"(\w+)=([^,)\s]+)", code))
    options = {
        name: param.default
        for name, param in inspect.signature(AsyncLookupManager.__init__).parameters.items()
        if param.kind is inspect.Parameter.KEYWORD_ONLY
    }
    assert set(shown) == set(options), f"missing: {set(options) - set(shown)}; unknown: {set(shown) - set(options)}"
    for name, default in options.items():
        assert ast.literal_eval(shown[name]) == default, (name, shown[name], default)


def test_the_contract_block_shows_lookup_chain_with_its_own_arguments() -> None:
    import inspect

    from kvprobe import AsyncLookupManager

    line = next(line for line in _contract_block().splitlines() if line.startswith("m.lookup_chain("))
    call = line.split("->", 1)[0]
    shown = re.findall(r"(\w+)", call.split("(", 1)[1])
    assert shown == [p for p in inspect.signature(AsyncLookupManager.lookup_chain).parameters if p != "self"]
    # The chain options belong to the constructor: the line must not read as if lookup_chain took them.
    assert not re.search(r"\bchain_\w+=", line), line
