"""The numbers the README and docs/ quote, read from where they come from.

Shared by tests/core/test_readme.py and tests/core/test_docs.py: each quoted
figure is compared with the declaration it counts (the mutant lists, the
lying tiers, the model's actions and invariants), so a doc that drifts from
the code fails a test.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TLA = ROOT / "tla"


def _literal(path: Path, name: str) -> ast.expr:
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            targets, value = [node.target], node.value
        else:
            continue
        if any(isinstance(t, ast.Name) and t.id == name for t in targets):
            if isinstance(value, (ast.Dict, ast.List, ast.Tuple, ast.Set)):
                return value
    raise LookupError(f"{path.relative_to(ROOT)} assigns no literal collection to {name}")


def literal_size(path: Path, name: str) -> int:
    """How many entries the literal dict, list, tuple or set assigned to ``name`` in ``path`` has.

    Read from the source (nothing is imported), so test modules can be counted too.

    Raises:
        LookupError: ``path`` assigns no such literal to ``name``.
    """
    value = _literal(path, name)
    return len(value.keys) if isinstance(value, ast.Dict) else len(value.elts)  # type: ignore[attr-defined]


def literal_keys(path: Path, name: str) -> list[str]:
    """The string keys of the literal dict assigned to ``name`` in ``path``, in order.

    Raises:
        LookupError: ``path`` assigns no literal dict with string keys to ``name``.
    """
    value = _literal(path, name)
    keys = [k.value for k in value.keys if isinstance(k, ast.Constant)] if isinstance(value, ast.Dict) else []
    if not keys or not all(isinstance(k, str) for k in keys):
        raise LookupError(f"{path.relative_to(ROOT)}: {name} is not a dict with string keys")
    return keys


LYING_TIERS = ROOT / "tests" / "conform" / "lying_tiers.py"


def mutant_counts() -> dict[str, int]:
    """The defects each checker must catch, counted from their declarations."""
    from kvprobe.tlc_mutants import MUTANTS

    return {
        "tlc_named": sum(m.kind == "named" for m in MUTANTS),
        "tlc_spec": sum(m.kind == "spec" for m in MUTANTS),
        "tlc_chain": sum(m.kind == "chain" for m in MUTANTS),
        "tlc_cache": sum(m.kind == "cache" for m in MUTANTS),
        "core_named": literal_size(ROOT / "tests" / "mutants" / "mutant_cores.py", "MUTANTS"),
        "core_worker_rule": literal_size(ROOT / "tests" / "mutants" / "test_worker_rule_mutants.py", "MUTANTS"),
        "core_chain": literal_size(ROOT / "tests" / "core" / "test_chain_mutants.py", "MUTANTS")
        + literal_size(ROOT / "tests" / "core" / "test_chain_inferred_mutants.py", "MUTANTS"),
        "core_cache": literal_size(ROOT / "tests" / "mutants" / "test_cache_mutants.py", "MUTANTS"),
        "lying_tiers": literal_size(LYING_TIERS, "LYING_TIERS"),
    }


def tla_definitions(text: str) -> dict[str, str]:
    """Operator name -> its body, for every definition that starts a line (comments removed)."""
    text = re.sub(r"\(\*.*?\*\)", "", text, flags=re.S)
    text = re.sub(r"\\\*.*", "", text)
    text = re.sub(r"^-{4,}.*$", "", text, flags=re.M)
    heads = list(re.finditer(r"^([A-Za-z]\w*)(\([^)]*\))?\s*==", text, flags=re.M))
    ends = [h.start() for h in heads[1:]] + [len(text)]
    return {h.group(1): text[h.end() : end] for h, end in zip(heads, ends, strict=True)}


def _leaves(definitions: dict[str, str], name: str) -> set[str]:
    """The actions ``name`` is a disjunction of, expanded down to single actions.

    A definition whose body is two or more disjuncts, each an operator (maybe
    under ``\\E ... :`` and with arguments), is a union; anything else is an
    action (TLC names each step by such an operator).
    """
    disjuncts = [d.strip() for d in definitions[name].split("\\/") if d.strip()]
    parts = [re.sub(r"^(\\E[^:]*:\s*)+", "", d) for d in disjuncts]
    operators = [re.fullmatch(r"([A-Za-z]\w*)(\(.*\))?", p, flags=re.S) for p in parts]
    if len(parts) < 2 or any(m is None or m.group(1) not in definitions for m in operators):
        return {name}
    return set().union(*(_leaves(definitions, m.group(1)) for m in operators if m is not None))


def model_actions() -> set[str]:
    """The actions of the TLA+ model's next-state relation ``Next`` (tla/KVProbe.tla)."""
    return _leaves(tla_definitions((TLA / "KVProbe.tla").read_text()), "Next")


def default_invariants() -> list[str]:
    """The invariants tla/default.cfg checks (its INVARIANTS block)."""
    lines = (TLA / "default.cfg").read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip() == "INVARIANTS")
    names = []
    for line in lines[start + 1 :]:
        if not line.startswith((" ", "\t")) or not line.strip():
            break
        names.append(line.strip())
    return names


def power_table(text: str) -> dict[str, tuple[list[int], list[int]]]:
    """The checkers' power table of a Markdown text: checker -> (numbers it must catch, numbers caught).

    The table is the one whose header has the columns "defects it must
    catch" and "caught"; a checker is named by the first word of its cell
    (``tlc``, ``hypothesis``, ``kvprobe``).

    Raises:
        LookupError: ``text`` has no such table.
    """
    lines = text.splitlines()
    for i, line in enumerate(lines):
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if "defects it must catch" in cells and "caught" in cells:
            must, caught = cells.index("defects it must catch"), cells.index("caught")
            rows = {}
            for row in lines[i + 2 :]:
                if not row.startswith("|"):
                    break
                values = [c.strip() for c in row.strip().strip("|").split("|")]
                checker = re.sub(r"[*`]", "", values[0]).split()[0].lower()
                numbers = [
                    [int(n.replace(",", "")) for n in re.findall(r"\d[\d,]*", values[k])] for k in (must, caught)
                ]
                rows[checker] = (numbers[0], numbers[1])
            return rows
    raise LookupError("no table with the columns 'defects it must catch' and 'caught'")


def conform_seeds(performance_md: str) -> tuple[int, int, int, int]:
    """From docs/performance.md's conform table: (seeds failed, seeds) per lying tier, then the honest tier's.

    Every lying tier of tests/conform/lying_tiers.py must have a row, and all
    of them the same fraction (the README quotes one).

    Raises:
        AssertionError: a tier is missing or extra, or the rows differ.
    """
    table = performance_md.split("<!-- data: conform-power-", 1)[1].split("\n\n", 2)[1]  # after the provenance
    rows = dict(re.findall(r"^\| ([a-z][a-z -]*?(?: \(control\))?) \| [^|]+ \| (\d+/\d+) \|", table, flags=re.M))
    honest = rows.pop("honest (control)")
    assert sorted(rows) == sorted(literal_keys(LYING_TIERS, "LYING_TIERS")), rows
    fractions = set(rows.values())
    assert len(fractions) == 1, f"the lying tiers were not all caught as often: {rows}"
    failed, seeds = map(int, fractions.pop().split("/"))
    honest_failed, honest_seeds = map(int, honest.split("/"))
    return failed, seeds, honest_failed, honest_seeds


def trace_power(text: str) -> list[int]:
    """How many named mutant cores a text says trace validation rejects ("all N named mutant cores")."""
    return [int(n) for n in re.findall(r"all (\d+)\s+named\s+mutant\s+cores", text)]


def expected_power(performance_md: str) -> dict[str, tuple[list[int], list[int]]]:
    """The power table's numbers as the declarations and the measured conform table give them."""
    n = mutant_counts()
    tlc = n["tlc_named"] + n["tlc_spec"] + n["tlc_chain"] + n["tlc_cache"]
    cores = n["core_named"] + n["core_worker_rule"] + n["core_chain"] + n["core_cache"]
    tiers = n["lying_tiers"]
    return {
        "tlc": ([tlc, n["tlc_named"], n["tlc_spec"], n["tlc_chain"], n["tlc_cache"]], [tlc, tlc]),
        "hypothesis": (
            [cores, n["core_named"], n["core_worker_rule"], n["core_chain"], n["core_cache"]],
            [cores, cores],
        ),
        "kvprobe": ([tiers], [tiers, tiers, *conform_seeds(performance_md)]),
    }
