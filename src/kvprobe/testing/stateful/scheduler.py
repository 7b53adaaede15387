"""The scheduler's actions: what the engine calls on the manager, one model action per rule.

Each rule calls the real manager and the reference model
(:mod:`kvprobe.spec.model`) with the same arguments and compares what the
caller sees: the verdict a lookup returns, the phases ``phase()`` reports,
how many outcomes ``drain_results()`` applied.  The rest of the state is
compared after every step by the checks (:mod:`.checks`).
"""

from __future__ import annotations

from collections.abc import Callable

from hypothesis import strategies as st

from kvprobe.spec import model, model_chain
from kvprobe.statemachine import ChainAnswer, ManagerClosedError, ReqContext
from kvprobe.testing.stateful.base import MachineBase, is_open, machine_rule
from kvprobe.testing.stateful.tier import FAILURES, short_name, shown

__all__ = ["SchedulerActions"]


class SchedulerActions(MachineBase):
    """Lookup, Flush, Drain, Cleanup, MarkMiss and Shutdown (and the calls after it)."""

    @machine_rule(lambda o: {"key": st.sampled_from(o.keys), "req": st.sampled_from(o.reqs)}, when=is_open)
    def Lookup(self, key: bytes, req: str) -> None:
        got = self.m.lookup(key, ReqContext(req))
        self.s, want = model.lookup(self.s, key, req)
        if got is not want:
            self.backend.assert_truthful()  # a lying tier is the cause: say so first
        assert got is want, (
            f"Lookup({short_name(key, self.options.keys)}, {req}): the manager answered {shown(got)}, "
            f"the model {shown(want)}"
        )

    def LookupChain(self, keys: list[bytes], req: str, window: int | None = None) -> ChainAnswer:
        """lookup_chain: the model's walk (kvprobe.spec.model_chain), the Lookup
        of each key its window rule allows, in order (each one traced and
        validated as a Lookup event).  Every key the answer counts as
        stored must hold a verdict a backend call gave (ChainHitsAnswered).

        Drawn as an operation of SchedulerStep rather than as a rule of
        its own: a further rule thins out every other rule in a run of
        fixed length (the lying tiers of tests/property were then found
        only with twice the examples).  Each walk may have its own first
        window (``window``, set on the core first; None: the one it has):
        the window follows from the walk, so nothing else changes."""
        if window is not None:
            self.m.core.chain_window = window
        first = self.m.core.chain_window
        answer = self.m.lookup_chain(keys, ReqContext(req))
        asks_before = len(self.s.chain_asks)
        got: tuple[int | bool, ...] = (answer.leading_hits, answer.stopped_at_miss, answer.pending, answer.looked_up)
        want: tuple[int | bool, ...]
        if self.options.chain_mode == "inferred":
            self.s, want, refuted = model_chain.lookup_chain_inferred(
                self.s, keys, req, first or None, frozenset(self.refuted)
            )
            self.refuted = set(refuted)
            got = (*got, answer.inferred)
        else:
            self.s, want = model_chain.lookup_chain(self.s, keys, req, first or None)
        assert got == want, (
            f"lookup_chain({[k.hex() for k in keys]}, {req}): the manager answered {got}, the model says {want} "
            f"(leading_hits, stopped_at_miss, pending, looked_up[, inferred]; first window {first or 'all'})"
        )
        states = self.m.core.states
        counted = keys[: answer.leading_hits]
        if answer.inferred:
            # Inferred hits have no backend answer: the ones this walk probed must.
            probed = {ask.key for ask in self.s.chain_asks[asks_before:]}
            counted = [key for key in counted if key in probed and self.s.probes[key].verdict is True]
        for key in counted:
            state = states.get(key)
            gen = -1 if state is None else state.generation
            # A key served from memory holds the answer of the generation it was recalled from.
            answered = self.s.recalled.get((key, gen), gen)
            assert (key, answered) in self.s.backend_hits and (key, gen) not in self.s.forced, (
                f"ChainHitsAnswered: lookup_chain counted {short_name(key, self.options.keys)} as stored, "
                f"but no backend call answered its generation {gen} stored"
            )
        return answer

    @machine_rule(
        lambda o: {
            "fail": st.just(None)
            if o.manual
            else st.sampled_from([None, *FAILURES, *(("hang",) if o.lookup_timeout_s is not None else ())])
        },
        when=is_open,
    )
    def Flush(self, fail: str | None) -> None:
        """Flush; in thread mode the first group's call may be scripted to fail or hang."""
        if fail == "hang" and self.hung is not None:
            fail = None  # one stuck call at a time keeps the worker's bound on stuck calls out of play
        self.s, groups = model.flush(model.revive(self.s))
        if fail is not None:
            # Groups run concurrently: the scripted failure goes to the first group's call.
            self.backend.mode = fail
            self.backend.mode_for = groups[0].req if groups else None
        self.m.flush()
        if not self.options.manual:
            self._run_thread_worker(groups, fail)

    @machine_rule(lambda o: {"via_phase": st.booleans()}, when=is_open)
    def Drain(self, via_phase: bool) -> None:
        """Apply published outcomes: through drain_results(), or through the
        public phase(), which drains before it answers."""
        if not via_phase:
            # drain_results() first notices a dead worker (which applies the inbox).
            self.s = model.revive(self.s)
        want = len(self.s.inbox)
        self.s = model.drain_all(self.s)
        if via_phase:
            got_phases = [self.m.phase(k) for k in self.options.keys]
            want_phases = [p.phase if (p := self.s.probes.get(k)) else None for k in self.options.keys]
            assert got_phases == want_phases, f"phase() per key {got_phases}, the model {want_phases}"
        else:
            got = self.m.drain_results()
            assert got == want, f"drain_results applied {got} outcomes, the model {want}"

    @machine_rule(lambda o: {"req": st.sampled_from((*o.reqs, "req-unknown"))}, when=is_open)
    def Cleanup(self, req: str) -> None:
        self.m.cleanup(req)
        self.s = model.cleanup(self.s, req)

    @machine_rule(lambda o: {"keys": st.lists(st.sampled_from(o.keys), max_size=3)}, when=is_open)
    def MarkMiss(self, keys: list[bytes]) -> None:
        self.m.mark_miss(keys)
        self.s = model.mark_miss(self.s, keys)
        if self.options.chain_mode == "inferred":
            self.refuted.update(keys)

    @machine_rule(
        lambda o: {"seconds": st.sampled_from((0.5, 1.0, 2.0))},
        when=is_open,
        only=lambda o: o.verdict_cache is not None,
    )
    def Tick(self, seconds: float) -> None:
        """The verdict cache's clock advances (remembered answers age; some expire)."""
        self.now += seconds
        self.s = model.tick(self.s, seconds)

    @machine_rule(
        lambda o: {"req": st.sampled_from(o.reqs), "key": st.sampled_from(o.keys), "later": st.booleans()},
        when=is_open,
        only=lambda o: o.verdict_cache is not None,
    )
    def Revisit(self, req: str, key: bytes, later: bool) -> None:
        """Cleanup then Lookup by the same id: a request finishes and the next one asks.

        A key nobody else waits on is reclaimed in between, so the lookup
        makes a new state: the case the verdict cache serves from memory.
        ``later``: the next request comes exactly the hit TTL later (so a
        remembered "stored" has just expired: the end of a TTL is exclusive).
        """
        self.Cleanup(req)
        cache = self.options.verdict_cache
        if later and cache is not None:
            self.Tick(cache.hit_ttl_s)
        self.Lookup(key, req)

    @machine_rule(lambda o: {"roll": st.integers(0, 7)}, when=is_open)
    def Shutdown(self, roll: int) -> None:
        # Shutdown ends the interesting part of a run, so it happens on one roll in eight.
        if roll != 7:
            return
        self.m.shutdown()
        self.s = model.shutdown(self.s)
        assert len(self.m) == 0, f"len(m) is {len(self.m)} after shutdown"

    @machine_rule(lambda o: {"key": st.sampled_from(o.keys)}, when=lambda self: self.s.closed)
    def after_shutdown(self, key: bytes) -> None:
        """Every call raises ManagerClosedError after shutdown; a second shutdown does nothing."""
        req = self.options.reqs[0]
        calls: list[Callable[[], object]] = [
            lambda: self.m.lookup(key, ReqContext(req)),
            self.m.flush,
            self.m.drain_results,
            lambda: self.m.cleanup(req),
            lambda: self.m.mark_miss([key]),
            lambda: self.m.phase(key),
        ]
        for call in calls:
            try:
                call()
            except ManagerClosedError:
                continue
            raise AssertionError(f"{call} did not raise ManagerClosedError after shutdown")
        self.m.shutdown()  # a second shutdown does nothing
        assert len(self.m) == 0
