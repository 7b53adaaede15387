"""A minimal, UNVERIFIED lookup manager: the obvious design, for comparison only.

This is what a competent engineer writes without a model: one dict of
per-key entries whose phase is an enum, the same per-request reverse index
and the same dedupe as the reference implementation (one probe per key while
it is pending or in flight, one batch entry per key), a background thread
that runs one ``batch_lookup`` per request, and a result queue that is
drained at the first ``lookup`` after a ``flush`` (as the reference
implementation does; results that arrive later wait for the next flush).

It has no generations, no checked mode, no trace hook and no counters, and
it keeps the reference's known hazards (a cleanup deletes an in-flight entry;
a late result is applied to whatever entry holds the key).  It exists so that
the benchmarks can price what the verified manager's guarantees cost on the
scheduler thread; nothing in kvprobe imports it.

Same surface as :class:`kvprobe.statemachine.AsyncLookupManager`:
``lookup``, ``flush``, ``drain_results``, ``cleanup``, ``mark_miss``,
``shutdown``, ``len``.  ``worker="manual"`` keeps submitted batches until the
benchmark calls :meth:`BaselineManager.run_batch`, so both managers can be
pumped identically and the backend's cost stays off the scheduler's clock.
"""

from __future__ import annotations

import enum
import queue
import threading
from collections import deque
from collections.abc import Iterable, Sequence
from typing import Any, Literal

__all__ = ["BaselineManager", "Phase"]


class Phase(enum.Enum):
    PENDING = 1
    IN_FLIGHT = 2
    RESOLVED = 3


# Module constants: an enum member looked up through its class costs an extra
# attribute lookup per use, which no one would leave in a hot path.
PENDING = Phase.PENDING
IN_FLIGHT = Phase.IN_FLIGHT
RESOLVED = Phase.RESOLVED


class _Entry:
    __slots__ = ("phase", "reqs", "verdict")

    def __init__(self, req_id: str) -> None:
        self.phase = PENDING
        self.reqs = {req_id}
        self.verdict: bool | None = None


# One request's keys submitted together: (request context, keys).
_Job = tuple[Any, list[bytes]]
_STOP = object()


class BaselineManager:
    """Batched existence lookups, the unverified way (see the module docstring)."""

    def __init__(self, backend: Any, *, worker: Literal["thread", "manual"] = "thread") -> None:
        self.backend = backend
        self._entries: dict[bytes, _Entry] = {}
        self._req_keys: dict[str, set[bytes]] = {}  # reverse index: request -> keys
        self._req_ctx: dict[str, Any] = {}
        self._step: dict[str, list[bytes]] = {}  # this step's new keys, per first asker
        self._results: queue.SimpleQueue[tuple[list[bytes], list[bool]]] = queue.SimpleQueue()
        self._drain_due = False
        self._closed = False
        self._manual = worker == "manual"
        self.submitted: deque[list[_Job]] = deque()  # manual mode only
        self._jobs: queue.SimpleQueue[object] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        if not self._manual:
            self._thread = threading.Thread(target=self._serve, name="baseline-worker", daemon=True)
            self._thread.start()

    # --- scheduler thread --------------------------------------------------------

    def lookup(self, key: bytes, req_context: Any) -> bool | None:
        if self._drain_due:
            self._drain_due = False
            self.drain_results()
        req_id = req_context.req_id
        entry = self._entries.get(key)
        if entry is None:
            self._entries[key] = _Entry(req_id)
            keys = self._req_keys.get(req_id)
            if keys is None:
                self._req_keys[req_id] = {key}
                self._req_ctx[req_id] = req_context
            else:
                keys.add(key)
            step = self._step.get(req_id)
            if step is None:
                self._step[req_id] = [key]
            else:
                step.append(key)
            return None
        if req_id not in entry.reqs:
            entry.reqs.add(req_id)
            # The reverse-index update above, inlined again on purpose: a
            # helper call per lookup would slow the baseline the ratios price.
            keys = self._req_keys.get(req_id)
            if keys is None:
                self._req_keys[req_id] = {key}
                self._req_ctx[req_id] = req_context
            else:
                keys.add(key)
        # verdict is None until the entry is RESOLVED, so no phase test is needed.
        return entry.verdict

    def flush(self) -> None:
        if self._closed:
            raise RuntimeError("baseline manager was shut down")
        step, self._step = self._step, {}
        entries = self._entries
        jobs: list[_Job] = []
        for req_id, keys in step.items():
            live = []
            for key in keys:
                entry = entries.get(key)
                # Skip keys cleaned up or forced to MISS since they were asked.
                if entry is not None and entry.phase is PENDING:
                    entry.phase = IN_FLIGHT
                    live.append(key)
            if live:
                ctx = self._req_ctx.get(req_id)
                if ctx is None:  # the asker left; any remaining waiter's context will do
                    ctx = self._req_ctx[next(iter(entries[live[0]].reqs))]
                jobs.append((ctx, live))
        if jobs:
            if self._manual:
                self.submitted.append(jobs)
            else:
                self._jobs.put(jobs)
        self._drain_due = True

    def drain_results(self) -> int:
        entries = self._entries
        results = self._results
        applied = 0
        while True:
            try:
                keys, verdicts = results.get_nowait()
            except queue.Empty:
                return applied
            applied += 1
            for key, verdict in zip(keys, verdicts, strict=False):
                entry = entries.get(key)
                if entry is None:
                    continue
                if entry.reqs:
                    entry.phase = RESOLVED
                    entry.verdict = verdict
                else:
                    del entries[key]

    def cleanup(self, req_id: str) -> None:
        keys = self._req_keys.pop(req_id, None)
        self._req_ctx.pop(req_id, None)
        if keys is None:
            return
        entries = self._entries
        for key in keys:
            entry = entries.get(key)
            if entry is None:
                continue
            entry.reqs.discard(req_id)
            if not entry.reqs:
                del entries[key]

    def mark_miss(self, keys: Iterable[bytes]) -> None:
        entries = self._entries
        for key in keys:
            entry = entries.get(key)
            if entry is not None:
                entry.phase = RESOLVED
                entry.verdict = False

    def shutdown(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._thread is not None:
            self._jobs.put(_STOP)
            self._thread.join(5.0)
        self._entries.clear()
        self._req_keys.clear()
        self._req_ctx.clear()
        self._step.clear()
        self.submitted.clear()

    def __len__(self) -> int:
        return len(self._entries)

    def __enter__(self) -> BaselineManager:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    # --- worker ------------------------------------------------------------------

    def _probe(self, jobs: Sequence[_Job]) -> None:
        for ctx, keys in jobs:
            try:
                verdicts = [bool(v) for v in self.backend.batch_lookup(keys, ctx)]
                if len(verdicts) != len(keys):
                    verdicts = [False] * len(keys)
            except Exception:
                verdicts = [False] * len(keys)
            self._results.put((keys, verdicts))

    def _serve(self) -> None:
        while True:
            jobs = self._jobs.get()
            if jobs is _STOP:
                return
            assert isinstance(jobs, list)
            self._probe(jobs)

    def run_batch(self) -> bool:
        """Manual mode: probe the oldest submitted batch now; False if none."""
        if not self.submitted:
            return False
        self._probe(self.submitted.popleft())
        return True
