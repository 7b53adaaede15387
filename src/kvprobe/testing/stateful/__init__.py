"""The shipped stateful conformance machine (a Hypothesis ``RuleBasedStateMachine``).

:func:`lookup_machine` builds a machine whose rules are the model actions of
``docs/properties.md`` (Lookup, Flush, Drain, Cleanup, MarkMiss, Shutdown;
the worker's TakeBatch, CompleteGroup, FailGroup in four ways, TimeOut,
Saturate, a late answer (also from a stuck call of a worker that died), and
Die with or without the death marker) plus ground-truth changes
(store/remove a block).  Each rule
performs the action on a real :class:`~kvprobe.statemachine.AsyncLookupManager`
and on the reference model (:mod:`kvprobe.spec.model`) and compares what the
caller can see: return values, ``phase`` and ``len``, the backend calls made,
the counters, and the manager's tables abstracted into a model state.  One
``@invariant`` (``contract``) runs the checks after every step: first
``TierAnswersTruthfully`` (the oracle: every answer the tier gave matched
what the factory stored), then the predicates named as in
``docs/properties.md``, evaluated both on the model and on the abstraction
of the real manager (history variables are recorded from the manager's
trace), then the comparison with the model, last ``TierAnswersWellFormed``
(no call of the tier raised or returned other than one bool per key: the
manager tolerates that, so the model follows it and the call is reported
as the tier's).  Every
trace event is also fed to :class:`kvprobe.spec.replay.TraceChecker` as it is
emitted, so each run's whole trace is validated against the model.

Worker modes:

* ``"manual"`` (default): the machine pumps a
  :class:`~kvprobe.statemachine.ManualWorker`, so Hypothesis chooses every
  interleaving and shrinks it.  Failures are injected by a scriptable wrapper
  of the backend, so the real ``probe_group`` path turns them into outcomes.
* ``"thread"``: the real :class:`~kvprobe.statemachine.ThreadedWorker`; each
  flush waits for the worker to publish every group of the batch.

Ground truth: a factory returns a :class:`Target` (a backend plus ``store``
and ``remove``), a ``BlockStore``, or a ``(backend, store, remove)`` tuple;
the machine keeps the set of stored keys and expects the backend to agree.
:func:`memory_factory` is the in-memory example, :func:`nixl_obj_factory`
the object tier on a bucket named by the environment (:mod:`.objstore`);
``kvprobe conform`` runs :func:`run_conformance` on any factory.

Where each part lives (read in this order):

* :mod:`.tier`: the tier under test, its ground truth and audit
  (:class:`Target`, :class:`ScriptedBackend`, :func:`memory_factory`);
  :mod:`.answers`: one call of the tier and its answer, read as the
  manager reads it and worded for the report;
* :mod:`.base`: the machine's options, how a rule is declared, the state
  the rules share;
* :mod:`.scheduler`, :mod:`.worker`, :mod:`.faults`, :mod:`.sequences`:
  the rules, grouped by who acts;
* :mod:`.ghosts`, :mod:`.abstraction`, :mod:`.checks`: the history
  recorded from the trace, the real manager seen as a model state, and the
  checks run after every step;
* :mod:`.machine`: :func:`lookup_machine`, which assembles a machine;
* :mod:`.run`, :mod:`.report`: :func:`run_conformance` and its one-screen
  failure report.
"""

from __future__ import annotations

from kvprobe.testing.stateful.abstraction import abstract_state
from kvprobe.testing.stateful.ghosts import GhostRecorder
from kvprobe.testing.stateful.machine import lookup_machine
from kvprobe.testing.stateful.objstore import ConformConfigError, nixl_obj_factory
from kvprobe.testing.stateful.report import failure_report
from kvprobe.testing.stateful.run import SHRINK_SECONDS, ConformanceResult, run_conformance
from kvprobe.testing.stateful.tier import (
    FAILURES,
    KEYS,
    REQS,
    ScriptedBackend,
    ScriptedFault,
    Target,
    as_target,
    memory_factory,
    short_name,
)

__all__ = [
    "FAILURES",
    "KEYS",
    "REQS",
    "SHRINK_SECONDS",
    "ConformConfigError",
    "ConformanceResult",
    "GhostRecorder",
    "ScriptedBackend",
    "ScriptedFault",
    "Target",
    "abstract_state",
    "as_target",
    "failure_report",
    "lookup_machine",
    "memory_factory",
    "nixl_obj_factory",
    "run_conformance",
    "short_name",
]
