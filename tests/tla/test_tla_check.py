"""``kvprobe check``: the default model passes, every mutant and the reachability config fail as intended."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
from mutant_runs import mutant_run, shared_tlc_runs  # noqa: F401 (a fixture)

import kvprobe.tlc_java
from kvprobe import check, check_report
from kvprobe.check import (
    EXIT_CHECKER_MISSING,
    EXIT_DEADLOCK,
    EXIT_INVARIANT,
    EXIT_LIVENESS,
    EXIT_OK,
    EXIT_SPEC_ERROR,
    EXIT_USAGE,
    main,
)
from kvprobe.spec.actions import ACTIONS
from kvprobe.tlc import TlcResult, config_directives, liveness_args, parse_value, run_tlc, tla_dir
from kvprobe.tlc_mutants import MUTANT_NAMES, find_mutant, mutant_config, root_module

#: The named mutants (the field's defects), in kvprobe.tlc_mutants' order.
MUTANTS = MUTANT_NAMES["named"]

ROOT = Path(__file__).resolve().parents[2]

#: The property TLC reports first for each mutant on tla/default.cfg
#: (breadth-first, so the shortest counterexample wins).
CAUGHT_BY = {
    "flush-submits-cleaned": "EnqueueOnce",
    "cleanup-drops-in-flight": "NoDuplicateProbe",
    "stale-result-applied": "StaleGenerationDropped",
    "double-result": "ForcedMissSticks",
    "worker-error-drops-batch": "NothingLeaks",
    "orphan-never-reclaimed": "NothingLeaks",
    "mark-miss-in-flight-unguarded": "VerdictIffResolved",
}


#: Spec-level mutants written to measure the invariants (plausible one-line
#: slips in an action; docs/properties.md says what each changes), and the
#: clause that must catch each on tla/default.cfg.
SPEC_CAUGHT_BY = {
    "fail-resolves-hit": "VerdictProvenance",
    "verdict-from-other-key": "VerdictProvenance",
    "flush-ignores-gen": "EnqueueOnce",
    "flush-submits-forced": "EnqueueOnce",
    "lookup-rejoins-batch": "EnqueueOnce",
    "lookup-skips-drain": "LookupAnswers",
    "stale-reclaims-newer": "StaleGenerationDropped",
    "flush-while-dead": "NothingLeaks",
    "death-forgets-open": "NothingLeaks",
    "lookup-after-shutdown": "AfterShutdownEmpty",
    "cleanup-keeps-reverse-index": "ReverseIndexConsistent",
    "saturate-publishes-nothing": "NothingLeaks",
    # Outputs and verdicts pinned to what happened elsewhere (issues 26, 29, 25).
    "lookup-answers-pending-miss": "LookupReturnsVerdict",
    "saturate-answers-stored": "VerdictFromBackend",
    "stale-answer-applied": "StaleGenerationDropped",
    "mark-miss-skips-unresolved": "ForcedMissSticks",
    "mark-miss-forces-unresolved": "VerdictProvenance",  # on tla/vllm.cfg
    "worker-holds-until-idle": "NeverAppliedBesideRunning",  # on tla/reach.cfg: the witness is gone
    # Positioned lookups (issue 38), on tla/positions.cfg.
    "position-probes-past-miss": "PositionsStopAtMiss",
    "position-window-never-opens": "DeferredServed",  # a liveness property
}

#: The spec mutants caught by a liveness property (a lasso, not a finite trace).
LIVENESS_CAUGHT = {"position-window-never-opens"}


def test_mutant_names_match_the_tables_and_the_docs() -> None:
    assert set(MUTANT_NAMES["spec"]) == set(SPEC_CAUGHT_BY)
    doc = (ROOT / "docs" / "properties.md").read_text()
    assert set(re.findall(r"^\| `([a-z]+(?:-[a-z]+)+)` \|", doc, re.MULTILINE)) == set(MUTANTS) | set(SPEC_CAUGHT_BY)
    assert set(CAUGHT_BY) == set(MUTANTS)
    for mutant, clause in {**CAUGHT_BY, **SPEC_CAUGHT_BY}.items():
        assert re.search(rf"^\| `{mutant}` \|.*\| `{clause}`", doc, re.MULTILINE), (mutant, clause)


def test_invariant_names_match_the_docs() -> None:
    doc = (ROOT / "docs" / "properties.md").read_text()
    documented = set(re.findall(r"^\| `(\w+)`", doc, re.MULTILINE)) - set(MUTANTS) - set(SPEC_CAUGHT_BY)
    model = (tla_dir() / "KVProbe.tla").read_text()
    defined = set(re.findall(r"^(\w+) ==", model, re.MULTILINE))
    assert documented <= defined, documented - defined
    checked = set()
    for name in ("default", "liveness2"):
        checked |= set(re.findall(r"^\s+(\w+)\s*$", (tla_dir() / f"{name}.cfg").read_text(), re.MULTILINE))
    assert documented <= checked, "default.cfg and liveness2.cfg check every property"


def _cfg_value(name: str, constant: str) -> str:
    found = re.search(rf"^\s+{constant} = (.*)$", (tla_dir() / f"{name}.cfg").read_text(), re.MULTILINE)
    assert found is not None, (name, constant)
    return found.group(1).strip()


@pytest.mark.parametrize("name", ["default", "liveness2", "liveness-ci", "deadlock"])
def test_configs_explore_two_keys_and_two_requests(name: str) -> None:
    assert _cfg_value(name, "Keys") == "{k1, k2}"
    assert _cfg_value(name, "Reqs") == "{r1, r2}"
    assert int(_cfg_value(name, "MaxGen")) >= 2
    text = (tla_dir() / f"{name}.cfg").read_text()
    # Symmetry is unsound for liveness: never both in one config.
    assert not ("SYMMETRY" in text and "PROPERTIES" in text), name


def test_next_state_relation_has_multi_key_mark_miss() -> None:
    model = (tla_dir() / "KVProbe.tla").read_text()
    assert re.search(r"\\E ks \\in SUBSET Keys : MarkMiss\(ks\)", model)


def test_list_names_configs_and_mutants(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--list"]) == EXIT_OK
    out = capsys.readouterr().out
    for name in ("default", "reach", "keys2", "deep", "liveness", *MUTANTS):
        assert re.search(rf"^\s+{re.escape(name)}\b", out, re.MULTILINE), name


def test_help_documents_the_exit_codes(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stop:
        main(["--help"])
    assert stop.value.code == 0
    out = capsys.readouterr().out
    for code in (EXIT_OK, EXIT_INVARIANT, EXIT_LIVENESS, EXIT_DEADLOCK, EXIT_SPEC_ERROR, EXIT_CHECKER_MISSING):
        assert re.search(rf"^\s+{code}\s+\w", out, re.MULTILINE), code


def test_usage_errors(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--mutant", "no-such-mutant"]) == EXIT_USAGE
    assert main(["--config", "no-such-config"]) == EXIT_USAGE
    assert main(["--workers", "0"]) == EXIT_USAGE
    assert "no-such-mutant" in capsys.readouterr().err


def test_java_missing_is_reported_with_the_package(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.delenv("JAVA_HOME", raising=False)
    assert main(["--quiet"]) == EXIT_CHECKER_MISSING
    assert "openjdk-17-jre-headless" in capsys.readouterr().err


def test_tampered_jar_is_refused(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(kvprobe.tlc_java, "TLA2TOOLS_SHA256", "0" * 64)
    assert main(["--quiet"]) == EXIT_CHECKER_MISSING
    assert "sha256" in capsys.readouterr().err


@pytest.fixture
def scratch_tla(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of tla/ that kvprobe check uses (through $KVPROBE_TLA_DIR)."""
    folder = tmp_path / "tla"
    shutil.copytree(tla_dir(), folder)
    monkeypatch.setenv("KVPROBE_TLA_DIR", str(folder))
    return folder


@pytest.mark.tlc
def test_spec_error_is_its_own_exit_code(scratch_tla: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (scratch_tla / "broken.cfg").write_text(
        "CONSTANTS\n Keys = {k1}\n Reqs = {r1}\n MaxGen = 1\n MaxStuck = 1\n MaxDeaths = 0\n"
        "SPECIFICATION Spec\nINVARIANT NoSuchThing\n"
    )
    assert main(["--quiet", "--config", "broken"]) == EXIT_SPEC_ERROR
    assert "SPEC ERROR" in capsys.readouterr().out


@pytest.mark.tlc
@pytest.mark.long
def test_deadlock_config_passes_and_its_end_is_the_bound(scratch_tla: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Without Shutdown and Die, the only end allowed is BoundReached...
    assert main(["--quiet", "--config", "deadlock"]) == EXIT_OK
    # ... and that end is reached: without it, TLC reports a deadlock there.
    text = (scratch_tla / "deadlock.cfg").read_text().replace("NEXT LiveNext", "NEXT LiveSteps")
    (scratch_tla / "nobound.cfg").write_text(text)
    assert main(["--quiet", "--config", "nobound"]) == EXIT_DEADLOCK
    out = capsys.readouterr().out
    assert "DEADLOCK" in out


@pytest.mark.tlc
def test_deadlock_is_its_own_exit_code(scratch_tla: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Without the final stutter, the state after Shutdown has no successor.
    (scratch_tla / "stuck.cfg").write_text(
        "CONSTANTS\n Keys = {k1}\n Reqs = {r1}\n MaxGen = 1\n MaxStuck = 1\n MaxDeaths = 0\n"
        "INIT Init\nNEXT SchedulerNext\n"
    )
    assert main(["--quiet", "--config", "stuck"]) == EXIT_DEADLOCK
    out = capsys.readouterr().out
    assert "DEADLOCK" in out
    assert "Shutdown" in out


@pytest.mark.tlc
def test_default_config_passes_and_reports_its_state_count(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--quiet"]) == EXIT_OK
    out = capsys.readouterr().out
    summary = re.search(r"OK, no violation: (\d+) states generated, (\d+) distinct states", out)
    assert summary is not None, out
    assert int(summary.group(2)) > 100_000
    # The coverage line: every action of Next fires on the default bounds.
    coverage = re.search(r"^coverage: (.*)$", out, re.MULTILINE)
    assert coverage is not None, out
    for action in ACTIONS:
        assert re.search(rf"\b{action} \d+", coverage.group(1)), action
    assert coverage.group(1).endswith("every action fired")


@pytest.mark.tlc
@pytest.mark.usefixtures("shared_tlc_runs")
@pytest.mark.parametrize("mutant", MUTANTS)
def test_every_mutant_is_caught_with_a_trace(mutant: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--quiet", "--mutant", mutant]) == EXIT_INVARIANT
    out = capsys.readouterr().out
    assert f"VIOLATED safety property {CAUGHT_BY[mutant]}" in out
    # The counterexample in plain words, one numbered line per state, and what went wrong.
    steps = re.findall(r"^  \[(\d+)\] (\w+)", out, re.MULTILINE)
    assert [int(n) for n, _ in steps] == list(range(1, len(steps) + 1))
    assert steps[0][1] == "Init" and len(steps) >= 3
    assert f"What went wrong ({CAUGHT_BY[mutant]}): " in out


#: EnqueueOnce has three clauses; the one meant for each mutant must be the
#: one the last state of the counterexample breaks: (history variable, a
#: value it holds there that the clause forbids).
ENQUEUE_ONCE_CLAUSE = {
    "flush-submits-cleaned": ("sentIn", "ABSENT"),  # submitted after it was reclaimed
    "flush-ignores-gen": ("sentIn", "ABSENT"),
    "flush-submits-forced": ("sentIn", "RESOLVED"),  # submitted after it was forced to MISS
    "lookup-rejoins-batch": ("sent", 2),  # submitted twice
}


@pytest.mark.tlc
@pytest.mark.parametrize("mutant", [*sorted(SPEC_CAUGHT_BY), "flush-submits-cleaned"])
def test_every_spec_mutant_is_caught_by_its_clause(mutant: str) -> None:
    expected = SPEC_CAUGHT_BY.get(mutant) or CAUGHT_BY[mutant]
    result = mutant_run(mutant, expected)
    if find_mutant(mutant).config == "reach":
        # The mutant only removes behaviours: the witness TLC finds on the model is gone.
        assert (result.outcome, result.property) == ("ok", None), (result.outcome, result.property, result.errors)
        return
    if mutant in LIVENESS_CAUGHT:
        assert result.outcome == "liveness" and result.property in (None, expected), (result.outcome, result.errors)
        assert result.trace[0].action == "Init" and len(result.trace) >= 3
        return
    assert (result.outcome, result.property) == ("invariant", expected), result.errors
    assert result.trace[0].action == "Init" and len(result.trace) >= 3
    if mutant in ENQUEUE_ONCE_CLAUSE:
        variable, forbidden = ENQUEUE_ONCE_CLAUSE[mutant]
        last = parse_value(result.trace[-1].values[variable])
        assert isinstance(last, tuple) and forbidden in last, (variable, last)


#: How the plain-words account ends a lasso-shaped (liveness) counterexample.
LASSO = re.compile(r"^  then: (nothing happens any more, forever|Back to state \d+)", re.MULTILINE)


@pytest.mark.tlc
def test_lost_failure_is_a_liveness_violation(capsys: pytest.CaptureFixture[str]) -> None:
    # With NothingLeaks left out (liveness.cfg), the lost group is caught by liveness.
    assert main(["--quiet", "--config", "liveness"]) == EXIT_OK
    assert main(["--quiet", "--config", "liveness", "--mutant", "worker-error-drops-batch"]) == EXIT_LIVENESS
    out = capsys.readouterr().out
    assert "VIOLATED liveness property EventuallyReclaimed" in out
    assert LASSO.search(out), out


@pytest.mark.tlc
@pytest.mark.long
def test_liveness_on_two_keys_and_two_requests_holds() -> None:
    # liveness-ci.cfg: 2 keys x 2 requests, 2 generations, no timeout, no death.
    assert main(["--quiet", "--config", "liveness-ci"]) == EXIT_OK


@pytest.mark.tlc
@pytest.mark.long
@pytest.mark.parametrize(
    "config",
    [
        # 2 stuck calls and 2 deaths on default's keys and requests (about a minute)
        "keys2",
        # EventuallyReclaimed with a timeout, saturation and a death on 2 x 2 (about 10 minutes)
        "liveness2",
    ],
)
@pytest.mark.timeout(2400)  # liveness2: about 10 CPU minutes of TLC, longer beside other stages
def test_the_wider_configs_hold(config: str, capsys: pytest.CaptureFixture[str]) -> None:
    # Every config runs in some CI stage: these two in the long tests.  One
    # worker: CI runs them beside other jobs on both cores, where a second
    # TLC worker buys no time and costs CPU (liveness2: 545 to 589 CPU s on
    # one worker, 708 on two, measured alone).
    assert main(["--quiet", "--workers", "1", "--config", config]) == EXIT_OK
    out = capsys.readouterr().out
    assert f"kvprobe check {config} (mutant none): OK, no violation" in out
    # Not vacuous: every action of the model takes a step (keys2's 2
    # generations leave Saturate no group beside its 2 stuck calls).
    coverage = re.search(r"^coverage: (.*)$", out, re.MULTILINE)
    assert coverage is not None, out
    fired = "never fired: Saturate" if config == "keys2" else "every action fired"
    assert coverage.group(1).endswith(fired), coverage.group(1)


#: Every config of tla/ and the test (module, function or fixture) that runs
#: TLC on it (issue 41: no config runs nowhere); default.cfg is what
#: ``kvprobe check`` runs without ``--config``.
CONFIG_TESTS = {
    "default": ("test_tla_check.py", "test_default_config_passes_and_reports_its_state_count"),
    "deadlock": ("test_tla_check.py", "test_deadlock_config_passes_and_its_end_is_the_bound"),
    "deep": ("test_tla_check.py", "test_deep_simulation_runs_and_catches_a_mutant"),
    "keys2": ("test_tla_check.py", "test_the_wider_configs_hold"),
    "liveness": ("test_tla_check.py", "test_lost_failure_is_a_liveness_violation"),
    "liveness-ci": ("test_tla_check.py", "test_liveness_on_two_keys_and_two_requests_holds"),
    "liveness2": ("test_tla_check.py", "test_the_wider_configs_hold"),
    "reach": ("test_tla_check.py", "test_reachability_witnesses_exist"),
    "vllm": ("conftest.py", "vllm_graph"),
    "cache": ("test_tla_cache.py", "test_the_cache_config_passes_and_serves_from_memory"),
    "chain": ("test_tla_chain.py", "test_the_chain_configs_pass"),
    "chain-window": ("test_tla_chain.py", "test_the_chain_configs_pass"),
    "chain-inferred": ("test_tla_chain.py", "test_the_chain_configs_pass"),
    "chain-inferred-holes": ("test_tla_chain.py", "test_a_store_with_holes_breaks_the_inferred_walk"),
    "chain-cache": ("test_tla_chain.py", "test_each_walk_with_the_cache_passes_and_serves_from_memory"),
    "inferred-cache": ("test_tla_chain.py", "test_each_walk_with_the_cache_passes_and_serves_from_memory"),
    "positions": ("test_tla_positions.py", "test_the_positions_config_passes_and_defers"),
    "positions-inferred": ("test_tla_positions.py", "test_the_positions_config_passes_and_defers"),
}


def test_every_config_is_run_by_a_test() -> None:
    from test_tla_chain import COMBINED, CONFIGS

    here = Path(__file__).parent
    assert {cfg.stem for cfg in tla_dir().glob("*.cfg")} == set(CONFIG_TESTS)
    for config, (module, function) in CONFIG_TESTS.items():
        text = (here / module).read_text()
        start = text.index(f"def {function}(")
        end = min(
            (text.find(mark, start + 1) for mark in ("\ndef ", "\n@") if text.find(mark, start + 1) > 0),
            default=len(text),
        )
        # The function with its decorators (a parametrized config is named there).
        body = text[max(0, text.rfind("\n\n\n", 0, start)) : end]
        if config == "default":
            assert 'main(["--quiet"])' in body, function
        elif function == "test_the_chain_configs_pass":
            assert config in CONFIGS.values() and "sorted(set(CONFIGS.values()))" in body, config
        elif function == "test_each_walk_with_the_cache_passes_and_serves_from_memory":
            assert config in COMBINED and "COMBINED" in body, config
        else:
            assert f'"{config}' in body or f"{config}.cfg" in body, (config, function)


@pytest.mark.tlc
@pytest.mark.long
@pytest.mark.parametrize(
    ("mutant", "leak"),
    [
        # a failed group publishes nothing: its probe stays IN_FLIGHT for ever
        ("worker-error-drops-batch", "stays IN_FLIGHT forever"),
        # a result nobody waits on resolves instead of reclaiming: the table never empties
        ("orphan-never-reclaimed", "without the table emptying"),
    ],
)
def test_liveness_on_two_keys_catches_a_state_leaked_for_ever(
    mutant: str, leak: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["--quiet", "--config", "liveness-ci", "--mutant", mutant]) == EXIT_LIVENESS
    out = capsys.readouterr().out
    assert "VIOLATED liveness property EventuallyReclaimed" in out
    assert leak in out
    assert LASSO.search(out), out


@pytest.mark.tlc
@pytest.mark.long
def test_reachability_witnesses_exist(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--quiet", "--config", "reach"]) == EXIT_OK
    out = capsys.readouterr().out
    reached = re.findall(r"^reached: (\w+) is violated", out, re.MULTILINE)
    assert reached == check._properties((tla_dir() / "reach.cfg").read_text())
    assert len(reached) == 14


def test_deep_config_is_a_bounded_simulation() -> None:
    args, props = config_directives((tla_dir() / "deep.cfg").read_text())
    assert args[0] == "-simulate" and "-depth" in args and "-seed" in args
    assert props == ["-Dtlc2.TLC.stopAfter=540"]  # under 10 minutes
    with pytest.raises(ValueError, match="tlc-args"):
        config_directives("\\* kvprobe: tlc-args -deadlock\n")
    # A count of behaviours, only right after -simulate.
    assert config_directives("\\* kvprobe: tlc-args -simulate num=40 -seed 3\n")[0] == [
        "-simulate",
        "num=40",
        "-seed",
        "3",
    ]
    for bad in ("-seed num=40", "-simulate num=0", "-simulate num=x", "num=40"):
        with pytest.raises(ValueError, match="tlc-args"):
            config_directives(f"\\* kvprobe: tlc-args {bad}\n")


def test_model_checking_runs_check_liveness_once_at_the_end() -> None:
    assert liveness_args([]) == ["-lncheck", "final"]
    assert liveness_args(["-dump", "dot", "graph"]) == ["-lncheck", "final"]
    assert liveness_args(config_directives((tla_dir() / "deep.cfg").read_text())[0]) == []


@pytest.mark.parametrize(
    ("argv", "counted"),
    [
        ([], True),
        (["--no-coverage"], False),
        (["--mutant", "double-result"], False),
        (["--config", "reach"], False),
        (["--config", "liveness2", "--no-coverage"], False),
    ],
)
def test_tlc_counts_actions_only_for_a_plain_checks_report(
    argv: list[str], counted: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    # TLC's coverage costs CPU; only an OK report of a plain check prints it.
    asked: list[bool] = []

    def fake_run_tlc(spec: Path, config: Path, **options: object) -> TlcResult:
        asked.append(bool(options["coverage"]))
        return TlcResult(outcome="ok", exit_code=0, seconds=0.0)

    monkeypatch.setattr(check_report, "run_tlc", fake_run_tlc)
    main(["--quiet", *argv])
    assert asked and set(asked) == {counted}


@pytest.mark.tlc
@pytest.mark.long
@pytest.mark.parametrize(("mutant", "outcome"), [("none", "ok"), ("fail-resolves-hit", "invariant")])
def test_deep_simulation_runs_and_catches_a_mutant(mutant: str, outcome: str, tmp_path: Path) -> None:
    # A count of behaviours, not seconds: with its seed a simulation is the same run everywhere, so
    # the mutant is caught on a loaded machine too (15 s missed it in CI beside liveness2; its
    # violation is in behaviour 241 to 250, so 500 leaves twice that).
    behaviours = 250 if mutant == "none" else 500
    text = (tla_dir() / "deep.cfg").read_text().replace("stop-after 540", "stop-after 600")
    text = text.replace("tlc-args -simulate ", f"tlc-args -simulate num={behaviours} ")
    assert f"-simulate num={behaviours} " in text, "deep.cfg's simulate directive changed"
    cfg = tmp_path / "deep.cfg"
    cfg.write_text(text if mutant == "none" else mutant_config(text, mutant))
    result = run_tlc(tla_dir() / root_module(None if mutant == "none" else mutant), cfg)
    assert result.outcome == outcome, result.errors
    if outcome == "ok":
        assert result.generated is not None and result.generated > 1000
