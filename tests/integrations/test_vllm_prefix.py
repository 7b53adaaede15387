"""lookup_prefix: a request's ordered keys, through the manager's chain lookup, to vLLM's result kinds."""

from __future__ import annotations

from typing import Any

import pytest
from vllm_harness import settle

from kvprobe.integrations.vllm import ChainAnswer, LookupResult, PrefixVerdict, lookup_prefix
from kvprobe.integrations.vllm.results import prefix_verdict
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
    m = AsyncLookupManager(Scripted(verdicts), name="prefix", worker="manual")
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
    ("verdicts", "answer", "result"),
    [
        ([], ChainAnswer(0, False, False, 0), PrefixVerdict(LookupResult.HIT, 0, 0)),
        ([True, True], ChainAnswer(2, False, False, 2), PrefixVerdict(LookupResult.HIT, 2, 2)),
        ([True, False, True], ChainAnswer(1, True, False, 2), PrefixVerdict(LookupResult.MISS, 1, 2)),
        ([False, True], ChainAnswer(0, True, False, 1), PrefixVerdict(LookupResult.MISS, 0, 1)),
        ([True, None, True], ChainAnswer(1, False, True, 3), PrefixVerdict(LookupResult.RETRY, 1, 3)),
        ([True, None, False, True], ChainAnswer(1, True, True, 3), PrefixVerdict(LookupResult.RETRY, 1, 3)),
        ([None, True, True], ChainAnswer(0, False, True, 3), PrefixVerdict(LookupResult.RETRY, 0, 3)),
    ],
)
def test_chain_answers_and_result_kinds(
    verdicts: list[bool | None], answer: ChainAnswer, result: PrefixVerdict
) -> None:
    m, keys = resolved_as(verdicts)
    with m:
        assert m.lookup_chain(keys, CTX) == answer
        assert prefix_verdict(answer, len(keys)) == result
        # lookup_prefix is that chain lookup (a second one: every verdict above is unchanged) reduced.
        assert lookup_prefix(m, keys, CTX) == result


def test_lookup_prefix_uses_the_managers_chain_lookup() -> None:
    class WithChain:
        def __init__(self) -> None:
            self.chained: list[list[bytes]] = []

        def lookup(self, key: bytes, ctx: Any) -> bool | None:
            raise AssertionError("the chain lookup should have been used")

        def lookup_chain(self, keys: list[bytes], ctx: Any) -> ChainAnswer:
            self.chained.append(list(keys))
            return ChainAnswer(1, True, False, 2)

    m = WithChain()
    keys = [b"a" * 20, b"b" * 20, b"c" * 20]
    assert lookup_prefix(m, keys, CTX) == PrefixVerdict(LookupResult.MISS, 1, 2)
    assert m.chained == [keys]


def test_lookup_prefix_on_a_kvprobe_manager(tmp_path: Any) -> None:
    class Half:
        def batch_lookup(self, keys: list[bytes], ctx: Any) -> list[bool]:
            return [k[0] < 128 for k in keys]

    with AsyncLookupManager(Half(), name="prefix") as m:
        keys = [bytes([1]) * 20, bytes([2]) * 20, bytes([200]) * 20, bytes([3]) * 20]
        assert lookup_prefix(m, keys, CTX) == PrefixVerdict(LookupResult.RETRY, 0, 4)
        m.flush()
        settle(m)
        assert lookup_prefix(m, keys, CTX) == PrefixVerdict(LookupResult.MISS, 2, 3)
