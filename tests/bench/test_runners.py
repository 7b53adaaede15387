"""The runners' measurements on tiny workloads: what they count must hold whatever the timings are.

No timing is asserted: only counts and answers, which do not depend on the machine.
"""

from __future__ import annotations

import statistics
import subprocess
from pathlib import Path

import pytest

from bench.chains import run as chains
from bench.commits import interleaved, run_probe
from bench.common import Workload
from bench.hotpath import cost as hotpath


def test_hotpath_times_every_lookup_of_the_plan_for_both_managers() -> None:
    workload = Workload(steps=6, arrivals_per_step=2, keys_per_request=16, shared_prefix=8)
    results = hotpath.measure(workload, repeats=2)
    assert list(results) == ["verified", "baseline"]
    lookups = sum(len(r.keys) for _, waiting, _ in workload.schedule() for r in waiting)
    for tallies in results.values():
        assert len(tallies) == 2
        assert all(sum(t.n[c] for c in hotpath.ALL_LOOKUPS) == lookups for t in tallies)
        assert all(t.n["flush"] == 6 for t in tallies)
    assert len(hotpath.time_ratios(results)) == 2
    assert "| **scheduler total** |" in hotpath.report(results)


def test_hotpath_metered_compares_the_metered_manager_with_the_plain_one() -> None:
    pytest.importorskip("prometheus_client", reason="the metrics extra is not installed")
    workload = Workload(steps=4, arrivals_per_step=2, keys_per_request=16, shared_prefix=8)
    results = hotpath.measure(workload, repeats=1, setup=hotpath.metered_vs_plain)
    assert list(results) == ["metered", "plain"]
    assert results["metered"][0].n == results["plain"][0].n
    assert "metered ns/op" in hotpath.report(results)


def test_the_three_chain_walks_look_up_the_same_keys_and_agree() -> None:
    tallies = chains.measure_chains(chains.ChainWorkload(steps=5, max_keys=256), repeats=2)
    for t in tallies:
        assert t.disagreements == 0
        assert t.keys["chain"] == t.keys["per-key"] == t.keys["baseline"] > 0
        assert t.keys["chain"] <= t.keys_asked
    phases = chains.measure_phases(n_keys=64, repeats=3)
    assert set(phases) == set(chains.PHASES)
    assert all(len(by_walk[w]) == 3 for by_walk in phases.values() for w in chains.CONTENDERS)


def test_stopping_at_the_first_miss_probes_fewer_keys_and_every_answer_is_right() -> None:
    outcomes = {e: chains.run_saving(e, chains.SavingScenario(steps=6), capacity=8192) for e in chains.ENGINES}
    for o in outcomes.values():
        assert o.wrong == 0 and o.unanswered == 0 and o.steps_to_answer
    probed = {e: statistics.mean(o.probed_per_step) for e, o in outcomes.items()}
    assert probed["lookup_chain"] == probed["per-key, stop at miss"] < probed["per-key, every key"]


def test_a_probe_that_imports_kvprobe_from_outside_its_checkout_fails(tmp_path: Path) -> None:
    assert run_probe(str(tmp_path), "print('figures')") == "figures\n"
    with pytest.raises(RuntimeError, match="kvprobe imported from outside the checkout"):
        run_probe(str(tmp_path), "import kvprobe.statemachine")


@pytest.mark.parametrize("root_package", ["src/kvprobe", "kvprobe"])
def test_a_probe_imports_kvprobe_subpackages_kept_at_the_top_of_its_checkout(tmp_path: Path, root_package: str) -> None:
    (tmp_path / root_package).mkdir(parents=True)
    (tmp_path / root_package / "__init__.py").write_text("")
    (tmp_path / "statemachine").mkdir()
    (tmp_path / "statemachine" / "__init__.py").write_text("WHERE = 'the checkout'\n")
    assert run_probe(str(tmp_path), "import kvprobe.statemachine as s; print(s.WHERE)") == "the checkout\n"


def test_interleaved_refuses_no_revision_and_a_probe_that_prints_no_figures(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="at least one revision"):
        interleaved([], "HEAD", 1, "print(1)", lambda out: out)
    inside = subprocess.run(["git", "rev-parse", "--is-inside-work-tree"], capture_output=True, check=False)
    if inside.returncode != 0:
        pytest.skip("not a git checkout: bench/ cannot be archived")
    tree = tmp_path / "tree"
    tree.mkdir()
    with pytest.raises(RuntimeError, match=r"on dir:.* printed no figures"):
        interleaved([f"dir:{tree}"], "HEAD", 1, "print('nothing')", lambda out: None)
    got = interleaved([f"dir:{tree}"], "HEAD", 2, "print(41 + 1)", lambda out: int(out))
    assert got == {f"dir:{tree}": [42, 42]}
