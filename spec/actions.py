"""The TLA+ model's actions, declared once.

``tla/KVProbe.tla``'s next-state relation ``Next`` is the disjunction of the
actions named here, and TLC names each step of a behaviour by one of them.
Everything else that names an action takes the name from this module: the
trace the implementation records (:mod:`kvprobe.statemachine.trace`: one
event per action, named by it), the replay of a trace against the reference
model (:mod:`kvprobe.spec.replay`), the writing of a trace as a TLA+ module
for TLC (:mod:`kvprobe.tlc_trace`), the comparison of TLC's state graph with
the lifecycle (``tests/tla/graph_conformance.py``) and the tests.
``tests/tla/test_actions.py`` fails if this declaration and the actions of
``KVProbe.tla`` (and the event names ``Trace.tla`` matches) disagree.

The actions fall into three kinds, by who performs them and what they move:

* the scheduler's actions that move a probe between phases are the
  lifecycle's events (:class:`kvprobe.spec.lifecycle.Event`, whose values are
  these names); the core records each one (:data:`CORE_EVENTS`);
* the worker's actions, and the scheduler's ``Revive`` (a dead worker is
  started again), move no phase; the worker side records them
  (:data:`WORKER_EVENTS`);
* ``Terminated`` is the intended final stutter after ``Shutdown``; nothing
  records it.

One recorded event is no action: :data:`CALL_RETURNED`, a backend call that
returned, logged apart from the group's answer so that trace validation
sees a worker that holds an answer it has.
"""

from __future__ import annotations

from kvprobe.spec.lifecycle import Event

__all__ = [
    "ACTIONS",
    "CALL_RETURNED",
    "CORE_EVENTS",
    "RECORDED_EVENTS",
    "REVIVE",
    "SCHEDULER_ACTIONS",
    "TERMINATED",
    "TRACE_EVENTS",
    "WORKER_ACTIONS",
    "WORKER_EVENTS",
]

#: The scheduler's actions that move probes between phases: the lifecycle's
#: events (Lookup, Flush, Drain, Cleanup, MarkMiss, Shutdown).  The core
#: records each as a trace event.
CORE_EVENTS: tuple[str, ...] = tuple(event.value for event in Event)

#: The scheduler's action that starts a dead worker again (moves no phase;
#: the new worker records it).
REVIVE = "Revive"

#: Every scheduler action of the model.
SCHEDULER_ACTIONS: tuple[str, ...] = (*CORE_EVENTS, REVIVE)

#: The worker process's actions: take a batch, answer a group it holds
#: (complete, fail, time out, saturate), a stuck call's late answer, death.
WORKER_ACTIONS: tuple[str, ...] = (
    "TakeBatch",
    "CompleteGroup",
    "FailGroup",
    "TimeOut",
    "Saturate",
    "LateAnswer",
    "Die",
)

#: The trace events the worker side records: the worker's actions and Revive.
#: None of them moves a probe's phase.
WORKER_EVENTS: tuple[str, ...] = (*WORKER_ACTIONS, REVIVE)

#: Every action a trace event may name.
TRACE_EVENTS: tuple[str, ...] = (*CORE_EVENTS, *WORKER_EVENTS)

#: A worker's record that is no model action: a group's backend call
#: returned.  The model's worker publishes a call's answer in the step the
#: call returns (CompleteGroup, FailGroup, LateAnswer), so tla/Trace.tla
#: requires the group's publication as the worker's next event.
CALL_RETURNED = "CallReturned"

#: Every name a recorded event may carry: the actions, and CALL_RETURNED.
RECORDED_EVENTS: tuple[str, ...] = (*TRACE_EVENTS, CALL_RETURNED)

#: The final stutter after Shutdown: a step of Next that nothing records.
TERMINATED = "Terminated"

#: Every action of KVProbe.tla's Next, as TLC names the steps it takes.
ACTIONS: tuple[str, ...] = (*SCHEDULER_ACTIONS, *WORKER_ACTIONS, TERMINATED)
