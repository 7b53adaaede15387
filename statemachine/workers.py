"""Workers: the drivers that run backend calls for the core.

A worker receives :class:`~kvprobe.statemachine.types.Batch` es from the
manager's ``flush`` and publishes one
:class:`~kvprobe.statemachine.types.GroupOutcome` per group through the
``publish`` callable it was started with (the core's inbox
``deque.append``: atomic, so no lock).  It touches nothing else of the
manager.  This module gathers the workers' public names; each part lives in
its own module:

* :mod:`~kvprobe.statemachine.worker_base`: the :class:`Worker` protocol the
  manager drives, :func:`probe_group` (the one backend call, checked), and
  the checks of worker settings.
* :mod:`~kvprobe.statemachine.threaded_worker`: :class:`ThreadedWorker` (the
  default) runs up to ``max_concurrent_groups`` groups at once, each on a
  *caller* thread, and publishes each group as soon as it is done.  With a
  timeout, a call that overstays is reported as TIMEOUT and its caller is
  set aside as *stuck*.  Policy for calls that never return: at most
  ``max_stuck_calls`` callers may be stuck at once; while that many are,
  further groups fail at once as SATURATED instead of starting yet another
  thread, so threads stay bounded and nothing waits.  A stuck call that
  eventually returns publishes its answer marked ``late`` (the core drops
  it) and its caller goes back to work.  The shape it follows (states,
  actions, death marker) is ``docs/worker.md``.
* :mod:`~kvprobe.statemachine.manual_worker`: :class:`ManualWorker` lets
  tests pump the worker step by step: take a batch, complete, fail, time out
  or saturate any group, die with or without the death marker, in any order.
"""

from __future__ import annotations

from kvprobe.statemachine.cpu_gate import DEFAULT_HOLD_S
from kvprobe.statemachine.manual_worker import ManualWorker
from kvprobe.statemachine.threaded_worker import DEFAULT_CONCURRENT_GROUPS, ThreadedWorker
from kvprobe.statemachine.worker_base import Publish, Worker, check_count, check_hold, check_timeout, probe_group

__all__ = [
    "DEFAULT_CONCURRENT_GROUPS",
    "DEFAULT_HOLD_S",
    "ManualWorker",
    "Publish",
    "ThreadedWorker",
    "Worker",
    "check_count",
    "check_hold",
    "check_timeout",
    "probe_group",
]
