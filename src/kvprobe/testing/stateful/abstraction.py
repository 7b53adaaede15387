"""The real manager seen as a model state, and how two model states are compared.

:func:`abstract_state` is the abstraction function: it reads the manager's
tables (and a ManualWorker's queue) into a :class:`kvprobe.spec.model.State`,
with the history variables a :class:`~.ghosts.GhostRecorder` recorded.  The
machine compares it with the reference model's state after every step
(:func:`differences`), and :func:`interest` scores a model state for
Hypothesis's targeting phase.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import fields, is_dataclass

from kvprobe.spec import LookupPhase, model
from kvprobe.spec.model_state import Remembered
from kvprobe.statemachine import AsyncLookupManager, GroupOutcome, ManualWorker, ProbeGroup
from kvprobe.testing.stateful.ghosts import GhostRecorder, held_phase

__all__ = [
    "COMPARED",
    "COMPARED_THREAD",
    "abstract_state",
    "as_model_group",
    "differences",
    "interest",
    "stable_repr",
]


def as_model_group(g: ProbeGroup) -> model.Group:
    """A probe group of the real core as the model writes it."""
    return model.Group(g.group_id, g.batch_id, g.req_id, g.keys, g.generations)


def _outcome(o: GroupOutcome) -> model.Outcome:
    failure = None if o.failure is None else o.failure.value
    return model.Outcome(as_model_group(o.group), o.verdicts, failure, o.late)


def abstract_state(m: AsyncLookupManager, ghosts: GhostRecorder) -> model.State:
    """The real manager seen as a model state (the abstraction function).

    The worker's queue and taken groups are read from a ManualWorker; for any
    other worker they are taken as empty (call this when that worker is idle).
    Id counters are not observable and are left at their initial values.
    """
    core = m.core
    worker = m.worker
    queue: tuple[tuple[model.Group, ...], ...] = ()
    taken: dict[int, model.Group] = {}
    timed_out: frozenset[int] = frozenset()
    stray: dict[int, model.Group] = {}
    marker_published = False
    if isinstance(worker, ManualWorker):
        stray = {gid: as_model_group(g) for gid, g in worker.stray.items()}
        marker_published = worker.marker_published
        if m.closed:
            # Shutdown: the calls stuck then outlive the worker too (the model's stray).
            stray.update({gid: as_model_group(worker.taken[gid]) for gid in worker.timed_out})
        else:
            queue = tuple(tuple(as_model_group(g) for g in b.groups) for b in worker.submitted)
            taken = {gid: as_model_group(g) for gid, g in worker.taken.items()}
            timed_out = frozenset(worker.timed_out)
    stats = m.stats
    counts = model.Counts(**{f.name: getattr(stats, f.name) for f in fields(model.Counts)})
    probes = {
        k: model.Probe(held_phase(s.phase), s.generation, frozenset(s.waiters), s.verdict)
        for k, s in core.states.items()
    }
    remembered = () if core.memory is None else core.memory.entries()
    return model.State(
        probes=probes,
        requests={r: frozenset(s.key for s in request.states) for r, request in core.requests.items()},
        step_batch=tuple((s.key, s.generation, s.owner.req_id) for s in core.step_batch),
        outstanding={gid: as_model_group(g) for gid, g in core.outstanding.items()},
        queue=queue,
        taken=taken,
        timed_out=timed_out,
        inbox=tuple(_outcome(o) for o in core.inbox),
        closed=m.closed,
        worker="stopped" if m.closed else ("up" if worker.is_alive() else "dead"),
        # A dead worker's open groups are failed by the drain of its death marker
        # or, if it published none, by the next flush/drain_results.
        death_unannounced=not m.closed and not worker.is_alive() and not marker_published,
        stray=stray,
        counts=counts,
        submitted=dict(ghosts.submitted),
        submitted_not_pending=frozenset(ghosts.submitted_not_pending),
        applied=dict(ghosts.applied),
        stale_applied=ghosts.stale_applied,
        forced=frozenset(ghosts.forced),
        moot=frozenset(ghosts.moot),
        chain_asks=tuple(ghosts.chain_asks),
        memory=tuple(Remembered(*entry) for entry in remembered),
        recalled=dict(ghosts.recalled),
    )


#: The state variables compared between the model and the real manager.
COMPARED = (
    "probes",
    "requests",
    "step_batch",
    "outstanding",
    "queue",
    "taken",
    "timed_out",
    "stray",
    "inbox",
    "closed",
    "counts",
    "memory",
)


#: What is compared with the threaded worker (its queue and calls are not observable).
COMPARED_THREAD = tuple(n for n in COMPARED if n not in ("queue", "taken", "timed_out", "stray"))


def differences(expected: model.State, actual: model.State, names: Sequence[str]) -> list[str]:
    """One line per part of a state variable of ``names`` on which ``actual`` differs from ``expected``.

    Only the parts that differ are shown, each whole: a table's entries by
    key (``probes[k1]: model ..., implementation ...``, ``absent`` for a
    missing one), a record's fields by name (``counts.misses: model 2,
    implementation 3``); any other variable as a whole.
    """
    out = []
    for name in names:
        want, got = getattr(expected, name), getattr(actual, name)
        if isinstance(want, dict | type(expected.probes)):
            want, got = dict(want), dict(got)
        if want != got:
            out.extend(_parts_differing(name, want, got))
    return out


def _parts_differing(name: str, want: object, got: object) -> list[str]:
    if isinstance(want, dict) and isinstance(got, dict):
        keys = sorted(want.keys() | got.keys(), key=stable_repr)
        return [
            f"{name}[{stable_repr(k)}]: model {_or_absent(want, k)}, implementation {_or_absent(got, k)}"
            for k in keys
            if k not in want or k not in got or want[k] != got[k]
        ]
    if is_dataclass(want) and type(want) is type(got):
        return [
            f"{name}.{f.name}: model {stable_repr(getattr(want, f.name))}, "
            f"implementation {stable_repr(getattr(got, f.name))}"
            for f in fields(want)
            if getattr(want, f.name) != getattr(got, f.name)
        ]
    return [f"{name}: model {stable_repr(want)}, implementation {stable_repr(got)}"]


def _or_absent(table: dict[object, object], key: object) -> str:
    return stable_repr(table[key]) if key in table else "absent"


def interest(s: model.State) -> dict[str, int]:
    """How many subtle situations a model state holds, by kind (a steering score)."""
    with_worker = [g for g in s.taken.values()] + [g for batch in s.queue for g in batch]
    pairs = {(k, g) for grp in with_worker for k, g in zip(grp.keys, grp.gens, strict=True)}
    superseded = sum(1 for k, g in pairs if (p := s.probes.get(k)) is not None and p.gen != g)
    forced = sum(1 for pair in pairs if pair in s.forced)
    orphans = sum(1 for p in s.probes.values() if p.phase is LookupPhase.IN_FLIGHT and not p.waiters)
    return {
        "answers pending for a superseded generation": superseded,
        "answers pending for a forced miss": forced,
        "late answers pending": len(s.timed_out),
        "orphans in flight": orphans,
        "answers remembered": len(s.memory),
        "lookups served from memory": len(s.recalled),
    }


def stable_repr(value: object) -> str:
    """``repr(value)`` with the items of every set in sorted order, and mappings shown as dicts.

    A set of strings or bytes is printed in the order of their hashes, which
    PYTHONHASHSEED changes from process to process; the failure messages
    print model states full of sets, and ``kvprobe conform --seed N`` must
    print the same report every time.
    """
    if isinstance(value, set | frozenset):
        items = ", ".join(sorted(stable_repr(item) for item in value))
        if isinstance(value, frozenset):
            return f"frozenset({{{items}}})" if items else "frozenset()"
        return f"{{{items}}}" if items else "set()"
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{stable_repr(k)}: {stable_repr(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(stable_repr(item) for item in value) + "]"
    if type(value) is tuple:
        items = ", ".join(stable_repr(item) for item in value)
        return f"({items},)" if len(value) == 1 else f"({items})"
    if is_dataclass(value) and not isinstance(value, type):
        shown = ", ".join(f"{f.name}={stable_repr(getattr(value, f.name))}" for f in fields(value) if f.repr)
        return f"{type(value).__name__}({shown})"
    return repr(value)
