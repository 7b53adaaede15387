"""The tier under test: its ground truth, its audit, and the faults scripted into its calls.

A conformance factory returns a :class:`Target` (a backend plus ``store`` and
``remove``), a ``BlockStore`` or a ``(backend, store, remove)`` tuple;
:func:`as_target` accepts all three.  The machine wraps the backend in a
:class:`ScriptedBackend`, which records every call, can make the next one
fail in a chosen way, and audits every answer against what the factory
stored.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from kvprobe.backends import Backend, InMemoryBackend
from kvprobe.statemachine import FailureKind
from kvprobe.testing.stateful.answers import TierAnswer, TierCall

__all__ = [
    "FAILURES",
    "KEYS",
    "REQS",
    "ScriptedBackend",
    "ScriptedFault",
    "Target",
    "as_target",
    "hit_or_miss",
    "memory_factory",
    "short_name",
    "shown",
]

#: The key pool: few keys, so collisions, shared probes and reuse are common.
#: Eight bytes plus a four-byte group index, shaped like vLLM offload keys.
KEYS: tuple[bytes, ...] = tuple(bytes([0xC0 + i]) * 8 + i.to_bytes(4, "big") for i in range(3))
#: The request-id pool (two suffice for shared probes and for a flush regrouping
#: a key under the request still waiting; cleanup also draws an unknown id).
REQS: tuple[str, ...] = ("req-a", "req-b")

#: How a scripted backend call fails, and the FailureKind probe_group reports for it.
FAILURES: dict[str, FailureKind] = {
    "raise": FailureKind.RAISED,
    "raise_iter": FailureKind.RAISED_WHILE_ITERATING,
    "short": FailureKind.SHORT_RESULT,
    "long": FailureKind.LONG_RESULT,
}


class ScriptedFault(RuntimeError):
    """The failure a :class:`ScriptedBackend` injects on purpose."""


def _raise_after(verdicts: list[bool]) -> Iterator[bool]:
    yield from verdicts
    raise ScriptedFault("scripted failure while the result is iterated")


def short_name(key: bytes, pool: Sequence[bytes] = KEYS) -> str:
    """``k1``, ``k2``, ... for the keys of ``pool`` (in pool order); other keys as hex."""
    return f"k{pool.index(key) + 1}" if key in pool else key.hex()


def hit_or_miss(verdict: object) -> str:
    """``hit`` for a true verdict, ``miss`` otherwise."""
    return "hit" if verdict else "miss"


def shown(verdict: bool | None) -> str:
    """A verdict as the failure report words it (``None`` is not known yet)."""
    return "unknown yet (None)" if verdict is None else hit_or_miss(verdict)


class ScriptedBackend:
    """Wraps a backend; the next call can be made to fail in a chosen way, and
    every answer of the wrapped backend is audited against the ground truth.

    ``mode`` applies to the next ``batch_lookup`` only: ``"ok"``, ``"raise"``
    (raise at call time), ``"raise_iter"`` (raise while the result is
    iterated), ``"short"`` (one result too few), ``"long"`` (one too many).
    Every call is recorded in ``calls`` as ``(keys, req_id)`` before anything
    else happens.  What the wrapped backend raises or returns reaches the
    manager unchanged; when it is not one bool per key (it raised, returned
    0/1 or None, too few or too many), the call is the tier's fault: it is
    appended to ``faults`` (or, for a wrong length, to ``lies``) naming the
    call, and :meth:`tier_failure` tells the machine how ``probe_group``
    fails the group, so that the model follows the manager there.

    The audit: with ``oracle`` (key -> is the block stored now), each answer
    the wrapped backend gives is compared with it, key by key, before any
    scripted fault is applied; with ``budget_s``, a call that takes longer is
    a fault too (behind a manager with that timeout its keys would resolve as
    MISS).  A tier with a deadline of its own (``fit_deadline``, as the
    object tier has) is handed ``budget_s`` first, as that manager would hand
    it its ``lookup_timeout_s``: it then gives up before the budget and
    answers what it has, and the audit judges the tier a manager would run.
    Each finding is appended to ``lies`` as one line; the machine's
    ``TierAnswersTruthfully`` check fails on the first.  The audit runs on the
    calling thread (the worker's in thread mode): it only appends, so it never
    changes what the manager sees.
    """

    def __init__(
        self,
        inner: Backend,
        oracle: Callable[[bytes], bool] | None = None,
        budget_s: float | None = None,
        pool: Sequence[bytes] = KEYS,
    ) -> None:
        self.inner = inner
        self.mode = "ok"
        self.calls: list[tuple[tuple[bytes, ...], str | None]] = []
        self.release = threading.Event()
        #: With groups running concurrently, ``mode`` applies to this request's call only.
        self.mode_for: str | None = None
        self.oracle = oracle
        self.budget_s = budget_s
        self.pool = tuple(pool)
        self.lies: list[str] = []
        #: The tier's calls that raised or returned something other than one bool per key.
        self.faults: list[str] = []
        self._failures: dict[tuple[tuple[bytes, ...], str | None], FailureKind] = {}
        self._lock = threading.Lock()
        fit_deadline = getattr(inner, "fit_deadline", None)
        if budget_s is not None and callable(fit_deadline):
            fit_deadline(budget_s)

    def batch_lookup(self, keys: Sequence[bytes], req_context: object) -> Any:
        keys = list(keys)
        req_id = getattr(req_context, "req_id", None)
        with self._lock:  # concurrent groups: each call's number is its place in ``calls``
            self.calls.append((tuple(keys), req_id))
            call = TierCall(len(self.calls), tuple(keys), req_id, self.pool)
        if self.mode_for is not None and req_id != self.mode_for:
            mode = "ok"
        else:
            mode, self.mode = self.mode, "ok"
        if mode == "hang":
            # Blocks until the test releases it (a call that overstays its timeout).
            self.release.wait()
        if mode == "raise":
            raise ScriptedFault("scripted failure at call time")
        start = time.monotonic()
        try:
            result = self.inner.batch_lookup(keys, req_context)
        except Exception as exc:
            self._tier_failed(call, FailureKind.RAISED, f"raised {exc!r}")
            raise
        answer = TierAnswer.read(result, len(keys))
        self._audit(call, answer, time.monotonic() - start)
        if answer.failure is not None:
            return answer.replay(result)  # what the tier returned, as the manager would have seen it
        verdicts = list(answer.items)
        if mode == "raise_iter":
            return _raise_after(verdicts[: len(verdicts) // 2])
        if mode == "short":
            return verdicts[:-1]
        if mode == "long":
            return [*verdicts, False]
        return verdicts

    def tier_failure(self, keys: Sequence[bytes], req_id: str | None) -> FailureKind | None:
        """How the tier's own latest call for ``keys`` and ``req_id`` failed (None: it answered well).

        Each failure is handed out once: the machine asks right after the
        call, and tells the model that the group failed that way.
        """
        with self._lock:
            return self._failures.pop((tuple(keys), req_id), None)

    def assert_truthful(self) -> None:
        """The ``TierAnswersTruthfully`` check: the audit found no wrong answer so far.

        Raises:
            AssertionError: naming the first finding (and how many more there are).
        """
        _assert_none("TierAnswersTruthfully", self.lies)

    def assert_well_formed(self, consequence: str = "") -> None:
        """The ``TierAnswersWellFormed`` check: every call returned one bool per key, and none raised.

        Args:
            consequence: appended to the finding (what the manager made of it).

        Raises:
            AssertionError: naming the tier's first such call (which call, its
                keys and request, what it returned or raised).
        """
        _assert_none("TierAnswersWellFormed", self.faults, consequence)

    def _tier_failed(self, call: TierCall, kind: FailureKind, what: str) -> None:
        with self._lock:
            self._failures[(call.keys, call.req_id)] = kind
            if kind not in (FailureKind.SHORT_RESULT, FailureKind.LONG_RESULT):  # those are lies (below)
                self.faults.append(f"{call.says(what)}, so the manager failed the group as {kind.value}")

    def _audit(self, call: TierCall, answer: TierAnswer, seconds: float) -> None:
        names = call.names()
        if self.budget_s is not None and seconds > self.budget_s:
            self.lies.append(
                f"the tier took {seconds:.2f} s to answer [{names}], over the {self.budget_s:g} s lookup "
                "timeout: behind a manager with that timeout these keys resolve as MISS"
            )
        if answer.failure is not None:
            self._tier_failed(call, answer.failure, answer.describe())
        if self.oracle is None or answer.failure not in (None, FailureKind.SHORT_RESULT, FailureKind.LONG_RESULT):
            return
        if answer.failure is not None:
            count = f"more than {len(call.keys)}" if answer.failure is FailureKind.LONG_RESULT else len(answer.items)
            answers = "answer" if count == 1 else "answers"
            self.lies.append(
                f"the tier returned {count} {answers} for {len(call.keys)} keys [{names}] (call {call.number})"
            )
            return
        for key, verdict in zip(call.keys, answer.items, strict=True):
            truth = self.oracle(key)
            if verdict is not truth:
                self.lies.append(
                    f"the tier answered {short_name(key, self.pool)} = {hit_or_miss(verdict)}, "
                    f"but it holds {short_name(key, self.pool)} = {hit_or_miss(truth)} "
                    f"(the factory {'stored' if truth else 'removed or never stored'} that block)"
                )


def _assert_none(check: str, findings: list[str], consequence: str = "") -> None:
    if findings:
        more = f" (and {len(findings) - 1} more)" if findings[1:] else ""
        raise AssertionError(f"{check}: {findings[0]}{more}{consequence}")


@dataclass
class Target:
    """A backend under test plus the means to set its ground truth.

    ``store(key)`` must make the block present, ``remove(key)`` absent (no
    error if it was not there); ``close`` (optional) releases resources at
    the end of each run.
    """

    backend: Backend
    store: Callable[[bytes], None]
    remove: Callable[[bytes], None]
    close: Callable[[], None] | None = None


def as_target(made: object) -> Target:
    """Accept what a factory returns: a Target, a BlockStore, or ``(backend, store, remove)``.

    Raises:
        TypeError: ``made`` is none of these.
    """
    if isinstance(made, Target):
        return made
    if isinstance(made, tuple) and len(made) == 3 and all(callable(x) for x in made[1:]):
        return Target(made[0], made[1], made[2])
    if all(callable(getattr(made, name, None)) for name in ("batch_lookup", "store", "remove")):
        close = getattr(made, "close", None)
        return Target(made, made.store, made.remove, close if callable(close) else None)  # type: ignore[attr-defined,arg-type]
    raise TypeError(
        "a conformance factory must return a Target, a BlockStore (batch_lookup/store/remove) "
        f"or a (backend, store, remove) tuple; got {type(made).__name__}"
    )


def memory_factory() -> Target:
    """A fresh, empty in-memory tier (the example factory for ``kvprobe conform``)."""
    backend = InMemoryBackend()
    return Target(backend, backend.store, backend.remove)
