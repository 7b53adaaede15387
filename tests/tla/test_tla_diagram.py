"""docs/lifecycle.md is generated from the lifecycle declaration, not drawn by hand."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvprobe.check import diagram_markdown
from kvprobe.spec.lifecycle import RULES, Event, LookupPhase, Rule, Waiters

DOC = Path(__file__).resolve().parents[2] / "docs" / "lifecycle.md"


def test_committed_doc_is_the_generator_output() -> None:
    assert DOC.read_text() == diagram_markdown(), "regenerate with: kvprobe check --diagram > docs/lifecycle.md"


def test_every_rule_is_an_edge_of_the_diagram() -> None:
    text = diagram_markdown()
    mermaid = text.split("```mermaid", 1)[1].split("```", 1)[0]
    edges = [line.strip() for line in mermaid.splitlines() if "-->" in line and "[*]" not in line]
    assert len(edges) == len(RULES)
    assert "    IN_FLIGHT --> ABSENT: MarkMiss [none]" in text
    # The recall from the verdict cache is a row like the others: drawn, tabled, in the dot source.
    assert "ABSENT --> RESOLVED: Lookup [some, cached]" in edges
    assert "| ABSENT | Lookup | some | cached | RESOLVED |" in text
    assert 'ABSENT -> RESOLVED [label="Lookup [some, cached]"];' in text


def test_the_diagram_follows_the_declaration(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = Rule(LookupPhase.RESOLVED, Event.FLUSH, Waiters.SOME, LookupPhase.IN_FLIGHT, "fake")
    monkeypatch.setattr("kvprobe.spec.lifecycle.RULES", (*RULES, fake))
    assert "RESOLVED --> IN_FLIGHT: Flush [some]" in diagram_markdown()
