"""Memory: bytes per probe state and per waiting request, and the table under churn.

Measured with ``tracemalloc`` (Python allocations only; the keys themselves
are allocated before the snapshot, since the engine owns them anyway):

* per probe state: one request looks up N new keys (PENDING, with this
  step's batch entry), then after the flush and the answer (RESOLVED);
* per waiting request: a second request joins all N keys (one more
  request id in each state's waiters and one more reverse-index entry), and
  R requests of one key each (the per-request overhead);
* churn: the scheduler-shaped workload of :mod:`bench.hotpath.cost` for many
  steps; at every step ``len(m)`` is compared with the number of distinct
  keys that live requests wait on, and traced memory is sampled.

Run: ``python -m bench.hotpath.memory [--quick]``.
"""

from __future__ import annotations

import argparse
import gc
import sys
import tracemalloc
from collections.abc import Callable, Sequence
from typing import Any

from bench.common import Impl, Row, Workload, baseline_impl, verified_impl
from kvprobe.statemachine import ReqContext

__all__ = ["main", "measure", "rows"]


def _delta(action: Callable[[], None]) -> int:
    gc.collect()
    before = tracemalloc.get_traced_memory()[0]
    action()
    gc.collect()
    return tracemalloc.get_traced_memory()[0] - before


def per_state(make: Callable[[], Impl], n: int = 20_000, r: int = 2_000) -> dict[str, float]:
    impl = make()
    m: Any = impl.manager
    keys = [i.to_bytes(16, "little") + b"\0\0\0\0" for i in range(n)]
    a, b = ReqContext("a"), ReqContext("b")
    solo = [ReqContext(f"s{i}") for i in range(r)]
    solo_keys = [(n + i).to_bytes(16, "little") + b"\0\0\0\0" for i in range(r)]
    out: dict[str, float] = {}

    def ask(ctx: ReqContext) -> Callable[[], None]:
        def run() -> None:
            for k in keys:
                m.lookup(k, ctx)

        return run

    out["pending state (incl. batch entry)"] = _delta(ask(a)) / n
    out["second request joining, per key"] = _delta(ask(b)) / n

    def resolve() -> None:
        m.flush()
        while impl.pump():
            pass
        m.lookup(keys[0], a)  # applies the published results

    out["after flush + answer, per key (change)"] = _delta(resolve) / n

    def solos() -> None:
        for ctx, k in zip(solo, solo_keys, strict=True):
            m.lookup(k, ctx)

    out["request with one key (state + request)"] = _delta(solos) / r
    m.shutdown()
    return out


def churn(make: Callable[[], Impl], workload: Workload) -> dict[str, float]:
    impl = make()
    m: Any = impl.manager
    submitted = m.worker.submitted if impl.name == "verified" else m.submitted
    worst = 0.0
    samples: list[int] = []
    last: list[Any] = []
    gc.collect()
    for step, waiting, finishing in workload.schedule():
        last = [r for r in waiting if r not in finishing]
        for req in waiting:
            for key in req.keys:
                m.lookup(key, req.ctx)
        m.flush()
        while len(submitted) > 1:
            impl.pump()
        for req in finishing:
            m.cleanup(req.ctx.req_id)
        live_keys = {k for req in waiting if req not in finishing for k in req.keys}
        worst = max(worst, len(m) / max(1, len(live_keys)))
        if step % 10 == 0:
            gc.collect()
            samples.append(tracemalloc.get_traced_memory()[0])
    # The schedule stops with requests still waiting: finish them too.
    for req in last:
        m.cleanup(req.ctx.req_id)
    while impl.pump():
        pass
    m.drain_results()
    left = len(m)
    m.shutdown()
    half = len(samples) // 2
    growth = (samples[-1] - samples[half]) / max(1, samples[half]) if half else 0.0
    return {"max len/live keys": worst, "len after all cleaned": float(left), "traced growth 2nd half": growth}


def measure(quick: bool) -> dict[str, dict[str, dict[str, float]]]:
    tracemalloc.start()
    try:
        n = 5_000 if quick else 20_000
        out: dict[str, dict[str, dict[str, float]]] = {}
        for make in (verified_impl, baseline_impl):
            name = make().name
            out[name] = {
                "per_state": per_state(make, n=n, r=n // 10),
                "churn": churn(make, Workload(steps=60 if quick else 300)),
            }
        return out
    finally:
        tracemalloc.stop()


def report(res: dict[str, dict[str, dict[str, float]]]) -> str:
    lines = ["| measure | verified | baseline | ratio |", "|---|---|---|---|"]
    for metric in res["verified"]["per_state"]:
        v, b = res["verified"]["per_state"][metric], res["baseline"]["per_state"][metric]
        ratio = f"{v / b:.2f}" if v > 0 and b > 0 else ""
        lines.append(f"| bytes: {metric} | {v:.0f} | {b:.0f} | {ratio} |")
    for metric in res["verified"]["churn"]:
        v, b = res["verified"]["churn"][metric], res["baseline"]["churn"][metric]
        lines.append(f"| churn: {metric} | {v:.3g} | {b:.3g} | |")
    return "\n".join(lines)


def rows(quick: bool) -> list[Row]:
    res = measure(quick)
    out = []
    for metric in ("pending state (incl. batch entry)", "second request joining, per key"):
        v, b = res["verified"]["per_state"][metric], res["baseline"]["per_state"][metric]
        out.append(Row("memory", f"bytes: {metric}", f"{v:.0f} vs {b:.0f} ({v / b:.2f}x)", "verified vs baseline"))
    c = res["verified"]["churn"]
    out.append(
        Row(
            "memory",
            "churn: verified table size",
            f"max {c['max len/live keys']:.2f}x live keys; {c['len after all cleaned']:.0f} left",
            f"traced memory growth over 2nd half {c['traced growth 2nd half']:+.1%}",
        )
    )
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    print("memory (tracemalloc)\n")
    print(report(measure(args.quick)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
