"""What the test suites share to hunt a defect with the stateful machine and to check its traces.

* :func:`search_settings`: a derandomized Hypothesis search with no
  shrinking.  Finding is the point (a mutant the machine must catch, a rule
  it must reach); shrinking can take minutes and is left to the property
  suite and ``kvprobe conform``.
* :func:`hunt`: run a machine under that search until it fails, and check
  it failed for one of the expected reasons (not by a Hypothesis error).
* :func:`failure_messages`: every distinct failure a run raised (Hypothesis
  reports several at once as an exception group), as one line.
* :func:`check_trace`: ``kvprobe check --trace`` on a list of events, with
  its exit status and what it printed.
"""

from __future__ import annotations

import contextlib
import io
import json
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, Phase, settings
from hypothesis.errors import HypothesisException
from hypothesis.stateful import RuleBasedStateMachine, run_state_machine_as_test

__all__ = ["check_trace", "failure_leaves", "failure_messages", "hunt", "search_settings"]


def search_settings(max_examples: int = 2000, steps: int = 40) -> settings:
    """At most ``max_examples`` derandomized runs of ``steps`` steps, no shrinking, no database."""
    return settings(
        max_examples=max_examples,
        stateful_step_count=steps,
        deadline=None,
        database=None,
        derandomize=True,
        suppress_health_check=list(HealthCheck),
        phases=(Phase.explicit, Phase.generate),
        print_blob=False,
    )


def failure_leaves(exc: BaseException) -> list[BaseException]:
    """The distinct failures inside ``exc`` (itself, or the leaves of an exception group)."""
    subs = getattr(exc, "exceptions", None)
    if isinstance(subs, tuple):
        return [leaf for sub in subs for leaf in failure_leaves(sub)]
    return [exc]


def failure_messages(exc: BaseException) -> str:
    """``Type: message`` of each failure inside ``exc``, joined by `` | ``."""
    return " | ".join(f"{type(e).__name__}: {e}" for e in failure_leaves(exc))


def hunt(
    machine: type[RuleBasedStateMachine], expected: Iterable[str], search: settings | None = None
) -> tuple[float, str]:
    """Run ``machine`` (default :func:`search_settings`) until it fails; (seconds taken, its failure messages).

    Raises:
        AssertionError: the search found nothing, Hypothesis itself failed,
            or no failure message contains one of the ``expected`` words.
    """
    start = time.monotonic()
    try:
        run_state_machine_as_test(machine, settings=search or search_settings())
    except Exception as exc:
        found = exc
    else:
        raise AssertionError(f"{machine.__name__}: the search found nothing")
    elapsed = time.monotonic() - start
    leaves = failure_leaves(found)
    if any(isinstance(e, HypothesisException) for e in leaves):
        raise AssertionError(f"Hypothesis itself failed: {found!r}")
    messages = failure_messages(found)
    words = list(expected)
    if not any(word in messages for word in words):
        raise AssertionError(f"caught for an unexpected reason (expected one of {words}): {messages}")
    return elapsed, messages


def check_trace(events: Iterable[Mapping[str, Any]], path: Path) -> tuple[int, str]:
    """Write ``events`` to ``path`` (NDJSON) and run ``kvprobe check --trace`` on it, one TLC worker.

    Returns the exit status (``kvprobe.check.EXIT_*``) and what it printed.
    Raises whatever ``kvprobe check`` raises outside its exit codes.
    """
    from kvprobe.check import main

    path.write_text("".join(json.dumps(dict(e)) + "\n" for e in events))
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        status = main(["--quiet", "--workers", "1", "--trace", str(path)])
    return status, out.getvalue()
