"""A stand-in with the semantics of vLLM 0.33.0's base class, to measure the drop-in tests' power.

Written here from what vLLM 0.33.0's tiered-offloading ``AsyncLookupManager``
does; vLLM is not imported, so the suite measures its power without vLLM
installed (``test_vllm_differences.py`` runs the same scenarios on vLLM's own
class when the release is installed).  The behaviours that matter are kept
as they are there:

* one background thread; a step's groups are called one after another and
  published together when the whole step's batch is done;
* the ``batch_lookup`` call and the reading of its result are guarded (all
  MISS on an error); results are paired with keys by ``zip``, so a short
  result leaves keys without a verdict and extra results are ignored; a
  verdict is stored as returned;
* a step's probes are submitted under the context of the request that
  created each, even if it was cleaned up since;
* results are applied at the first lookup after a flush and at flush;
* ``mark_miss`` changes only RESOLVED states;
* ``shutdown`` joins the thread after the batches queued before it and
  applies their results; later calls are accepted, on the same table.
"""

from __future__ import annotations

import abc
import enum
import queue
import threading
from collections.abc import Iterable
from typing import Any


class Phase(enum.Enum):
    PENDING = 1
    IN_FLIGHT = 2
    RESOLVED = 3


class _State:
    __slots__ = ("generation", "phase", "result", "waiting")

    def __init__(self, generation: int) -> None:
        self.generation = generation
        self.phase = Phase.PENDING
        self.result: bool | None = None
        self.waiting: set[str] = set()


class VllmLikeBase(abc.ABC):
    def __init__(self, tier_type: str) -> None:
        self._tier_type = tier_type
        self._states: dict[bytes, _State] = {}
        self._by_request: dict[str, set[bytes]] = {}
        self._generations = 0
        self._step: list[tuple[bytes, Any, int]] = []
        self._jobs: queue.SimpleQueue[list[tuple[bytes, Any, int]] | None] = queue.SimpleQueue()
        self._done: queue.SimpleQueue[list[tuple[bytes, int, Any]]] = queue.SimpleQueue()
        self._drain_next = False
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    @abc.abstractmethod
    def batch_lookup(self, keys: list[bytes], req_context: Any) -> Iterable[bool]: ...

    def lookup(self, key: bytes, req_context: Any) -> bool | None:
        if self._drain_next:
            self.drain_results()
            self._drain_next = False
        state = self._states.get(key)
        if state is None:
            state = self._states[key] = _State(self._generations)
            self._generations += 1
            self._step.append((key, req_context, state.generation))
        state.waiting.add(req_context.req_id)
        self._by_request.setdefault(req_context.req_id, set()).add(key)
        return state.result

    def flush(self) -> None:
        self.drain_results()
        self._drain_next = True
        entries, self._step = self._step, []
        submitted = []
        for key, ctx, generation in entries:
            state = self._states.get(key)
            if state is not None and state.generation == generation:
                state.phase = Phase.IN_FLIGHT
                submitted.append((key, ctx, generation))
        if submitted:
            self._jobs.put(submitted)

    def drain_results(self) -> None:
        while True:
            try:
                results = self._done.get_nowait()
            except queue.Empty:
                return
            for key, generation, found in results:
                state = self._states.get(key)
                if state is None or state.generation != generation:
                    continue
                if not state.waiting:
                    del self._states[key]
                    continue
                assert state.phase is Phase.IN_FLIGHT and state.result is None, "second result for a key"
                state.result = found
                state.phase = Phase.RESOLVED

    def mark_miss(self, keys: Iterable[bytes]) -> None:
        for key in keys:
            state = self._states.get(key)
            if state is not None and state.phase is Phase.RESOLVED:
                state.result = False

    def cleanup(self, req_id: str) -> None:
        for key in self._by_request.pop(req_id, ()):
            state = self._states[key]
            state.waiting.discard(req_id)
            if not state.waiting and state.phase is not Phase.IN_FLIGHT:
                del self._states[key]

    def shutdown(self) -> None:
        self._jobs.put(None)
        self._thread.join()
        self.drain_results()

    def __len__(self) -> int:
        return len(self._states)

    def _serve(self) -> None:
        while (entries := self._jobs.get()) is not None:
            groups: dict[str, tuple[Any, list[tuple[bytes, int]]]] = {}
            for key, ctx, generation in entries:
                groups.setdefault(ctx.req_id, (ctx, []))[1].append((key, generation))
            results: list[tuple[bytes, int, Any]] = []
            for ctx, members in groups.values():
                keys = [key for key, _ in members]
                try:
                    found: Iterable[Any] = list(self.batch_lookup(keys, ctx))
                except Exception:
                    found = [False] * len(keys)
                for (key, generation), hit in zip(members, found):  # noqa: B905  (as vLLM pairs them)
                    results.append((key, generation, hit))
            if results:
                self._done.put(results)
