"""ProcessBackend carries a ``Verdicts`` result's marks: a key the wrapped backend did not answer stays unanswered.

The object tier marks the keys its pace shed and those unanswered at its
deadline (``Verdicts.unanswered``) so that the verdict cache never
remembers them as not stored.  Through a helper process the marks must
survive the pipe, or a cache over ``ProcessBackend`` would remember the
failures the object tier took care to mark.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial

from fault_harness import drive

from kvprobe.backends import ProcessBackend
from kvprobe.backends.base import Verdicts
from kvprobe.statemachine import AsyncLookupManager, VerdictCache

STORED, ANSWERED_ABSENT, UNANSWERED = b"marks-stored", b"marks-absent", b"marks-unanswered"


class MarkingBackend:
    """Answers ``STORED`` True, and marks ``UNANSWERED``'s False as no answer; counts its calls per key in a file."""

    def __init__(self, log: str) -> None:
        self.log = log

    def batch_lookup(self, keys: Sequence[bytes], req_context: object) -> Verdicts:
        with open(self.log, "ab") as f:
            f.write(b"".join(k + b"\n" for k in keys))
        marked = frozenset(i for i, k in enumerate(keys) if k == UNANSWERED)
        return Verdicts([k == STORED for k in keys], unanswered=marked)


def test_the_marks_cross_the_pipe(tmp_path: object) -> None:
    log = f"{tmp_path}/calls"
    with ProcessBackend(partial(MarkingBackend, log)) as backend:
        result = backend.batch_lookup([STORED, UNANSWERED, ANSWERED_ABSENT, UNANSWERED], None)
    assert list(result) == [True, False, False, False]
    assert isinstance(result, Verdicts) and result.unanswered == frozenset({1, 3})


def test_a_plain_answer_stays_a_plain_list(tmp_path: object) -> None:
    log = f"{tmp_path}/calls"
    with ProcessBackend(partial(MarkingBackend, log)) as backend:
        result = backend.batch_lookup([STORED, ANSWERED_ABSENT], None)
    assert result == [True, False] and getattr(result, "unanswered", frozenset()) == frozenset()


def _resolve(m: AsyncLookupManager, req_id: str, keys: list[bytes]) -> list[bool]:
    """``req_id``'s verdicts for ``keys``, in order (the fault harness's bounded drive), then its cleanup."""
    answers = drive(m, {req_id: keys})
    m.cleanup(req_id)
    return [answers.of(req_id, k) for k in keys]


def test_the_cache_over_a_helper_never_remembers_an_unanswered_key(tmp_path: object) -> None:
    log = f"{tmp_path}/calls"
    cache = VerdictCache(max_entries=64, hit_ttl_s=60.0, miss_ttl_s=60.0)
    keys = [STORED, ANSWERED_ABSENT, UNANSWERED]
    with (
        ProcessBackend(partial(MarkingBackend, log)) as backend,
        AsyncLookupManager(backend, verdict_cache=cache, lookup_timeout_s=5.0) as m,
    ):
        assert _resolve(m, "r1", keys) == [True, False, False]
        assert _resolve(m, "r2", keys) == [True, False, False]
    with open(log, "rb") as f:
        asked = f.read().splitlines()
    assert asked.count(UNANSWERED) == 2, "the unanswered key was remembered as not stored"
    assert asked.count(STORED) == 1 and asked.count(ANSWERED_ABSENT) == 1, asked  # real answers remembered
