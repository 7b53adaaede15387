"""The plain-words account of a TLC counterexample (kvprobe.explain).

The golden files hold TLC's counterexample for the mutant stale-result-applied
on tla/default.cfg (recorded from today's model) and its expected account;
if the model's variables or actions change, regenerate both (see
tests/cli/data/README.md) after checking that the new account reads right.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kvprobe.explain import explain
from kvprobe.tlc import Step

DATA = Path(__file__).parent / "data"


def _steps() -> list[Step]:
    return [Step(**raw) for raw in json.loads((DATA / "stale-result-applied.trace.json").read_text())]


def test_golden_stale_result_applied() -> None:
    got = explain(_steps(), "StaleGenerationDropped")
    assert got + "\n" == (DATA / "stale-result-applied.explained.txt").read_text()


def test_the_account_names_actions_with_arguments_and_the_cause() -> None:
    lines = explain(_steps(), "StaleGenerationDropped").splitlines()
    assert "  [2] Lookup: r1 asks for k1 (new probe, generation 1); r1 is answered not known yet for k1" in lines
    assert "  [8] TakeBatch: the worker takes group of r1 [k1 gen 1]" in lines
    assert any(line.startswith("  [9] CompleteGroup: group of r1 [k1 gen 1] answers k1 = hit") for line in lines)
    drain = next(line for line in lines if line.startswith("  [10] Drain:"))
    assert "k1 -> RESOLVED hit (state generation 2)" in drain
    assert lines[-1].startswith("What went wrong (StaleGenerationDropped): the generation-1 result ")
    assert "was applied to generation 2 of k1" in lines[-1]
    # History and bookkeeping variables are left out of the steps.
    hidden = ("applied", "sent", "sentIn", "moot", "nextGen", "told", "stale", "deaths", "out")
    assert not any(line.strip().startswith(tuple(h + ":" for h in hidden)) for line in lines)


def test_a_death_and_the_drain_of_its_marker_read_plainly() -> None:
    group = "[req |-> r1, probes |-> {<<k1, 1>>}]"
    marker = '[grp |-> [req |-> "none", probes |-> {}], kind |-> "died", ans |-> <<>>, late |-> FALSE]'
    state = {"phase": '(k1 :> "IN_FLIGHT")', "gen": "(k1 :> 1)", "verdict": '(k1 :> "none")', "open": f"{{{group}}}"}
    steps = [
        Step(1, "Init", {**state, "resq": "<<>>", "wstate": '"up"'}),
        Step(2, "Die", {**state, "resq": f"<<{marker}>>", "wstate": '"dead"'}),
        Step(3, "Drain", {**state, "phase": '(k1 :> "RESOLVED")', "verdict": '(k1 :> "miss")', "resq": "<<>>"}),
    ]
    lines = explain(steps, "NoSuchInvariant").splitlines()
    assert any(line.startswith("  [2] Die: the worker dies") for line in lines)
    drain = next(line for line in lines if line.startswith("  [3] Drain:"))
    assert "the worker's death marker: every open group fails (group of r1 [k1 gen 1])" in drain
    assert "k1 -> RESOLVED miss (state generation 1)" in drain


def test_unknown_variables_actions_and_properties_are_shown_plainly() -> None:
    steps = [
        Step(1, "Init", {"phase": '(k1 :> "ABSENT")', "shiny": "0"}),
        Step(2, "Teleport", {"phase": '(k1 :> "PENDING")', "shiny": "1"}),
        # A known action whose variables are gone from the model: the plain form, no crash.
        Step(3, "Drain", {"phase": '(k1 :> "PENDING")', "shiny": "<<garbled"}),
        Step(4, "Back to state 2", {}),
    ]
    text = explain(steps, "NoSuchInvariant")
    assert "[2] Teleport (changed: phase, shiny)" in text
    assert "shiny: 1" in text
    assert "[3] Drain (changed: shiny)" in text and "shiny: <<garbled" in text
    assert "then: Back to state 2: the steps from there repeat forever" in text
    assert text.splitlines()[-1] == "What went wrong (NoSuchInvariant): the property NoSuchInvariant does not hold."


def _java() -> bool:
    return shutil.which("java") is not None


@pytest.mark.skipif(not _java(), reason="TLC needs Java")
def test_check_prints_the_account_first_and_tlc_only_with_raw(tmp_path: Path) -> None:
    # Output to a pipe, as in CI: the plain words come first, TLC's own form only with --raw.
    cmd = [sys.executable, "-m", "kvprobe.cli", "check", "--mutant", "double-result"]
    plain = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert plain.returncode == 10, plain.stderr
    assert plain.stdout.startswith("In plain words:\n  [1] Init: the start\n")
    assert "What went wrong (ForcedMissSticks): after MarkMiss on k1 its verdict became hit" in plain.stdout
    assert "Counterexample (" not in plain.stdout
    raw = subprocess.run([*cmd, "--raw"], capture_output=True, text=True, timeout=300)
    assert raw.returncode == 10
    assert raw.stdout.startswith("In plain words:\n")
    assert raw.stdout.index("What went wrong") < raw.stdout.index("Counterexample (") < raw.stdout.index("VIOLATED")
    assert re.search(r"^  1\. Init$", raw.stdout, re.MULTILINE)


def test_a_liveness_lasso_says_which_probe_is_never_reclaimed() -> None:
    # The first three states of the recorded trace end with k1 IN_FLIGHT; a lasso stutters there.
    lasso = [*_steps()[:3], Step(4, "Stuttering", {})]
    lines = explain(lasso, "EventuallyReclaimed").splitlines()
    assert "  then: nothing happens any more, forever (stuttering)" in lines
    assert (
        lines[-1]
        == "What went wrong (EventuallyReclaimed): k1 stays IN_FLIGHT forever: it is never resolved or reclaimed."
    )


def test_the_golden_trace_has_the_models_variables_and_the_tables_know_them() -> None:
    # A golden trace recorded from an older model would keep passing the
    # golden test while the account of today's counterexamples went stale.
    from kvprobe.explain import VARIABLES
    from kvprobe.tlc import tla_dir

    text = (tla_dir() / "KVProbe.tla").read_text()
    block = text[text.index("\nVARIABLES") + len("\nVARIABLES") : text.index("\nsched ==")]
    declared = {m.group(1) for m in re.finditer(r"^\s+(\w+),?\s*(?:\\\*.*)?$", block, re.MULTILINE)}
    assert len(declared) > 15, declared
    assert set(_steps()[0].values) == declared
    assert declared <= set(VARIABLES), declared - set(VARIABLES)


def test_mark_miss_on_a_stateless_key_says_its_remembered_answer_is_forgotten() -> None:
    # tla/cache.cfg: k1 has no state but a remembered "hit"; MarkMiss forgets it.
    state = {"phase": '(k1 :> "NONE")', "gen": "(k1 :> 0)", "verdict": '(k1 :> "none")', "forced": "(k1 :> FALSE)"}
    steps = [
        Step(1, "Init", {**state, "mem": '(k1 :> "hit")'}),
        Step(2, "MarkMiss", {**state, "mem": '(k1 :> "none")'}),
    ]
    step = next(line for line in explain(steps, "NoSuchInvariant").splitlines() if line.startswith("  [2] MarkMiss:"))
    assert "forced MISS on a key with no state; forgot the remembered answer of k1" in step


# --- every property that can fail has its sentence ---------------------------------

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tla"))
from mutant_runs import shared_tlc_runs  # noqa: E402,F401 (a fixture)

from kvprobe.check import EXIT_INVARIANT, EXIT_LIVENESS, main  # noqa: E402
from kvprobe.explain import VIOLATIONS  # noqa: E402
from kvprobe.tlc import tla_dir  # noqa: E402
from kvprobe.tlc_mutants import MUTANTS  # noqa: E402

#: The account's last line: the property and what went wrong.
_LAST_LINE = re.compile(r"^What went wrong \((\w+)\): (.+)\.$", re.MULTILINE)
#: The mutants whose check ends in a counterexample (a reach.cfg mutant removes a witness instead).
COUNTEREXAMPLE_MUTANTS = [m.name for m in MUTANTS if m.config != "reach"]


def _checked_properties() -> set[str]:
    """Every invariant and property some config of tla/ checks (reach.cfg's are witnesses, meant to fail)."""
    names: set[str] = set()
    for cfg in tla_dir().glob("*.cfg"):
        if cfg.name == "reach.cfg":
            continue
        section = ""
        for line in cfg.read_text().splitlines():
            words = line.split("\\*", 1)[0].split()
            if words and words[0].replace("_", "").isupper():  # a section keyword, maybe with its values
                section, words = words[0], words[1:]
            if section in ("INVARIANTS", "INVARIANT", "PROPERTIES", "PROPERTY"):
                names.update(words)
    return names


def test_every_checked_property_has_its_sentence() -> None:
    checked = _checked_properties()
    assert {"TypeOK", "VerdictProvenance", "LookupAnswers", "CacheProvenance", "InferredStored"} <= checked
    assert checked - set(VIOLATIONS) == set(), "add a sentence to kvprobe.explain.VIOLATIONS"


@pytest.mark.skipif(shutil.which("java") is None, reason="TLC needs Java")
@pytest.mark.tlc
@pytest.mark.usefixtures("shared_tlc_runs")
@pytest.mark.parametrize("mutant", COUNTEREXAMPLE_MUTANTS)
def test_every_mutants_account_ends_with_its_sentence(mutant: str, capsys: pytest.CaptureFixture[str]) -> None:
    # The runs are shared with the mutant tests of the same session (tests/tla/mutant_runs.py):
    # not `long`, because make test's first stage runs those tests in the same process, where
    # the 38 accounts cost about 12 CPU s; alone, in test-long, their TLC runs took about 130.
    # A mutant whose config checks a liveness property may be caught by it (positions.cfg).
    code = main(["--quiet", "--workers", "1", "--mutant", mutant])
    assert code in (EXIT_INVARIANT, EXIT_LIVENESS), code
    out = capsys.readouterr().out
    last = _LAST_LINE.findall(out)
    assert len(last) == 1, out
    prop, said = last[0]
    kind = "safety" if code == EXIT_INVARIANT else "liveness"
    assert f"VIOLATED {kind} property {prop}:" in out
    assert not said.endswith("does not hold"), f"{mutant}: no sentence for {prop}: {said}"


def test_a_stale_reclaim_names_the_generation_of_the_state_it_reclaimed() -> None:
    # stale-reclaims-newer: generation 1's outcome reclaims k1's generation-2 state,
    # which leaves k1 with no state (generation 0): the sentence names generation 2.
    before = {
        "stale": False,
        "applied": (0, 0),
        "resq": ({"kind": "ok"},),
        "phase": {"k1": "RESOLVED"},
        "verdict": {"k1": "hit"},
        "gen": {"k1": 2},
    }
    after = {**before, "stale": True, "applied": (1, 0), "resq": (), "phase": {"k1": "ABSENT"}}
    after |= {"verdict": {"k1": "none"}, "gen": {"k1": 0}}
    said = VIOLATIONS["StaleGenerationDropped"]([before, after])
    assert said.startswith("the generation-1 result was applied to generation 2 of k1"), said
