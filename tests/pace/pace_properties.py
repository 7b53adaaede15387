"""The pace's named properties over whole runs on the virtual clock, for ``PaceCore`` or a mutant of it.

Each ``check_*`` function takes a pace class and the run's parameters, and
raises ``AssertionError`` starting with the property's name.  The stated
bounds are the ones docs/pace.md prints:

* ``RecoveryWithinBound``: once every HEAD is answered, the rate a pace
  at its floor allows (reservations without deadlines; what the engine
  sends is ``SendsRecoverWithinBound``'s) is back at the store's rate within
  :func:`~kvprobe.spec.pace_model.recovery_bound_s` (about 28 s for
  2,000 HEAD/s with queries of 4 HEADs; 18 s measured).
* ``SendsRecoverWithinBound``: the same bound on what goes out, through
  the object engine on the virtual clock (calls with deadlines, their
  reservations refused when the pace cannot start them in time): from a
  pace at its floor, the HEADs sent over a second reach 90 % of what the
  calls ask within ``recovery_bound_s`` of that rate.
* ``NoiseAtCapacity``: issue 39's run against a store whose answers queue
  beyond 600-1,000 HEAD/s, failing up to 10 % of HEADs at random, keeps
  within 5 points of the stored keys it keeps unpaced (99 % at most asked).
* ``NoiseKeepsCapacity``: against a store serving 2,000 HEAD/s that fails
  up to 20 % of HEADs at random, a client with HEADs always waiting sends
  at least 90 % of that rate.
* ``NoiseKeepsDemand``: a client whose own concurrency, not the store,
  bounds its sends (``in_flight`` queries of ``heads`` HEADs, each
  answered after about ``rtt_s``), against a store that fails up to 20 %
  of HEADs at random whatever it is sent, sends at least 90 % of what the
  same client sends unpaced.
* ``FairShare``: N paces with HEADs always waiting, sharing one bucket
  capped at ``cap`` HEAD/s, each send within ``[0.5, 2]`` times
  ``cap / N`` over the second half of 40 s, and together within
  ``[0.8, 1.2]`` times ``cap`` (no collapse, no overrun).
* ``FleetWithinCap``: the same paces together send within ``[0.5, 1.5]``
  times ``cap`` over the second half of 40 s: a decrease on a window
  failing more than ``LOAD_SHARE`` is never undone, so no pace goes back
  to a rate the bucket refused (``FairShare``'s per-pace band does not
  hold yet: docs/pace.md).
* ``NearCap``: one pace whose demand is 2-10 % above a bucket capped at
  400 HEAD/s (calls every 0.1 s, throttled queries retried) has the bucket
  serve at least 95 % of its cap over the second half of 12 s.
"""

from __future__ import annotations

import math
from typing import Any

from hypothesis import strategies as st
from pace_sim import (
    CappedStore,
    ServedStore,
    VirtualLookup,
    capped_run,
    operator_run,
    saturating_clients,
    served_heads_per_s,
)

from kvprobe.backends._pace_core import PaceCore
from kvprobe.spec.pace_model import recovery_bound_s

__all__ = [
    "DEMAND_RUNS",
    "check_fair_share",
    "check_fleet_within_cap",
    "check_near_cap",
    "check_noise_at_capacity",
    "check_noise_keeps_capacity",
    "check_noise_keeps_demand",
    "check_recovery_within_bound",
    "check_sends_recover_within_bound",
]


def check_recovery_within_bound(core_class: type[PaceCore], target: float, heads: int) -> float:
    """Seconds from the floor back to ``target`` HEAD/s with every HEAD answered 5 ms after it starts."""
    core = core_class(0.0, start_rate=0.5)
    bound = recovery_bound_s(
        target, heads=heads, floor=core.floor, c=core.c, beta=core.beta, window_max_s=core.window_max_s
    )
    now = 0.0
    while now <= bound:
        rate = core.rate(now)
        if rate is None or rate >= target:
            return now
        start = core.reserve(now, heads)
        assert start is not None, "RecoveryWithinBound: a reservation without a deadline was refused"
        core.answered(start + 0.005, start, heads)
        now = start
    raise AssertionError(f"RecoveryWithinBound: not back at {target} HEAD/s after {bound:.1f} s (at {rate})")


def check_sends_recover_within_bound(core_class: type[PaceCore], chunk: int, keys: int, seed: int) -> float:
    """Seconds until the engine, paced from the floor, sends 90 % of what it sends unpaced.

    Its calls (``keys`` keys every 0.1 s, 5 s deadlines, queries of
    ``chunk`` HEADs, a 2,000 HEAD/s store) keep coming while the pace
    refuses them: a refusal must not leave the rate where nothing measured
    it.  The target is what the same calls send unpaced (its agents' round
    trips bound small queries).
    """

    def sends(pace: PaceCore | None, until: float, start: float, enough: float) -> tuple[float, float]:
        """(when, HEADs sent over the second before): at ``until``, or once that reaches ``enough``."""
        lookup = VirtualLookup(ServedStore(2000.0), pace, chunk=chunk, seed=seed)
        now, sent = 0.0, 0.0
        while now <= until and sent < enough:
            lookup.call(now, [i % 2 == 0 for i in range(keys)])
            now = round(now + 0.1, 6)
            lookup.run_until(now)
            sent = served_heads_per_s(lookup.starts, max(start, now - 1.0), now)
        return now, sent

    _, target = sends(None, 10.0, 2.0, math.inf)
    core = core_class(0.0, start_rate=0.5)
    bound = recovery_bound_s(
        target, heads=chunk, floor=core.floor, c=core.c, beta=core.beta, window_max_s=core.window_max_s
    )
    at, sent = sends(core, bound, 0.0, 0.9 * target)
    if sent < 0.9 * target:
        raise AssertionError(
            f"SendsRecoverWithinBound: {sent:.0f} HEAD/s sent, not 90 % of {target:.0f}, {bound:.1f} s after the floor"
            f" ({core.stats.refused} reservations refused)"
        )
    return at


def check_noise_at_capacity(core_class: type[PaceCore], rate: float, loss: float, seed: int) -> float:
    """Stored keys kept by issue 39's run at a store answering at most ``rate`` HEAD/s, ``loss`` failing at random."""
    paced = operator_run(ServedStore(rate, loss), seed=seed, pace=core_class(0.0))
    unpaced = operator_run(ServedStore(rate, loss), seed=seed, unpaced=True)
    assert paced.absent_true == 0, "NoiseAtCapacity: an absent key answered stored"
    assert paced.kept >= min(0.99, unpaced.kept) - 0.05, (
        f"NoiseAtCapacity: {paced.kept:.3f} of stored keys kept paced, {unpaced.kept:.3f} unpaced"
        f" ({rate:.0f} HEAD/s, {loss:.1%} random 503s; {paced.pace.stats if paced.pace else None})"
    )
    return paced.kept


def check_noise_keeps_capacity(core_class: type[PaceCore], loss: float, seed: int, heads: int) -> float:
    """The share of a 2,000 HEAD/s store's rate a saturating client sends under ``loss`` random 503s."""
    sends = saturating_clients([core_class(0.0)], ServedStore(2000.0, loss), seconds=30.0, seed=seed, heads=heads)
    share = served_heads_per_s(sends[0], 5.0, 30.0) / 2000.0
    assert share >= 0.9, f"NoiseKeepsCapacity: {share:.3f} of the store's rate under {loss:.0%} random 503s"
    return share


#: The runs ``NoiseKeepsDemand`` draws (its test and its mutants' search): ``@given(**DEMAND_RUNS)``.
DEMAND_RUNS: dict[str, st.SearchStrategy[Any]] = {
    "loss": st.floats(0.0, 0.20),
    "seed": st.integers(0, 2**16),
    "heads": st.sampled_from([1, 2, 4]),
    "in_flight": st.sampled_from([4, 8, 16]),
    "rtt_s": st.floats(0.005, 0.1),
}


def check_noise_keeps_demand(
    core_class: type[PaceCore], loss: float, seed: int, heads: int, in_flight: int, rtt_s: float
) -> float:
    """What a client bound by its concurrency sends paced, per what it sends unpaced, under ``loss`` random 503s."""

    def sent(pace: PaceCore | None) -> float:
        store = ServedStore(1e6, loss, rtt_s=rtt_s)  # no limit of its own: the client's in_flight bounds the rate
        sends = saturating_clients([pace], store, seconds=30.0, seed=seed, heads=heads, in_flight=in_flight)
        return served_heads_per_s(sends[0], 5.0, 30.0)

    paced = core_class(0.0)
    share = sent(paced) / sent(None)
    assert share >= 0.9, (
        f"NoiseKeepsDemand: {share:.3f} of the unpaced sends under {loss:.1%} random 503s"
        f" ({in_flight} queries of {heads} in flight, {rtt_s * 1000:.0f} ms; {paced.stats})"
    )
    return share


def check_fair_share(core_class: type[PaceCore], n: int, cap: float, seed: int) -> list[float]:
    """Each of ``n`` paces' sends over the second half of 40 s, as a multiple of ``cap / n``."""
    paces = [core_class(0.0) for _ in range(n)]
    sends = saturating_clients(paces, CappedStore(cap), seconds=40.0, seed=seed, heads=1)
    shares = [served_heads_per_s(s, 20.0, 40.0) / (cap / n) for s in sends]
    total = sum(shares) / n
    assert 0.8 <= total <= 1.2, f"FairShare: together {total:.2f} of the cap {cap} ({n} paces)"
    assert all(0.5 <= s <= 2.0 for s in shares), f"FairShare: shares {[round(s, 2) for s in shares]} of cap/{n}"
    return shares


def check_fleet_within_cap(core_class: type[PaceCore], n: int, cap: float, seed: int) -> float:
    """What ``n`` paces sharing a bucket capped at ``cap`` send together over the second half of 40 s, per ``cap``."""
    paces = [core_class(0.0) for _ in range(n)]
    sends = saturating_clients(paces, CappedStore(cap), seconds=40.0, seed=seed, heads=1)
    total = sum(served_heads_per_s(s, 20.0, 40.0) for s in sends) / cap
    assert 0.5 <= total <= 1.5, f"FleetWithinCap: {n} paces send {total:.2f} times the cap {cap} together"
    return total


def check_near_cap(core_class: type[PaceCore], demand: float, seed: int) -> float:
    """The share of a 400 HEAD/s bucket's cap served to one pace asked ``demand`` times it, over seconds 6-12."""
    run = capped_run(core_class(0.0), cap=400.0, demand=demand, seconds=12.0, seed=seed)
    assert run.served_share >= 0.95, (
        f"NearCap: the bucket served {run.served_share:.3f} of its cap to a demand {demand:.2f} times it"
        f" ({run.pace.stats.decreases} decreases, {run.throttled:.3f} throttled)"
    )
    return run.served_share
