"""The chaos campaign's own checks: short runs pass, and it catches what it claims to.

Without the failing cases its PASS would prove nothing: these run it with a
tier that lies (answers True for every key), with a core that never
reclaims a finished request's states, with an object store that comes back
later than the recovery bound after a thaw, with a connection bound below
what the object backend holds, and with the flatness bound applied to a
series that grows, and expect the named failures.

The S3 part (Ceph RGW frozen and thawed under a NixlObjBackend manager)
skips with one line when Ceph RGW or NIXL is missing, and fails instead
under ``KVPROBE_REQUIRE_RGW=1`` (CI).
"""

from __future__ import annotations

import subprocess
import sys
import threading
from array import array
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root, for bench/

from bench.reliability import chaos, chaos_report, chaos_s3
from kvprobe.statemachine import LookupCore
from kvprobe.testing.rgw import skip_or_fail

# The campaign kills dispatcher threads on purpose (a SystemExit in the thread).
pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")


@pytest.fixture(scope="module")
def obj_tier() -> Iterator[chaos_s3.ObjTier]:
    why = chaos_s3.objstore_unavailable()
    skip_or_fail(None if why is None else f"the S3 part of the chaos campaign cannot run: {why}")
    tier = chaos_s3.ObjTier(chaos.stored_keys() + chaos_s3.recovery_keys(8))
    try:
        yield tier
    finally:
        tier.close()


def test_a_short_campaign_passes(capsys: pytest.CaptureFixture[str]) -> None:
    assert chaos.main(["--seconds", "6", "--seed", "5", "--s3", "off"]) == 0
    out = capsys.readouterr().out
    assert "PASS: wrong verdicts 0" in out and "FAIL" not in out


@pytest.mark.long
def test_a_short_campaign_with_the_s3_outage_passes() -> None:
    # In a fresh interpreter, as `python -m bench.reliability.chaos` runs: inside this
    # suite's process, after a thousand tests, the campaign ran 16-18 steps
    # in 16 s where it runs about 2,000 alone (a cause in the test process,
    # not found yet), and a step-counted recovery then measured the harness.
    why = chaos_s3.objstore_unavailable()
    skip_or_fail(None if why is None else f"the S3 part of the chaos campaign cannot run: {why}")
    command = [sys.executable, "-m", "bench.reliability.chaos", "--seconds", "16", "--seed", "5", "--s3", "on"]
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run(command, cwd=root, capture_output=True, text=True, timeout=600, check=False)
    out = done.stdout
    assert done.returncode == 0, out + done.stderr[-2000:]
    assert "PASS: S3 frozen at least once, every thaw recovered" in out
    assert "PASS: S3: a stored key True within 2 x lookup_timeout_s + 2 s of every thaw" in out
    assert "len(m) at the end | {'threaded': 0, 'process': 0, 'objstore': 0}" in out
    assert "FAIL" not in out


@pytest.mark.long
def test_a_store_that_recovers_late_is_caught(
    obj_tier: chaos_s3.ObjTier, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # The gateway gets SIGCONT 5 s after the campaign thaws it (and starts
    # timing): a stored key cannot answer True within the 4 s bound.
    server = obj_tier.server
    real_thaw = server.thaw
    timers: list[threading.Timer] = []

    def late_thaw() -> None:
        timer = threading.Timer(5.0, real_thaw)
        timers.append(timer)
        timer.start()

    monkeypatch.setattr(server, "thaw", late_thaw)
    try:
        assert chaos.main(["--seconds", "8", "--seed", "5", "--s3", "on"], obj_tier=obj_tier) == 1
    finally:
        for timer in timers:
            timer.join()
    out = capsys.readouterr().out
    assert "FAIL: S3: a stored key True within 2 x lookup_timeout_s + 2 s of every thaw" in out
    assert "FAIL: wrong verdicts 0" not in out


@pytest.mark.long
def test_store_connections_past_the_backends_bound_are_caught(
    obj_tier: chaos_s3.ObjTier, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # The campaign's other checks leave the store's connections out of the
    # fds; this one holds them to the bound, here set below what the
    # backend already holds.
    monkeypatch.setattr(type(obj_tier.backend), "max_connections", property(lambda self: 1))
    assert chaos.main(["--seconds", "6", "--seed", "5", "--s3", "on"], obj_tier=obj_tier) == 1
    out = capsys.readouterr().out
    assert "FAIL: S3 connections within the backend's max_connections" in out
    assert "FAIL: wrong verdicts 0" not in out


def test_a_lying_tier_is_caught(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    def lies(self: chaos.Faulty, keys: Sequence[bytes], req_context: object) -> Iterable[bool]:
        return [True] * len(keys)

    monkeypatch.setattr(chaos.Faulty, "batch_lookup", lies)
    assert chaos.main(["--seconds", "3", "--s3", "off"]) == 1
    assert "FAIL: wrong verdicts 0" in capsys.readouterr().out


def test_a_core_that_leaks_is_caught(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(LookupCore, "cleanup", lambda self, req_id: None)
    assert chaos.main(["--seconds", "3", "--drain-bound-s", "1", "--s3", "off"]) == 1
    assert "FAIL: len(m) 0 at the end" in capsys.readouterr().out


def test_the_flatness_check_fails_on_growth() -> None:
    growing = array("d", [float(i) for i in range(40)])
    assert chaos_report.flat(growing, 40, slack=8.0)[2] is False
    level = array("d", [10.0] * 40)
    assert chaos_report.flat(level, 40, slack=8.0)[2] is True
    # The warm-up can be stretched (to the first S3 recovery), never to the end.
    step: Any = array("d", [10.0] * 30 + [30.0] * 10)
    assert chaos_report.flat(step, 40, slack=8.0, warm_samples=20)[2] is False
    assert chaos_report.flat(step, 40, slack=8.0, warm_samples=35)[2] is True
    assert chaos_report.flat(step, 40, slack=8.0, warm_samples=100)[0:2] == (30.0, 30.0)
