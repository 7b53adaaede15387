"""Engine processes exit cleanly while their lookups are still in flight against a throttling store.

Each process (``exit_engine.py`` beside this file) starts lookups on a NIXL
object store behind a throttling, slow proxy and lets the interpreter exit
(without any shutdown, or after the tier's own, which gives up on a call
after its timeout).  Before kvprobe's exit hook
(``kvprobe.statemachine.threaded_worker``) a worker thread was still inside
NIXL's ``query_memory`` when the interpreter finalized and every such
process died of SIGABRT ("terminate called without an active exception":
the thread, coming back for the GIL, is ended by an unwind through
pybind11's C++ frames).  The hook waits for running calls and, if one
outlives the wait, ends the process before the interpreter finalizes.  The vLLM cases need the released vLLM with NIXL
(``tests/vllm_release/run.sh`` runs them); the native case needs NIXL only.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

ENGINE = Path(__file__).with_name("exit_engine.py")
PROCESSES = 2  # engine processes at once, sharing the store
REQUESTS = 20  # requests of 64 keys each, per process
#: The store's policy once the tiers are built: half the requests throttled, the rest held half a second.
THROTTLING = {"throttle": 0.5, "delay_s": 0.5}


def _missing(*modules: str) -> str | None:
    gone = [m for m in modules if importlib.util.find_spec(m.split(".")[0]) is None]
    return f"needs {', '.join(gone)}" if gone else None


def _skip_or_fail(reason: str | None, required: bool) -> None:
    if reason is None:
        return
    if required:
        pytest.fail(reason)
    pytest.skip(reason)


def run_engines(
    kind: str,
    bucket_name: str,
    processes: int = PROCESSES,
    policy: dict[str, float] = THROTTLING,
    requests: int = REQUESTS,
    keys: int = 64,
) -> list[tuple[int, str]]:
    """``processes`` engine processes of ``kind`` on one store: (exit code, stderr tail) each.

    The store follows ``policy`` (the fault proxy's settings; throttling by
    default) from the moment every engine has built its tier (the tiers'
    connection checks at start go through).
    """
    from kvprobe.testing.faultproxy import FaultProxy
    from kvprobe.testing.s3server import S3Server

    with S3Server() as s3, FaultProxy(s3.endpoint_url) as proxy:
        s3.create_bucket(bucket_name)
        procs = [
            subprocess.Popen(
                [sys.executable, str(ENGINE), proxy.endpoint_url, bucket_name, kind, str(requests), str(keys)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for _ in range(processes)
        ]
        try:
            for proc in procs:
                assert proc.stdout is not None
                # vLLM may log to stdout first; the line to wait for is "built".  EOF: the process died.
                while (line := proc.stdout.readline()) not in ("built\n", ""):
                    pass
                if line != "built\n":
                    proc.wait(30)
                    stderr = proc.stderr.read() if proc.stderr else ""
                    raise AssertionError(f"the engine did not build its tier: {stderr[-2000:]}")
            proxy.configure(**policy)
            results = []
            for proc in procs:
                out, err = proc.communicate("go\n", timeout=240)
                assert "submitted" in out, f"the engine did not get as far as its lookups: {err[-2000:]}"
                results.append((proc.returncode, err[-600:]))
        finally:
            for proc in procs:
                if proc.poll() is None:
                    proc.kill()  # by its pid: only a failed run gets here
                    proc.wait(30)
        stats = proxy.stats()
    assert stats.get("heads", 0) > 0, "no HEAD reached the store: nothing was in flight at exit"
    if policy.get("throttle"):
        assert stats["done"].get("throttle", 0) > 0, f"the store throttled nothing: {stats['done']}"
    return results


@pytest.mark.parametrize("kind", ["vllm-switch", "vllm-switch+shutdown"])
def test_vllm_obj_tier_on_the_drop_in_exits_cleanly_with_lookups_in_flight(kind: str) -> None:
    # Required where run.sh says so: its venv installs vLLM, NIXL and moto.
    required = os.environ.get("KVPROBE_REQUIRE_VLLM") == "1"
    _skip_or_fail(_missing("vllm"), required)
    _skip_or_fail(_missing("nixl", "moto"), required)
    results = run_engines(kind, f"kvprobe-exit-{kind.replace('+', '-')}")
    assert [code for code, _ in results] == [0] * PROCESSES, results


def test_a_call_outliving_the_exit_wait_does_not_abort_the_interpreters_teardown() -> None:
    # The store holds each HEAD 4 s; the hook waits 1 s and the engine's teardown lasts 10 s
    # (exit_engine.py's "+slowexit"): the tier's query_memory returns while the interpreter
    # finalizes, which made each such process die of SIGABRT.  The hook ends it before then.
    required = os.environ.get("KVPROBE_REQUIRE_VLLM") == "1"
    _skip_or_fail(_missing("vllm"), required)
    _skip_or_fail(_missing("nixl", "moto"), required)
    held = {"throttle": 0.0, "delay_s": 4.0}
    results = run_engines("vllm-switch+slowexit", "kvprobe-exit-held", policy=held, requests=1, keys=4)
    assert [code for code, _ in results] == [0] * PROCESSES, results
    assert all("still inside a backend call" in err for _, err in results), results


def test_native_manager_on_nixl_obj_exits_cleanly_with_lookups_in_flight() -> None:
    from kvprobe.backends._nixl_import import nixl_unavailable

    _skip_or_fail(nixl_unavailable() or _missing("moto"), False)
    results = run_engines("native", "kvprobe-exit-native")
    assert [code for code, _ in results] == [0] * PROCESSES, results


#: Engine processes of the fleet case: issue 38's six, all on one throttling store.
FLEET = 6


@pytest.mark.parametrize("kind", ["vllm-switch", "objtier"])
def test_six_engines_through_vllms_tier_exit_cleanly_against_a_throttling_store(kind: str) -> None:
    required = os.environ.get("KVPROBE_REQUIRE_VLLM") == "1"
    _skip_or_fail(_missing("vllm"), required)
    _skip_or_fail(_missing("nixl", "moto"), required)
    results = run_engines(kind, f"kvprobe-exit-six-{kind}", processes=FLEET)
    assert [code for code, _ in results] == [0] * FLEET, results
