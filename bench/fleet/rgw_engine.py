"""One engine process of ``bench.fleet.rgw``: a scheduler loop over kvprobe's object tier.

Run as ``python -m bench.fleet.rgw_engine PLAN.json`` by :mod:`bench.fleet.rgw`
(loopback only; the parent stops it by its pid if it overruns).  It builds a
:class:`~kvprobe.backends.nixl_obj.NixlObjBackend` on the plan's endpoint
(the rate-capping proxy) with the library's defaults (pacing on, one pace
for the host unless the plan names a ``pace_scope``) and an
:class:`~kvprobe.statemachine.AsyncLookupManager` over it with the plan's
``chain_window`` and ``chain_window_growth`` (the library's defaults when
the plan names none), the plan's ``chain_mode`` (``"exact"``, the library's
default, when the plan names none; ``"inferred"`` is valid here because the
store is filled prefix-closed) and ``lookup_timeout_s`` a second above the
backend's deadline (as ``nixl_obj``'s docstring advises); prints ``ready``; waits for
a line on stdin (every engine starts together); then steps every
``step_s``: admits the requests whose arrival time has come, calls
``lookup_chain`` on each live one, settles a request once its answer is
decided or its deadline has passed (``cleanup``), and ``flush``\\ es.  When
every request is settled it prints one JSON line (the requests' outcomes,
the backend's ``stats`` and ``pacing``, the pace sampled every second),
shuts the manager down and exits, leaving the backend to kvprobe's own
exit handling, as a serving process that simply ends would.

It writes nothing to stderr itself: every stderr line is the library's (or
NIXL's).
"""

from __future__ import annotations

import hashlib
import json
import sys
import time
from typing import Any

CHAIN = 64  # blocks of every prompt


def prompt_keys(prompt: int) -> list[bytes]:
    """The ``CHAIN`` keys of pool prompt ``prompt``: vLLM-like, a 16-byte hash then a 4-byte group index."""
    return [hashlib.sha256(b"fleet-rgw|%d|%d" % (prompt, i)).digest()[:16] + bytes(4) for i in range(CHAIN)]


def run(plan: dict[str, Any]) -> dict[str, Any]:
    """Serve ``plan["requests"]`` (``[arrival_s, prompt, stored]`` each) and return what happened.

    Raises:
        InvalidValueError: the plan's ``chain_mode`` is neither ``"exact"`` nor ``"inferred"``, or its
            ``chain_window`` or ``chain_window_growth`` is one the manager refuses.
    """
    from kvprobe.backends.nixl_obj import NixlObjBackend
    from kvprobe.statemachine import AsyncLookupManager, ReqContext

    backend = NixlObjBackend(
        bucket=plan["bucket"],
        endpoint_url=plan["endpoint_url"],
        access_key=plan["access_key"],
        secret_key=plan["secret_key"],
        **({"pace_scope": plan["pace_scope"]} if "pace_scope" in plan else {}),
    )
    m = AsyncLookupManager(
        backend,
        name=f"engine-{plan['engine']}",
        lookup_timeout_s=backend.deadline_s + 1.0,
        chain_mode=plan.get("chain_mode", "exact"),
        chain_window=plan.get("chain_window"),  # None: the object tier's (NixlObjBackend.chain_schedule)
        chain_window_growth=plan.get("chain_window_growth"),
        start_backlog=plan.get("start_backlog"),
    )
    print("ready", flush=True)
    sys.stdin.readline()
    deadline_s, step_s = float(plan["deadline_s"]), float(plan["step_s"])
    waiting = sorted(plan["requests"])
    live: dict[str, tuple[float, int, int, list[bytes]]] = {}
    progress: dict[str, list[list[float]]] = {}  # (seconds after arrival, leading hits) at each change
    outcomes: list[dict[str, Any]] = []
    pace: list[list[float | None]] = []
    started = time.monotonic()
    next_sample, longest_step, n = 0.0, 0.0, 0
    while waiting or live:
        step_start = time.monotonic()
        now = step_start - started
        while waiting and waiting[0][0] <= now:
            arrival, prompt, stored = waiting.pop(0)
            live[f"r{n}"] = (arrival, prompt, stored, prompt_keys(prompt))
            n += 1
        for req_id, (arrival, prompt, stored, keys) in list(live.items()):
            answer = m.lookup_chain(keys, ReqContext(req_id))
            seen = progress.setdefault(req_id, [[0.0, 0]])
            if answer.leading_hits != seen[-1][1]:
                seen.append([round(now - arrival, 3), answer.leading_hits])
            if answer.decided or now - arrival >= deadline_s:
                outcomes.append(
                    {
                        "prompt": prompt,
                        "stored": stored,
                        "leading_hits": answer.leading_hits,
                        "inferred": answer.inferred,
                        "decided": answer.decided,
                        "settled_after_s": round(now - arrival, 4),
                        "progress": progress.pop(req_id),
                    }
                )
                m.cleanup(req_id)
                del live[req_id]
        m.flush()
        if now >= next_sample:
            pace.append([round(now, 2), backend.pacing["rate"]])
            next_sample += 1.0
        longest_step = max(longest_step, time.monotonic() - step_start)
        time.sleep(max(0.0, step_s - (time.monotonic() - step_start)))
    result = {
        "engine": plan["engine"],
        "outcomes": outcomes,
        "stats": backend.stats,
        "pacing": backend.pacing,
        "pace": pace,
        "longest_step_s": round(longest_step, 4),
        "walks_held": m.walks_held,
        "elapsed_s": round(time.monotonic() - started, 2),
    }
    m.shutdown()
    return result


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m bench.fleet.rgw_engine PLAN.json", file=sys.stderr)
        return 2
    with open(args[0]) as f:
        plan = json.load(f)
    print(json.dumps(run(plan)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
