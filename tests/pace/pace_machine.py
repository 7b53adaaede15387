"""A stateful Hypothesis machine running a pace against the reference model (``kvprobe.spec.pace_model``).

The machine is the pace's caller on a virtual clock: it asks for HEADs
(with and without a deadline), gives a held reservation back, reports each
query's outcome (answered, failed, failed with a ``Retry-After``), and sends
whole windows of traffic with a failure pattern drawn by Hypothesis, so the
pace's decreases, checks, undos and regrowth are all reached.  Every step is
recorded in a :class:`PaceModel`, which raises the named rule that broke.
:func:`pace_machine` builds it for a pace class (``PaceCore`` or a mutant).
"""

from __future__ import annotations

import copy
import math

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from kvprobe.backends._pace_core import HOLD_PROBE_S, PaceCore
from kvprobe.spec.pace_model import Grant, Outcome, PaceModel

__all__ = ["pace_machine"]


def pace_machine(core_class: type[PaceCore] = PaceCore) -> type[RuleBasedStateMachine]:
    """The machine class for paces of ``core_class``."""

    class PaceMachine(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            self.now = 0.0
            self.core: PaceCore | None = None
            self.model: PaceModel | None = None
            self.flying: list[tuple[int, float, int]] = []  # (grant, start, heads) not yet answered
            self.held: list[tuple[int, float, int]] = []  # granted for a start still ahead
            self.ids = 0

        @precondition(lambda self: self.core is None)
        @rule(start_rate=st.one_of(st.none(), st.floats(0.5, 3000.0)), window_heads=st.sampled_from([8, 64]))
        def create(self, start_rate: float | None, window_heads: int) -> None:
            self.core = core_class(0.0, start_rate=start_rate, window_heads=window_heads)
            self.model = PaceModel(
                self.core.floor,
                self.core.burst_s,
                self.core.max_hold_s,
                HOLD_PROBE_S,
                load_share=PaceCore.LOAD_SHARE,
                beta=self.core.beta,
            )

        def _pace(self) -> tuple[PaceCore, PaceModel]:
            assert self.core is not None and self.model is not None
            return self.core, self.model

        @precondition(lambda self: self.core is not None)
        @rule(dt=st.floats(0.0, 3.0))
        def advance(self, dt: float) -> None:
            self.now += dt
            still = []
            for entry in self.held:
                (self.flying if entry[1] <= self.now else still).append(entry)
            self.held = still

        @precondition(lambda self: self.core is not None)
        @rule(heads=st.integers(1, 16), slack=st.one_of(st.just(math.inf), st.floats(0.0, 5.0)))
        def reserve(self, heads: int, slack: float) -> None:
            core, model = self._pace()
            not_after = self.now + slack
            earliest = copy.deepcopy(core).reserve(self.now, heads)  # what it would answer with no deadline
            rate = core.rate(self.now)
            start = core.reserve(self.now, heads, not_after)
            if start is None:
                model.refused(self.now, not_after, earliest)
                return
            self.ids += 1
            model.granted(Grant(self.ids, self.now, start, heads, rate))
            (self.flying if start <= self.now else self.held).append((self.ids, start, heads))

        @precondition(lambda self: self.core is not None and bool(self.held))
        @rule()
        def give_back(self) -> None:
            # The backend gives back only a reservation still ahead (a call's
            # held query at its deadline); one whose start has passed went out.
            core, model = self._pace()
            self.advance(0.0)
            if not self.held:
                return
            ident, _, heads = self.held.pop()
            core.release(self.now, heads)
            model.released(ident)

        @precondition(lambda self: self.core is not None and bool(self.flying))
        @rule(
            failed=st.booleans(),
            retry_after=st.one_of(st.none(), st.floats(0.0, 60.0)),
            rtt=st.floats(0.001, 0.5),
        )
        def outcome(self, failed: bool, retry_after: float | None, rtt: float) -> None:
            core, model = self._pace()
            _, start, heads = self.flying.pop(0)
            self.now = max(self.now, start + rtt)
            self._outcome(core, model, start, heads, failed, retry_after if failed else None)

        def _outcome(
            self,
            core: PaceCore,
            model: PaceModel,
            start: float,
            heads: int,
            failed: bool,
            retry_after: float | None,
        ) -> None:
            before, stats = core.rate(self.now), copy.copy(core.stats)
            # When the pace's open window began: the one fact taken from it;
            # what the window held is counted by the model from the outcomes.
            window = core._window
            model.outcome_seen(Outcome(start, heads, failed))
            if failed:
                core.failed(self.now, start, heads, retry_after)
                if retry_after is not None:
                    model.told_to_wait(self.now, retry_after)
            else:
                core.answered(self.now, start, heads)
                model.answer_seen(self.now, start)
            decreased = core.stats.decreases > stats.decreases
            undone = core.stats.undone > stats.undone
            after = core.rate(self.now)
            model.rate_seen(before, after, decreased=decreased, undone=undone)
            if core._window is not window:  # a new window: this outcome closed the last one, judged
                model.window_judged(self.now, window.start, before, after, decreased=decreased, undone=undone)

        @precondition(lambda self: self.core is not None)
        @rule(
            pattern=st.lists(st.booleans(), min_size=8, max_size=80),
            heads=st.integers(1, 16),
            rtt=st.floats(0.002, 0.05),
        )
        def traffic(self, pattern: list[bool], heads: int, rtt: float) -> None:
            """Queries sent as the pace allows, each answered ``rtt`` later, failed where ``pattern`` says."""
            core, model = self._pace()
            for failed in pattern:
                rate = core.rate(self.now)
                start = core.reserve(self.now, heads)
                assert start is not None
                self.ids += 1
                model.granted(Grant(self.ids, self.now, start, heads, rate))
                self.now = max(self.now, start + rtt)
                self._outcome(core, model, start, heads, failed, None)

        @precondition(lambda self: self.core is not None)
        @rule(
            every=st.integers(2, 20),
            heavy=st.booleans(),
            count=st.integers(8, 64),
            heads=st.sampled_from([1, 4]),
            rtt=st.floats(0.002, 0.05),
        )
        def shaped_traffic(self, every: int, heavy: bool, count: int, heads: int, rtt: float) -> None:
            """Queries failing one in ``every`` (or all but one in ``every`` if ``heavy``): a steady share.

            Random booleans rarely repeat one share window after window, and
            the pace's noise, undo and holdoff need that to be reached.
            """
            self.traffic([(i % every == 0) != heavy for i in range(count)], heads, rtt)

        @invariant()
        def rate_is_finite(self) -> None:
            if self.core is not None:
                rate = self.core.rate(self.now)
                assert rate is None or math.isfinite(rate), f"RateFloor: the rate is {rate}"

    PaceMachine.__name__ = f"PaceMachine[{core_class.__name__}]"
    return PaceMachine
