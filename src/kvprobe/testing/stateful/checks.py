"""The checks run after every step: the tier's honesty, the model's invariants on both sides, the comparison.

One ``@invariant`` (``contract``) runs every check of ``CHECKS`` in order,
so that a failing example prints one line per step, not one per check:
first ``TierAnswersTruthfully`` (the oracle), then the predicates named as
in ``docs/properties.md``, evaluated on the model and on the abstraction of
the real manager, then ``conforms_to_reference`` (every observable equals
the model's), last ``TierAnswersWellFormed`` (no call of the tier raised or
returned other than one bool per key: the manager tolerates that, and the
model follows it, so it is reported once the manager's handling was
checked).  ``steer`` is not a check: it scores the run for Hypothesis's
targeting phase.
"""

from __future__ import annotations

from dataclasses import replace

from hypothesis.stateful import invariant

from kvprobe.spec import model, model_cache, model_chain
from kvprobe.statemachine import ManualWorker
from kvprobe.testing.stateful.abstraction import (
    COMPARED,
    COMPARED_THREAD,
    abstract_state,
    differences,
    interest,
    stable_repr,
)
from kvprobe.testing.stateful.base import MachineBase

__all__ = ["Checks"]


class Checks(MachineBase):
    """The machine's invariant, one method per check (docs/properties.md names)."""

    def _real(self) -> model.State:
        # Invariants run after every step; abstract the manager once per step.
        # Every change of the abstracted state is an action (a trace event) or a
        # worker move (which changes one of these lengths).
        worker_obj = self.m.worker
        moves = (
            (len(worker_obj.submitted), len(worker_obj.taken), len(worker_obj.timed_out), len(worker_obj.stray))
            if isinstance(worker_obj, ManualWorker)
            else (0, 0, 0, 0)
        )
        key = (len(self.ghosts.events), len(self.m.core.inbox), len(self.backend.calls), *moves)
        if self._cached is None or self._cached[0] != key:
            self._cached = (key, abstract_state(self.m, self.ghosts))
        return self._cached[1]

    def _check(self, name: str) -> None:
        holds = model.INVARIANTS[name]
        assert holds(self.s), f"{name} broken by the reference model itself: {stable_repr(self.s)}"
        real = self._real()
        assert holds(real), f"{name} broken by the implementation: {stable_repr(real)}"

    #: The checks run after every step, in this order (one ``@invariant``, so a
    #: failing example prints one line per step, not one per check).
    CHECKS = (
        "TierAnswersTruthfully",
        "TypeOK",
        "EnqueueOnce",
        "NoDuplicateProbe",
        "StaleGenerationDropped",
        "VerdictIffResolved",
        "ForcedMissSticks",
        "ReverseIndexConsistent",
        "NothingLeaks",
        "ChainStopsAtMiss",
        "ChainWindowWaits",
        "ChainHitsAnswered",
        "CacheProvenance",
        "steer",
        "conforms_to_reference",
        "TierAnswersWellFormed",
    )

    @invariant()
    def contract(self) -> None:
        """Every check of ``CHECKS``; the first that fails names itself."""
        s = self.s  # the tables, not the counters (a no-op Cleanup still counts one)
        tables = (s.probes, s.requests, s.step_batch, s.outstanding, s.queue, s.taken, s.timed_out, s.inbox)
        now = (*tables, s.closed, frozenset(self.stored), len(self.backend.calls))
        if self._fingerprint is not None:
            self.effects.append(now != self._fingerprint)
        self._fingerprint = now
        for name in self.CHECKS:
            getattr(self, name)()

    def TierAnswersTruthfully(self) -> None:
        """Every answer the tier gave matched what the factory stored (and came in time)."""
        self.backend.assert_truthful()

    def TypeOK(self) -> None:
        self._check("TypeOK")

    def EnqueueOnce(self) -> None:
        self._check("EnqueueOnce")

    def NoDuplicateProbe(self) -> None:
        self._check("NoDuplicateProbe")

    def StaleGenerationDropped(self) -> None:
        self._check("StaleGenerationDropped")

    def VerdictIffResolved(self) -> None:
        self._check("VerdictIffResolved")

    def ForcedMissSticks(self) -> None:
        self._check("ForcedMissSticks")

    def ReverseIndexConsistent(self) -> None:
        self._check("ReverseIndexConsistent")

    def NothingLeaks(self) -> None:
        self._check("NothingLeaks")

    # The chain walk's invariants (kvprobe.spec.model_chain), on the model and on the
    # implementation (its history recorded from the walks' trace events).  Counted hits
    # are checked on the implementation by LookupChain itself (its answer against the
    # model's record of the backend's answers).

    def _check_chain(self, name: str, real: bool = True) -> None:
        holds = model_chain.CHAIN_INVARIANTS[name]
        assert holds(self.s), f"{name} broken by the reference model itself"
        if real:
            broken = [a for a in self._real().chain_asks if not holds(model.State(chain_asks=(a,)))]
            assert not broken, f"{name} broken by the implementation: {broken[0]}"

    def ChainStopsAtMiss(self) -> None:
        self._check_chain("ChainStopsAtMiss")

    def ChainWindowWaits(self) -> None:
        self._check_chain("ChainWindowWaits")

    def ChainHitsAnswered(self) -> None:
        self._check_chain("ChainHitsAnswered", real=False)

    def CacheProvenance(self) -> None:
        """What the verdict cache remembers and serves is the backend's answer (kvprobe.spec.model_cache).

        On the implementation, its memory and recalls are judged against the
        model's record of what the backend answered and what MarkMiss forgot
        (the generations are the same on both sides: the tables are compared).
        """
        holds = model_cache.CACHE_INVARIANTS["CacheProvenance"]
        assert holds(self.s), f"CacheProvenance broken by the reference model itself: {stable_repr(self.s.memory)}"
        real = self._real()
        judged = replace(self.s, memory=real.memory, recalled=real.recalled, probes=real.probes, forced=real.forced)
        assert holds(judged), (
            f"CacheProvenance broken by the implementation: memory {stable_repr(real.memory)}, "
            f"recalled {stable_repr(real.recalled)}"
        )

    def steer(self) -> None:
        """Guide generation toward the interleavings where the lifecycle is subtle.

        Not a check: the peak of each score is reported to
        ``hypothesis.target`` at teardown, so the targeting phase mutates
        the runs that reach these situations.
        """
        for label, score in interest(self.s).items():
            self._best[label] = max(self._best.get(label, 0), score)

    def TierAnswersWellFormed(self) -> None:
        """Every call of the tier returned one bool per key, without raising.

        Checked last: the model was told how the manager fails such a call
        (see ``MachineBase._answered``), so by now the manager was found to
        handle it as the contract says, and the report can say so.
        """
        self.backend.assert_well_formed(
            ". The tier broke the backend contract (one bool per key, no exception); the manager handled "
            "it as the contract says (checked against the reference model): its keys resolved as MISS "
            "and stats.backend_errors counted the call"
        )

    def conforms_to_reference(self) -> None:
        """Every observable equals the model's (runs after the named invariants)."""
        real = self._real()
        # The threaded worker's queue and taken groups are not observable.
        problems = differences(self.s, real, COMPARED if self.options.manual else COMPARED_THREAD)
        assert not problems, "implementation diverges from the reference model:\n" + "\n".join(problems)
        assert len(self.m) == len(self.s.probes), f"len(m) is {len(self.m)}, the model holds {len(self.s.probes)}"
        if not self.s.closed:
            got = [self.m.core.phase(k) for k in self.options.keys]
            want = [p.phase if (p := self.s.probes.get(k)) else None for k in self.options.keys]
            assert got == want, f"phases {got}, the model {want}"
        calls, expected = self.backend.calls, self.expected_calls
        if not self.options.manual:
            # Concurrent groups call the backend in any order.
            calls, expected = sorted(calls, key=repr), sorted(expected, key=repr)
        assert calls == expected, f"backend calls {self.backend.calls}, the model expects {self.expected_calls}"
        assert self.ghosts.checker.count == len(self.ghosts.events)
