"""The model's worker actions: TakeBatch, CompleteGroup, FailGroup, TimeOut, Saturate, LateAnswer, Die.

The worker's shape is ``docs/worker.md``: ``State.worker`` is ``"up"``,
``"dead"`` or ``"stopped"``; a call that timed out is *stuck* and may still
answer late, also after its worker died or stopped.  A worker's outcomes go
to the inbox (the scheduler's :func:`~kvprobe.spec.model.drain` applies
them), or, once the manager is shut down, to ``discarded``.  Errors:
:class:`~kvprobe.spec.model_state.ModelError` where the model has no step
(the group is not running, nothing is queued, ...).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from kvprobe.spec.model_state import (
    DEAD,
    DEATH_MARKER,
    SATURATED,
    TIMEOUT,
    UP,
    Group,
    ModelError,
    Outcome,
    State,
    begin,
    frozen_map,
    tell,
)

__all__ = [
    "complete_group",
    "fail_group",
    "late_answer",
    "saturate",
    "take_batch",
    "time_out",
    "worker_dies",
]


def take_batch(s: State) -> tuple[State, tuple[Group, ...]]:
    """TakeBatch: the worker (up) takes the oldest submitted batch.

    Raises :class:`ModelError` when nothing is queued or the worker is not up.
    """
    s = begin(s, scheduler=False)
    if s.worker != UP or not s.queue:
        raise ModelError(f"TakeBatch: nothing submitted, or the worker is {s.worker}")
    batch, *rest = s.queue
    taken = {**s.taken, **{g.group_id: g for g in batch}}
    return replace(s, queue=tuple(rest), taken=frozen_map(taken)), batch


def _publish(s: State, outcome: Outcome) -> State:
    # A stopped worker's outcomes are never applied: they go to ``discarded``.
    if s.closed:
        return replace(s, discarded=(*s.discarded, outcome))
    return replace(s, inbox=(*s.inbox, outcome))


def _running(s: State, group_id: int, action: str) -> Group:
    """The group whose call the worker (up, or stopped) is running, for its first answer."""
    pool = s.stopped_taken if s.closed else s.taken
    group = pool.get(group_id)
    if s.worker == DEAD or group is None or group_id in s.timed_out:
        raise ModelError(f"{action}: group {group_id} is not running on a live or stopped worker")
    return group


def _answer_first(s: State, group_id: int, verdicts: tuple[bool, ...] | None, failure: str | None) -> State:
    """Publish a running group's first answer; its call is over."""
    group = _running(s, group_id, failure or "CompleteGroup")
    if verdicts is not None and len(verdicts) != len(group.keys):
        raise ModelError(f"{len(verdicts)} verdicts for {len(group.keys)} keys")
    s = replace(
        s,
        told=tell(s, group, verdicts),
        taken=frozen_map({gid: g for gid, g in s.taken.items() if gid != group_id}),
        stopped_taken=frozen_map({gid: g for gid, g in s.stopped_taken.items() if gid != group_id}),
    )
    return _publish(s, Outcome(group, verdicts, failure, False))


def _answer_late(s: State, group_id: int, verdicts: tuple[bool, ...] | None, failure: str | None) -> State:
    """A stuck call returns: its answer is published marked late (it changes nothing)."""
    group = s.stuck().get(group_id)
    if group is None:
        raise ModelError(f"LateAnswer: group {group_id} has no stuck call")
    if verdicts is not None and len(verdicts) != len(group.keys):
        raise ModelError(f"{len(verdicts)} verdicts for {len(group.keys)} keys")
    s = replace(
        s,
        taken=frozen_map({gid: g for gid, g in s.taken.items() if gid != group_id}),
        timed_out=s.timed_out - {group_id},
        stray=frozen_map({gid: g for gid, g in s.stray.items() if gid != group_id}),
    )
    return _publish(s, Outcome(group, verdicts, failure, True))


def complete_group(s: State, group_id: int, verdicts: Sequence[bool]) -> State:
    """CompleteGroup: publish one verdict per key (LateAnswer for a stuck call).

    Raises :class:`ModelError` if the group's call is not running (or stuck)
    or the number of verdicts is wrong.
    """
    s = begin(s, scheduler=False)
    if group_id in s.stuck():
        return _answer_late(s, group_id, tuple(verdicts), None)
    group = _running(s, group_id, "CompleteGroup")
    s = _answer_first(s, group_id, tuple(verdicts), None)
    # History: the call returned in time; what the backend said, recorded apart from what is published.
    stored = {(k, g) for k, g, v in zip(group.keys, group.gens, verdicts, strict=True) if v}
    missing = {(k, g) for k, g, v in zip(group.keys, group.gens, verdicts, strict=True) if not v}
    return replace(s, backend_hits=s.backend_hits | stored, backend_misses=s.backend_misses | missing)


def late_answer(s: State, group_id: int, verdicts: Sequence[bool]) -> State:
    """LateAnswer: a stuck call returns (also after its worker died or stopped).

    Raises :class:`ModelError` if the group has no stuck call or the number
    of verdicts is wrong.
    """
    return _answer_late(begin(s, scheduler=False), group_id, tuple(verdicts), None)


def fail_group(s: State, group_id: int, failure: str) -> State:
    """FailGroup: publish a failure (a FailureKind value); its keys resolve as MISS.

    A stuck call that fails publishes a late failure.  Raises
    :class:`ModelError` if the group's call is not running (or stuck).
    """
    s = begin(s, scheduler=False)
    if group_id in s.stuck():
        return _answer_late(s, group_id, None, failure)
    return _answer_first(s, group_id, None, failure)


def time_out(s: State, group_id: int, max_stuck: int | None = None) -> State:
    """TimeOut: publish TIMEOUT; the call is stuck and may answer late.

    Any running call may time out, however many are stuck already (groups
    run concurrently and may overstay together); ``max_stuck`` (the code's
    ``max_stuck_calls``) 0 means no timeout is configured.  Raises
    :class:`ModelError` if the group's call is not running or there is no timeout.
    """
    s = begin(s, scheduler=False)
    group = _running(s, group_id, "TimeOut")
    if max_stuck == 0:
        raise ModelError("TimeOut: no timeout is configured (max_stuck 0)")
    s = replace(s, told=tell(s, group, None))
    if s.closed:
        s = replace(
            s,
            stopped_taken=frozen_map({gid: g for gid, g in s.stopped_taken.items() if gid != group_id}),
            stray=frozen_map({**s.stray, group_id: group}),
        )
    else:
        s = replace(s, timed_out=s.timed_out | {group_id})
    return _publish(s, Outcome(group, None, TIMEOUT, False))


def saturate(s: State, group_id: int, max_stuck: int) -> State:
    """Saturate: ``max_stuck`` calls are stuck, so the group is answered SATURATED at once.

    ``max_stuck == 0`` means no timeout is configured: no call is ever stuck
    and nothing saturates.  Raises :class:`ModelError` if the group's call is not running or fewer
    calls are stuck.
    """
    s = begin(s, scheduler=False)
    if max_stuck == 0 or len(s.stuck()) < max_stuck:
        raise ModelError(f"Saturate: only {len(s.stuck())} calls stuck (max {max_stuck})")
    return _answer_first(s, group_id, None, SATURATED)


def worker_dies(s: State, *, marker: bool = False) -> State:
    """Die: the worker's dispatcher ends.

    With ``marker`` (the TLA+ model's Die, the threaded worker's death): its
    queue and running calls are lost, its stuck calls live on (``stray``),
    and the death marker is published.  Without it (the code's
    ``ManualWorker.die()``), the death is noticed only by :func:`revive`,
    and the dead worker's queue and groups stay as the code leaves them.
    Raises :class:`ModelClosedError` after shutdown, :class:`ModelError`
    when the worker is not up.
    """
    s = begin(s)
    if s.worker != UP:
        raise ModelError(f"Die: the worker is {s.worker}")
    if not marker:
        return replace(s, worker=DEAD, death_unannounced=True)
    s = replace(s, worker=DEAD, queue=(), taken=frozen_map(), timed_out=frozenset(), stray=frozen_map(s.stuck()))
    return _publish(s, DEATH_MARKER)
