"""What docs/ says about the code and the model agrees with them, where a test can read both."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from doc_facts import (
    ROOT,
    default_invariants,
    expected_power,
    model_actions,
    mutant_counts,
    power_table,
    tla_definitions,
    trace_power,
)

import kvprobe
from kvprobe.backends import InMemoryBackend
from kvprobe.spec.replay import replay
from kvprobe.statemachine import AsyncLookupManager
from kvprobe.statemachine.trace import read_ndjson

DOCS = ROOT / "docs"

#: The docs whose links this suite checks (the README's are checked by test_readme.py).
LINKED_DOCS = sorted(path.name for path in DOCS.glob("*.md"))


def test_metrics_doc_lists_exactly_the_failure_kinds_exported() -> None:
    pytest.importorskip("prometheus_client", reason="the metrics extra is not installed")
    from kvprobe.metrics import LookupMetrics

    with AsyncLookupManager(InMemoryBackend([]), name="doc", worker="manual") as m:
        families = list(LookupMetrics(m).collect())
    exported = {s.labels["kind"] for f in families if f.name == "kvprobe_failures" for s in f.samples}
    assert exported, "the collector exports kvprobe_failures_total per kind"
    row = next(
        line for line in (DOCS / "metrics.md").read_text().splitlines() if "`kvprobe_failures_total{kind}`" in line
    )
    documented = set(re.findall(r"`([a-z_]+)`", row.split("|")[3]))
    assert documented == exported


def test_checkers_power_table_counts_the_declared_defects() -> None:
    checkers_md = (DOCS / "checkers.md").read_text()
    assert power_table(checkers_md) == expected_power((DOCS / "performance.md").read_text())
    assert trace_power(checkers_md) == [mutant_counts()["core_named"]]


def test_properties_lists_the_models_actions() -> None:
    text = (DOCS / "properties.md").read_text()
    actions = re.search(r"^## Actions\n(.*?)^## ", text, flags=re.M | re.S)
    assert actions is not None
    defined = tla_definitions((ROOT / "tla" / "KVProbe.tla").read_text())
    named = {name for name in re.findall(r"`(\w+)`", actions.group(1)) if name in defined}
    assert named - set(default_invariants()) == model_actions()


def test_every_action_count_in_the_docs_is_the_models() -> None:
    count = str(len(model_actions() - {"Terminated"}))
    for path in [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]:
        for stated in re.findall(r"\b(\d+) (?:model |TLA\+ )?actions\b", path.read_text()):
            assert stated == count, f"{path.relative_to(ROOT)} says {stated} actions; the model has {count}"


def heading_anchors(markdown: str) -> set[str]:
    """The anchors GitHub gives a page's headings: lower case, punctuation dropped, spaces as hyphens."""
    headings = re.findall(r"^#+ (.*)$", markdown, flags=re.M)
    return {re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-") for heading in headings}


def test_heading_anchors_follow_githubs_rule() -> None:
    page = "## `lookup_chain`'s window schedules, 2026-12-06\n### vLLM 0.33's object tier\n"
    assert heading_anchors(page) == {"lookup_chains-window-schedules-2026-12-06", "vllm-033s-object-tier"}


@pytest.mark.parametrize("name", LINKED_DOCS)
def test_links_resolve(name: str) -> None:
    """Every relative link names a file that exists and, after a #, one of its headings."""
    path = DOCS / name
    for target, anchor in re.findall(r"\]\(([^)#\s]*)(?:#([^)\s]*))?\)", path.read_text()):
        if "://" in target:
            continue
        linked = path if target == "" else path.parent / target
        assert linked.exists(), f"docs/{name} links {target}, which does not exist"
        if anchor and linked.suffix == ".md":
            headings = heading_anchors(linked.read_text())
            assert anchor in headings, f"docs/{name} links {target}#{anchor}: no such heading"


#: docs/ as a whole stays short enough to read and to keep true (words as ``wc -w`` counts them).
DOCS_WORDS = 20_000


def test_the_docs_stay_under_their_word_budget() -> None:
    counts = {path.name: len(path.read_text().split()) for path in DOCS.glob("*.md")}
    largest = sorted(counts.items(), key=lambda item: -item[1])[:3]
    assert sum(counts.values()) < DOCS_WORDS, f"docs/ holds {sum(counts.values())} words; the largest: {largest}"


def test_documented_top_level_imports_are_exported() -> None:
    texts = [ROOT / "README.md", *DOCS.glob("*.md"), *(ROOT / "examples").glob("*.py")]
    used = set()
    for path in texts:
        for names in re.findall(r"^\s*from kvprobe import ([\w, ]+)$", path.read_text(), flags=re.M):
            used |= {n.strip() for n in names.split(",")}
    assert used, "the docs show `from kvprobe import ...`"
    missing = sorted(used - set(kvprobe.__all__))
    assert not missing, f"documented as `from kvprobe import`, not in kvprobe.__all__: {missing}"
    for name in used:
        assert getattr(kvprobe, name) is not None


def test_docs_do_not_cite_the_design_brief() -> None:
    for path in [ROOT / "README.md", *DOCS.glob("*.md"), *(ROOT / "examples").glob("*.py")]:
        assert "DESIGN.md" not in path.read_text(), path


def test_the_trace_recipe_records_a_trace_the_model_replays(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    recipe = re.search(r"### Recording a trace\n.*?```python\n(.*?)```", (DOCS / "checkers.md").read_text(), flags=re.S)
    assert recipe is not None
    monkeypatch.chdir(tmp_path)
    exec(compile(recipe.group(1), "docs/checkers.md trace recipe", "exec"), {"__name__": "recipe"})
    events = read_ndjson((tmp_path / "run.ndjson").read_text().splitlines())
    report = replay(events)
    # How often the loop asks again depends on the worker's timing; every event must replay.
    assert report.events == len(events) >= 9
    assert set(report.by_action) == {
        *("Lookup", "Flush", "TakeBatch", "CallReturned", "CompleteGroup", "Drain", "Cleanup", "Shutdown")
    }
