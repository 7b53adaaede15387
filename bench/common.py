"""Shared pieces of the benchmarks: the scheduler-shaped workload, the two
managers behind one small adapter, and summary helpers.

The workload models what the scheduler of a serving engine does with a slow
tier.  Every step a few requests arrive; each waiting request looks up every
block of its prompt (a few hundred keys) until it finishes a few steps later;
prompts share prefixes (a system prompt, a document), so several requests ask
for the same keys; the step ends with one flush.  Keys are 16-byte hashes
followed by a 4-byte group index, as vLLM's offload keys are.
"""

from __future__ import annotations

import os
import platform
import random
import statistics
from collections.abc import Callable, Iterator, Sequence, Sized
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from bench.hotpath.baseline import BaselineManager
from kvprobe.statemachine import AsyncLookupManager, ReqContext
from kvprobe.statemachine.workers import ManualWorker

_T = TypeVar("_T")

__all__ = [
    "DOCS_DIR",
    "RESULTS_DIR",
    "Impl",
    "Request",
    "Row",
    "StoredByHash",
    "Workload",
    "baseline_impl",
    "fmt_ratio",
    "fmt_spread",
    "load_average",
    "machine",
    "manual_impl",
    "rotated",
    "rows_from_output",
    "summary",
    "verified_impl",
]


@dataclass(frozen=True)
class Request:
    ctx: ReqContext
    keys: tuple[bytes, ...]
    finish_step: int


@dataclass
class Workload:
    """A deterministic stream of requests (same seed, same stream)."""

    steps: int = 120
    arrivals_per_step: int = 8
    life_steps: int = 4  # a request waits this many steps, then is cleaned up
    keys_per_request: int = 256
    shared_prefix: int = 128  # leading keys drawn from one of n_prefixes shared prefixes
    n_prefixes: int = 16
    stored_fraction: float = 0.5  # share of keys the tier holds
    seed: int = 7
    _rng: random.Random = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._rng = random.Random(self.seed)
        self.prefixes = [tuple(self._key(i) for i in range(self.shared_prefix)) for _ in range(self.n_prefixes)]

    def _key(self, group: int) -> bytes:
        return self._rng.randbytes(16) + group.to_bytes(4, "little")

    def schedule(self) -> Iterator[tuple[int, list[Request], list[Request]]]:
        """Yield ``(step, waiting requests, requests finishing after this step)``."""
        rng = random.Random(self.seed + 1)
        self._rng = random.Random(self.seed + 2)
        live: list[Request] = []
        serial = 0
        for step in range(self.steps):
            for _ in range(self.arrivals_per_step):
                prefix = self.prefixes[rng.randrange(self.n_prefixes)]
                own = tuple(self._key(i) for i in range(len(prefix), self.keys_per_request))
                live.append(Request(ReqContext(f"req-{serial}"), prefix + own, step + self.life_steps - 1))
                serial += 1
            finishing = [r for r in live if r.finish_step == step]
            yield step, list(live), finishing
            live = [r for r in live if r.finish_step != step]


class StoredByHash:
    """An in-memory tier whose content is a pure function of the key.

    Unlike ``InMemoryBackend`` it keeps no call log, so long runs and the
    memory benchmark do not measure the backend's own growth.
    """

    def __init__(self, fraction: float) -> None:
        self.cut = int(256 * fraction)

    def batch_lookup(self, keys: Sequence[bytes], req_context: object) -> list[bool]:
        cut = self.cut
        return [k[0] < cut for k in keys]


@dataclass
class Impl:
    """One manager under test, driven the same way as the other."""

    name: str
    manager: Any
    pump: Callable[[], bool]  # run the oldest submitted batch; False if none
    phase_of: Callable[[bytes], str | None]  # "PENDING"/"IN_FLIGHT"/"RESOLVED"/None, without draining
    submitted: Sized  # the batches flushed and not yet answered

    def pump_to(self, delay: int) -> None:
        """Answer the oldest flushed batches until at most ``delay`` wait (off any clock)."""
        while len(self.submitted) > delay:
            self.pump()


def verified_impl(backend: Any = None, *, fraction: float = 0.5) -> Impl:
    backend = backend if backend is not None else StoredByHash(fraction)
    return manual_impl(AsyncLookupManager(backend, worker="manual"))


def manual_impl(m: AsyncLookupManager) -> Impl:
    """The bench's view of a kvprobe manager built with ``worker="manual"``."""
    worker = m.worker
    assert isinstance(worker, ManualWorker)
    states = m.core.states

    def pump() -> bool:
        batch = worker.take_batch()
        if batch is None:
            return False
        for group in batch.groups:
            worker.complete(group)
        return True

    def phase_of(key: bytes) -> str | None:
        state = states.get(key)
        phase = None if state is None else state.phase
        return None if phase is None else phase.name

    return Impl("verified", m, pump, phase_of, worker.submitted)


def baseline_impl(backend: Any = None, *, fraction: float = 0.5) -> Impl:
    backend = backend if backend is not None else StoredByHash(fraction)
    m = BaselineManager(backend, worker="manual")
    entries = m._entries

    def phase_of(key: bytes) -> str | None:
        entry = entries.get(key)
        return None if entry is None else entry.phase.name

    return Impl("baseline", m, m.run_batch, phase_of, m.submitted)


# --- where results go, and the machine they come from ---------------------------------

#: Where every benchmark writes by default (untracked: .gitignore).  Files
#: under ``docs/`` (pictures, data) are written only with ``--update-docs``.
RESULTS_DIR = Path(__file__).resolve().parent / "results"
DOCS_DIR = Path(__file__).resolve().parent.parent / "docs"


def _cpu() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def load_average() -> list[float] | None:
    """The 1, 5 and 15 minute load averages (None where the system has none)."""
    return [round(x, 2) for x in os.getloadavg()] if hasattr(os, "getloadavg") else None


def machine() -> dict[str, Any]:
    """What a figure depends on besides the code: cores, CPU, system, Python, and kvprobe's build."""
    from kvprobe.statemachine import core

    return {
        "cores": os.cpu_count(),
        "cpu": _cpu(),
        "system": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "build": "compiled" if getattr(core, "COMPILED", False) else "pure",
    }


# --- reporting ---------------------------------------------------------------------


@dataclass(frozen=True)
class Row:
    """One line of the suite's table."""

    bench: str
    metric: str
    value: str
    detail: str = ""


def summary(values: Sequence[float]) -> tuple[float, float, float]:
    """(min, median, max)."""
    return min(values), statistics.median(values), max(values)


def fmt_spread(values: Sequence[float]) -> str:
    """``median (min-max)`` to two decimals."""
    lo, med, hi = summary(values)
    return f"{med:.2f} ({lo:.2f}-{hi:.2f})"


def rotated(items: Sequence[_T], rnd: int) -> list[_T]:
    """``items`` starting at ``rnd % len(items)``: round ``rnd``'s order, so that
    in interleaved rounds no item always follows the same one (a slow phase of
    a shared machine then hits each alike)."""
    shift = rnd % len(items)
    return [*items[shift:], *items[:shift]]


def fmt_ratio(values: Sequence[float]) -> str:
    lo, med, hi = summary(values)
    return f"{med:.2f}x (min {lo:.2f}, max {hi:.2f})"


def rows_from_output(bench: str, text: str, exit_code: int) -> list[Row]:
    """Rows from what a benchmark's ``main`` printed: one per line of its Markdown tables.

    A table row gives ``metric`` (its first cell) and ``value`` (the other
    cells, each with its column header when the header names it); a
    non-zero exit code adds a ``FAIL`` row naming the ``FAIL:`` lines.
    """
    rows: list[Row] = []
    header: list[str] = []
    for line in text.splitlines():
        line = line.strip()
        if not line.startswith("|"):
            header = []
            continue
        cells = [c.strip() for c in line.strip("|").split("|")]
        if not header:
            header = cells
        elif not all(set(c) <= set("-: ") for c in cells):
            named = [f"{h}: {c}" if h else c for h, c in zip(header[1:], cells[1:], strict=False)]
            rows.append(Row(bench, cells[0], "; ".join(named)))
    if exit_code != 0:
        failed = [line.removeprefix("FAIL: ") for line in text.splitlines() if line.startswith("FAIL: ")]
        rows.append(Row(bench, "own checks", "FAIL", f"exit {exit_code}: " + "; ".join(failed)[:200]))
    return rows
