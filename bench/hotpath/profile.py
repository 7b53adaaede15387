"""Where the scheduler thread's time goes: a profile of the verified manager.

Two views, both printed as Markdown:

1. Share of scheduler-thread CPU time per operation in the hot-path workload
   (from :mod:`bench.hotpath.cost`'s tallies, verified and baseline side by side).
2. The cost of each step of ``LookupCore.lookup`` on the two hot paths
   (a resolved key the request already waits on; a new key), timed with
   ``timeit`` on statements that do one step each, against the whole call.
   The steps overlap a little (each statement pays its own loop), so read
   them as proportions, not an exact sum.

Run: ``python -m bench.hotpath.profile``.
"""

from __future__ import annotations

import itertools
import sys
import timeit
from collections.abc import Sequence

from bench.common import Workload
from bench.hotpath.cost import CLASSES, measure
from kvprobe.statemachine import AsyncLookupManager, ReqContext
from kvprobe.statemachine.core import ProbeState, WaitingRequest

__all__ = ["main"]


def shares(steps: int = 60, repeats: int = 3) -> str:
    res = measure(Workload(steps=steps), repeats)
    lines = ["| operation | verified share | baseline share |", "|---|---|---|"]
    tot = {name: sum(t.total_ns() for t in tallies) for name, tallies in res.items()}
    for cls in CLASSES:
        v = sum(t.ns[cls] for t in res["verified"]) / tot["verified"]
        b = sum(t.ns[cls] for t in res["baseline"]) / tot["baseline"]
        lines.append(f"| {cls} | {v:.1%} | {b:.1%} |")
    return "\n".join(lines)


def steps(number: int = 200_000) -> str:
    m = AsyncLookupManager(_Tier(), worker="manual")
    core = m.core
    ctx = ReqContext("r")
    key = b"k" * 20
    m.lookup(key, ctx)
    m.flush()
    m.worker.run_all()  # type: ignore[attr-defined]
    m.lookup(key, ctx)
    state = core.states[key]
    fresh = itertools.count()
    env = {
        "m": m, "core": core, "ctx": ctx, "key": key, "state": state, "states": core.states,
        "inbox": core.inbox, "ProbeState": ProbeState, "batch": [],
        "fresh": fresh, "requests": {"r": WaitingRequest("r", ctx)}, "owner": WaitingRequest("r", ctx),
    }  # fmt: skip

    def cost(stmt: str, setup: str = "pass") -> float:
        return min(timeit.repeat(stmt, setup, globals=env, number=number, repeat=5)) / number * 1e9

    floor = cost("pass")
    rows = [
        ("resolved: whole m.lookup(key, ctx)", cost("m.lookup(key, ctx)")),
        ("  inbox check (if self.inbox)", cost("if inbox: pass")),
        ("  states.get(key)", cost("states.get(key)")),
        ("  req_context.req_id", cost("ctx.req_id")),
        ("  req_id in state.waiters", cost("'r' in state.waiters")),
        ("  return state.verdict", cost("state.verdict")),
        ("new key: allocate a ProbeState", cost("ProbeState()")),
        ("  generation number (an int counter)", cost("core._last_generation += 1")),
        ("  type(key) is bytes", cost("type(key) is bytes")),
        (
            "  reverse index: requests.get + list.append",
            cost("requests.get('r').states.append(state)", "requests['r'].states.clear()"),
        ),
        ("  step batch append of the state", cost("batch.append(state)", "batch.clear()")),
    ]
    m.shutdown()
    lines = [f"| step | ns (min of 5, loop floor {floor:.0f} ns subtracted) |", "|---|---|"]
    lines += [f"| {name} | {max(0.0, ns - floor):.0f} |" for name, ns in rows]
    return "\n".join(lines)


class _Tier:
    def batch_lookup(self, keys: Sequence[bytes], req_context: object) -> list[bool]:
        return [True] * len(keys)


def main(argv: Sequence[str] | None = None) -> int:
    del argv
    print("Share of scheduler-thread CPU time (hot-path workload, 60 steps x 3)\n")
    print(shares())
    print("\nSteps of a lookup (timeit)\n")
    print(steps())
    return 0


if __name__ == "__main__":
    sys.exit(main())
