"""lookup_chain in the vLLM integration: a request's ordered keys, one walk, vLLM's result kinds.

The drop-in's ``lookup_chain`` is the native manager's (same name, same
``ChainAnswer``); ``as_lookup_result`` maps that answer to ``HIT`` / ``MISS``
/ ``RETRY``.
"""

from __future__ import annotations

from typing import Any

import pytest
from vllm_harness import chain_retry_then_miss

from kvprobe.integrations.vllm import AsyncLookupManager as DropIn, ChainAnswer, LookupResult, as_lookup_result
from kvprobe.statemachine import AsyncLookupManager, ReqContext

CTX = ReqContext("r")


class Scripted:
    """A tier holding the keys whose scripted verdict is True."""

    def __init__(self, verdicts: list[bool | None]) -> None:
        self.stored = {bytes([i]) * 20 for i, v in enumerate(verdicts) if v}

    def batch_lookup(self, keys: list[bytes], ctx: Any) -> list[bool]:
        return [k in self.stored for k in keys]


def resolved_as(verdicts: list[bool | None]) -> tuple[AsyncLookupManager, list[bytes]]:
    """A manual-worker manager where key i is resolved to ``verdicts[i]`` (None: no state yet)."""
    m = AsyncLookupManager(Scripted(verdicts), name="chain", worker="manual")
    keys = [bytes([i]) * 20 for i in range(len(verdicts))]
    setup = ReqContext("setup")
    for key, verdict in zip(keys, verdicts, strict=True):
        if verdict is not None:
            m.lookup(key, setup)
    m.flush()
    m.worker.run_all()  # type: ignore[attr-defined]
    m.drain_results()
    return m, keys


@pytest.mark.parametrize(
    ("verdicts", "answer", "kind"),
    [
        ([], ChainAnswer(0, False, False, 0), LookupResult.HIT),
        ([True, True], ChainAnswer(2, False, False, 2), LookupResult.HIT),
        ([True, False, True], ChainAnswer(1, True, False, 2), LookupResult.MISS),
        ([False, True], ChainAnswer(0, True, False, 1), LookupResult.MISS),
        ([True, None, True], ChainAnswer(1, False, True, 3), LookupResult.RETRY),
        ([True, None, False, True], ChainAnswer(1, True, True, 3), LookupResult.RETRY),
        ([None, True, True], ChainAnswer(0, False, True, 3), LookupResult.RETRY),
    ],
)
def test_chain_answers_and_result_kinds(verdicts: list[bool | None], answer: ChainAnswer, kind: LookupResult) -> None:
    m, keys = resolved_as(verdicts)
    with m:
        assert m.lookup_chain(keys, CTX) == answer
        assert as_lookup_result(answer) is kind
        # A second walk finds the same: the first changed no verdict it reported.
        assert m.lookup_chain(keys, CTX) == answer


def test_the_drop_ins_chain_lookup_is_the_native_managers() -> None:
    class LookupOverridden(DropIn):
        def __init__(self) -> None:
            super().__init__("chain", worker="manual")
            self.stored = {b"a" * 20}

        def lookup(self, key: bytes, req_context: Any) -> bool | None:
            raise AssertionError("the native manager's walk should have been used")

        def batch_lookup(self, keys: list[bytes], req_context: Any) -> list[bool]:
            return [k in self.stored for k in keys]

    keys = [b"a" * 20, b"b" * 20, b"c" * 20]
    with LookupOverridden() as tier:
        assert tier.lookup_chain(keys, CTX) == ChainAnswer(0, False, True, 3)
        tier.flush()
        tier.manager.worker.run_all()  # type: ignore[attr-defined]
        tier.drain_results()
        answer = tier.lookup_chain(keys, CTX)
        assert answer == tier.manager.lookup_chain(keys, CTX) == ChainAnswer(1, True, False, 2)


def test_chain_result_kinds_on_a_threaded_kvprobe_manager(tmp_path: Any) -> None:
    class Half:
        def batch_lookup(self, keys: list[bytes], ctx: Any) -> list[bool]:
            return [k[0] < 128 for k in keys]

    with AsyncLookupManager(Half(), name="chain") as m:
        keys = [bytes([1]) * 20, bytes([2]) * 20, bytes([200]) * 20, bytes([3]) * 20]
        chain_retry_then_miss(m, keys, CTX)
