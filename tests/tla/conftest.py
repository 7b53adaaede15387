"""Fixtures for the TLA+ tests: TLC runs are shared across tests of a session."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from model_replay_graph import read_graph

from kvprobe.tlc import run_tlc, tla_dir

INVARIANTS_ONLY_MARK = "PROPERTIES"

#: The marker of the replays of the full default graph (minutes): they run only when selected.
DEEP_REPLAY = "deep_replay"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip (visibly, with the command that runs them) the deep replays unless ``-m`` selects them."""
    selection = str(config.getoption("markexpr") or "")
    if DEEP_REPLAY in selection and f"not {DEEP_REPLAY}" not in selection:
        return
    skip = pytest.mark.skip(
        reason=f"full-graph replay (minutes): run `pytest tests/tla/test_model_replay.py -m {DEEP_REPLAY}`"
    )
    for item in items:
        if DEEP_REPLAY in item.keywords:
            item.add_marker(skip)


def safety_only(cfg_text: str) -> str:
    """A config text without its PROPERTIES section (no liveness: faster, same graph)."""
    lines = cfg_text.splitlines()
    if INVARIANTS_ONLY_MARK in cfg_text:
        lines = lines[: next(i for i, line in enumerate(lines) if line.strip().startswith(INVARIANTS_ONLY_MARK))]
    return "\n".join(lines) + "\n"


Graph = tuple[dict[str, dict[str, object]], list[tuple[str, str, str]]]


def _without_symmetry(text: str) -> str:
    return "\n".join(line for line in text.splitlines() if not line.startswith("SYMMETRY")) + "\n"


def graph_config(cfg_text: str) -> str:
    """default.cfg with one key and without symmetry, for a state graph Python can read.

    Per-key phase transitions need one key only; symmetry would leave edges
    to states TLC never stores (it keeps one state per symmetry class).
    """
    return _without_symmetry(re.sub(r"Keys = \{[^}]*\}", "Keys = {k1}", safety_only(cfg_text)))


def two_key_config(cfg_text: str) -> str:
    """default.cfg with two keys, one request, no timeout, no death, without symmetry.

    The one-key graph of :func:`default_graph` has no group of two keys and
    no MarkMiss of two keys; this one has both and stays small (the worker's
    timeouts and death are in the one-key graph).
    """
    text = safety_only(cfg_text)
    for old, new in (
        ("Reqs = {r1, r2}", "Reqs = {r1}"),
        ("MaxStuck = 1", "MaxStuck = 0"),
        ("MaxDeaths = 1", "MaxDeaths = 0"),
    ):
        assert old in text, old
        text = text.replace(old, new)
    return _without_symmetry(text)


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty kvprobe cache folder of the test's own, with TLC's class archive and plain printer on."""
    folder = tmp_path / "cache"
    monkeypatch.setenv("KVPROBE_CACHE_DIR", str(folder))
    monkeypatch.delenv("KVPROBE_TLC_CLASS_ARCHIVE", raising=False)
    monkeypatch.delenv("KVPROBE_TLC_PLAIN_PRINTER", raising=False)
    return folder


def explored_graph(folder: Path, cfg_text: str) -> Graph:
    """TLC's explored state graph of a config (invariants checked; TLC must find no violation)."""
    cfg = folder / "graph.cfg"
    cfg.write_text(cfg_text)
    dump = folder / "graph"
    # No coverage report: nothing reads it here, and counting each action's
    # firings costs TLC about a tenth of a dump run.
    # Values printed without TLC's layout (kvprobe.tlc_printer): the same graph,
    # the full default graph in 69 CPU s of TLC instead of 410.
    dump_args = ["-dump", "dot,actionlabels", str(dump)]
    result = run_tlc(tla_dir() / "MC.tla", cfg, extra_args=dump_args, coverage=False, plain_values=True)
    assert result.outcome == "ok", (result.outcome, result.property, result.errors)
    graph = read_graph(Path(f"{dump}.dot"))
    # The dump holds every state TLC stored (one per symmetry class under a SYMMETRY).
    assert len(graph[0]) == result.distinct, (len(graph[0]), result.distinct)
    return graph


@pytest.fixture(scope="session")
def default_graph(tmp_path_factory: pytest.TempPathFactory) -> Graph:
    """TLC's explored state graph of tla/default.cfg with one key (invariants checked, no symmetry)."""
    return explored_graph(tmp_path_factory.mktemp("graph"), graph_config((tla_dir() / "default.cfg").read_text()))


@pytest.fixture(scope="session")
def cache_graph(tmp_path_factory: pytest.TempPathFactory) -> Graph:
    """TLC's explored state graph of tla/cache.cfg (verdict cache on) with one key, no symmetry."""
    text = (tla_dir() / "cache.cfg").read_text()
    assert "CacheOn = TRUE" in text, "cache.cfg no longer turns the verdict cache on"
    return explored_graph(tmp_path_factory.mktemp("cache-graph"), graph_config(text))


@pytest.fixture(scope="session")
def two_key_graph(tmp_path_factory: pytest.TempPathFactory) -> Graph:
    """TLC's explored state graph of :func:`two_key_config` (invariants checked)."""
    return explored_graph(tmp_path_factory.mktemp("graph2"), two_key_config((tla_dir() / "default.cfg").read_text()))


@pytest.fixture(scope="session")
def full_default_graph(tmp_path_factory: pytest.TempPathFactory) -> Graph:
    """TLC's explored state graph of tla/default.cfg itself: 2 keys, 2 requests, with its symmetry.

    Edges lead to the state TLC stored for the successor's symmetry class
    (replayed by test_model_replay.replay_under_symmetry).
    """
    cfg_text = safety_only((tla_dir() / "default.cfg").read_text())
    assert "SYMMETRY Symmetry" in cfg_text, "default.cfg no longer checks under symmetry"
    return explored_graph(tmp_path_factory.mktemp("full-graph"), cfg_text)


@pytest.fixture(scope="session")
def vllm_graph(tmp_path_factory: pytest.TempPathFactory) -> Graph:
    """TLC's explored state graph of tla/vllm.cfg (MarkMiss forces RESOLVED keys only) with one key, no symmetry."""
    text = (tla_dir() / "vllm.cfg").read_text()
    assert 'MarkMissFlavour = "vllm"' in text, "vllm.cfg no longer selects the drop-in's MarkMiss"
    return explored_graph(tmp_path_factory.mktemp("vllm-graph"), graph_config(text))


def walk_cache_config(cfg_text: str) -> str:
    """A walk's config with the cache on, one request and no symmetry (chain-cache.cfg, inferred-cache.cfg)."""
    assert "CacheOn = TRUE" in cfg_text and "Chain <- ChainOfKeys" in cfg_text
    return _without_symmetry(safety_only(cfg_text).replace("Reqs = {r1, r2}", "Reqs = {r1}"))


@pytest.fixture(scope="session")
def chain_cache_graph(tmp_path_factory: pytest.TempPathFactory) -> Graph:
    """TLC's explored state graph of tla/chain-cache.cfg with one request, no symmetry."""
    text = walk_cache_config((tla_dir() / "chain-cache.cfg").read_text())
    return explored_graph(tmp_path_factory.mktemp("chain-cache-graph"), text)


@pytest.fixture(scope="session")
def inferred_cache_graph(tmp_path_factory: pytest.TempPathFactory) -> Graph:
    """TLC's explored state graph of tla/inferred-cache.cfg (one request already), no symmetry."""
    text = walk_cache_config((tla_dir() / "inferred-cache.cfg").read_text())
    return explored_graph(tmp_path_factory.mktemp("inferred-cache-graph"), text)


@pytest.fixture(scope="session")
def positions_graph(tmp_path_factory: pytest.TempPathFactory) -> Graph:
    """TLC's explored state graph of tla/positions.cfg (Positioned: 2 keys, 1 request), invariants only."""
    text = (tla_dir() / "positions.cfg").read_text()
    assert "Positioned = TRUE" in text and "SYMMETRY" not in text
    return explored_graph(tmp_path_factory.mktemp("positions-graph"), safety_only(text))
