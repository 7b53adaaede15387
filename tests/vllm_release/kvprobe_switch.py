"""A pytest plugin: run a released vLLM's own tier tests with kvprobe's drop-in switched in.

Loaded with ``-p kvprobe_switch`` (``tests/vllm_release`` on ``PYTHONPATH``)
by ``tests/vllm_release/run.sh``.  It does what docs/vllm.md tells a vLLM
user to do, before any test module (and so any tier) is imported::

    vllm.v1.kv_offload.tiering.async_lookup.AsyncLookupManager = kvprobe.integrations.vllm.AsyncLookupManager

``--lookup-manager=vllm`` runs the same tests on vLLM's own class instead
(the as-shipped tally).  With the drop-in, the tests listed in
``private_fields.toml`` (they read or replace private fields of vLLM's
class) are marked ``xfail(strict=True)`` with the listed reason: each must
still fail, so one that starts passing is reported, and a listed test that
no longer exists is an error.  Everything else must pass (or skip by the
test's own decision, as the ``fs_io_C`` tests do without CUDA).

``--lookup-manager=tiers`` runs them on kvprobe's own tier classes
(``kvprobe.integrations.vllm.tiers``): vLLM's ``FileSystemTierManager`` and
``ObjectStoreSecondaryTierManager`` are replaced, in vLLM's modules and so in
the tests', by ``FsTier`` and by ``ObjTier`` (see :mod:`tier_doubles` for
the one thing changed there: the tests' mock NIXL agent answers kvprobe's
lookups too).  The tests listed in ``tiers_expected_failures.toml`` must fail,
the others pass, as above.

At the end it prints a tally per test file, and checks that the tiers
really run on the class asked for.
"""

from __future__ import annotations

import re
import sys
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pytest
import tomllib

LIST_FILE = Path(__file__).with_name("private_fields.toml")
TIERS_LIST_FILE = Path(__file__).with_name("tiers_expected_failures.toml")
SWITCHED_MODULE = "vllm.v1.kv_offload.tiering.async_lookup"
#: Tier modules that subclass the lookup manager: they must be imported after the switch.
TIER_MODULES = ("vllm.v1.kv_offload.tiering.fs.manager", "vllm.v1.kv_offload.tiering.obj.manager")
_PARAMS = re.compile(r"\[.*\]$")
OUTCOMES = ("passed", "failed", "skipped", "xfailed", "xpassed", "error")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--lookup-manager",
        choices=("kvprobe", "vllm", "tiers"),
        default="kvprobe",
        help="the AsyncLookupManager the tiers run on: kvprobe's drop-in (default) or vLLM's own; "
        "or 'tiers': vLLM's tier classes replaced by kvprobe's ObjTier and FsTier",
    )


def _load_list(
    path: Path = LIST_FILE, required: frozenset[str] = frozenset({"id", "fields", "reason"})
) -> list[dict[str, Any]]:
    with path.open("rb") as f:
        entries: list[dict[str, Any]] = tomllib.load(f).get("test", [])
    for entry in entries:
        missing = required - entry.keys()
        if missing:
            raise pytest.UsageError(f"{path.name}: entry {entry.get('id', entry)!r} lacks {sorted(missing)}")
    return entries


def pytest_configure(config: pytest.Config) -> None:
    mode = config.getoption("--lookup-manager")
    if mode == "kvprobe":
        imported = [m for m in TIER_MODULES if m in sys.modules]
        if imported:
            raise pytest.UsageError(f"tiers imported before the switch: {imported}")
        import vllm.v1.kv_offload.tiering.async_lookup as vllm_async_lookup

        import kvprobe.integrations.vllm

        vllm_async_lookup.AsyncLookupManager = kvprobe.integrations.vllm.AsyncLookupManager  # type: ignore[misc]
        entries = _load_list()
    elif mode == "tiers":
        import tier_doubles

        tier_doubles.install()
        entries = _load_list(TIERS_LIST_FILE, frozenset({"id", "reason"}))
    else:
        entries = []
    config.pluginmanager.register(ReleaseRun(mode, entries), "kvprobe-release-run")


def _test_name(nodeid: str) -> str:
    """``path/test_x.py::Class::test_y[param]`` -> ``test_x.py::Class::test_y``."""
    file_part, _, rest = nodeid.partition("::")
    return f"{Path(file_part).name}::{_PARAMS.sub('', rest)}"


def _tier_bases() -> dict[str, str]:
    """For each imported tier's lookup manager class, the class it subclasses."""
    found: dict[str, str] = {}
    for name in TIER_MODULES:
        for attr in ("FsAsyncLookupManager", "ObjAsyncLookupManager"):
            cls = getattr(sys.modules.get(name), attr, None)
            if cls is not None:
                base = cls.__mro__[1]
                found[f"{name}.{attr}"] = f"{base.__module__}.{base.__qualname__}"
    return found


class ReleaseRun:
    """Marks the listed tests, counts outcomes per file, checks the tiers' base class."""

    def __init__(self, mode: str, entries: list[dict[str, Any]]) -> None:
        self.mode = mode
        self.entries = {e["id"]: e for e in entries}
        self.tally: defaultdict[str, Counter[str]] = defaultdict(Counter)
        self.wrong_bases: list[str] = []

    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        matched: set[str] = set()
        for item in items:
            entry = self.entries.get(_test_name(item.nodeid))
            if entry is None:
                continue
            matched.add(entry["id"])
            reason = entry["reason"]
            if "fields" in entry:
                reason = f"reads vLLM's private {', '.join(entry['fields'])}: {reason}"
            item.add_marker(pytest.mark.xfail(strict=True, reason=reason))
            if entry.get("waits_forever", False):
                item.add_marker(pytest.mark.timeout(entry.get("timeout_s", 5)))
        selected_files = {Path(item.nodeid.partition("::")[0]).name for item in items}
        stale = sorted(i for i in self.entries.keys() - matched if i.partition("::")[0] in selected_files)
        if stale:
            raise pytest.UsageError(f"{LIST_FILE.name} lists tests that were not collected: {stale}")

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        counts = self.tally[Path(report.nodeid.partition("::")[0]).name]
        if report.when == "call" or (report.when == "setup" and not report.passed):
            if hasattr(report, "wasxfail"):
                counts["xfailed" if report.skipped else "xpassed"] += 1
            elif report.failed and report.when == "setup":
                counts["error"] += 1
            else:
                counts[report.outcome] += 1
        elif report.when == "teardown" and report.failed:
            counts["error"] += 1

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if self.mode == "tiers":
            import tier_doubles

            self.wrong_bases = tier_doubles.not_installed()
        else:
            wanted = "kvprobe.integrations.vllm" if self.mode == "kvprobe" else SWITCHED_MODULE
            bases = _tier_bases().items()
            self.wrong_bases = [f"{cls} subclasses {base}" for cls, base in bases if not base.startswith(wanted)]
        if self.wrong_bases:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        write = terminalreporter.write_line
        if self.mode == "tiers":
            terminalreporter.section("vLLM release tier tests on kvprobe's ObjTier and FsTier")
            import tier_doubles

            for line in tier_doubles.installed():
                write(line)
        else:
            terminalreporter.section(f"vLLM release tier tests on {self.mode}'s AsyncLookupManager")
            for cls, base in _tier_bases().items():
                write(f"{cls} subclasses {base}")
        for line in self.wrong_bases:
            write(f"ERROR: {line}, not the class asked for")
        for file, counts in sorted(self.tally.items()):
            parts = ", ".join(f"{counts[o]} {o}" for o in OUTCOMES if counts[o])
            write(f"{file}: {parts} (of {sum(counts.values())})")
