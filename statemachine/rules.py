"""The lifecycle as the core's hot path reads it, and how the hot path was built.

Phase changes go through :data:`kvprobe.spec.lifecycle.NEXT_PHASE`, compiled
from the lifecycle declaration.  The core reads its rows in the shapes below
(re-indexed, or read once), and facts derived from that declaration let the
hot path skip the table where it would only confirm "no change": a lookup
never changes the phase of an existing state (and the verdict is set exactly
when the phase is RESOLVED, so a lookup answers ``state.verdict``); a cleanup
that leaves some request waiting never changes the phase; a result changes
only an IN_FLIGHT state.  Each fact is checked at import, so changing the
declaration cannot silently invalidate the core: the import fails with an
``ImportError`` naming the method that must follow.

Module constants are ``Final``: a compiled build keeps them in C statics
rather than looking them up in the module's namespace at every use.
"""

from __future__ import annotations

import types
from typing import Final

from kvprobe.spec.lifecycle import ABSENT, NEXT_PHASE, RECALL_RULE, RULES, Event, LookupPhase, Phase

__all__ = [
    "ANSWERED",
    "CLEANUP_LAST",
    "COMPILED",
    "IN_FLIGHT",
    "MARK_MISS_NEXT",
    "ORPHANED",
    "PENDING",
    "RECALLED",
    "RESOLVED",
    "TO_IN_FLIGHT",
]

PENDING: Final = LookupPhase.PENDING
IN_FLIGHT: Final = LookupPhase.IN_FLIGHT
RESOLVED: Final = LookupPhase.RESOLVED

if any(r.event is Event.LOOKUP and r.source is not ABSENT and r.dest is not r.source for r in RULES):
    raise ImportError("lifecycle declares a lookup that changes an existing phase; LookupCore.lookup must follow it")
if NEXT_PHASE.get((ABSENT, Event.LOOKUP, True)) is not PENDING:
    raise ImportError("lifecycle no longer sends a new lookup to PENDING; LookupCore.lookup must follow it")
if any(ev is Event.CLEANUP and waited and dest is not src for (src, ev, waited), dest in NEXT_PHASE.items()):
    raise ImportError("lifecycle lets a cleanup change a phase others wait on; LookupCore.cleanup must follow it")
if any(ev is Event.DRAIN and src is not IN_FLIGHT and dest is not src for (src, ev, _), dest in NEXT_PHASE.items()):
    raise ImportError("lifecycle lets a result change a state that is not IN_FLIGHT; LookupCore.apply must follow it")


def _rows(event: Event, has_waiters: bool) -> dict[str, Phase]:
    """NEXT_PHASE's rows for ``event`` and a waiters fact, keyed by source phase value.

    Same rows, other index: enum members hash through ``Enum.__hash__``, a
    Python-level method, so a ``NEXT_PHASE[(phase, event, flag)]`` lookup
    makes two Python calls, while a member's value is a string whose hash is
    cached.  Cleanup and mark_miss read these once per key.
    """
    return {
        source.value: dest
        for (source, ev, waited), dest in NEXT_PHASE.items()
        if ev is event and source is not None and waited is has_waiters
    }


#: Where a state goes when its last waiter is cleaned up, by source phase value.
CLEANUP_LAST: Final = _rows(Event.CLEANUP, has_waiters=False)
#: Where a forced miss sends a state, indexed by ``not state.waiters``: [0] with waiters, [1] without.
MARK_MISS_NEXT: Final = (_rows(Event.MARK_MISS, has_waiters=True), _rows(Event.MARK_MISS, has_waiters=False))
#: What a result does to the IN_FLIGHT state it was submitted for: with a
#: request waiting (nearly every key) and without (an orphan).
ANSWERED: Final = NEXT_PHASE[(IN_FLIGHT, Event.DRAIN, True)]
ORPHANED: Final = NEXT_PHASE[(IN_FLIGHT, Event.DRAIN, False)]
if ANSWERED is not RESOLVED or ORPHANED is not ABSENT:
    raise ImportError("lifecycle changed what a result does to an in-flight probe; LookupCore.apply must follow it")
#: What a flush does to a PENDING state.
TO_IN_FLIGHT: Final = NEXT_PHASE[(PENDING, Event.FLUSH, True)]
if TO_IN_FLIGHT is not IN_FLIGHT:
    raise ImportError("lifecycle no longer sends a flushed probe IN_FLIGHT; LookupCore.flush must follow it")
#: Where a Lookup answered from the verdict cache sends a key without a state.
RECALLED: Final = RECALL_RULE.dest
if RECALL_RULE.source is not ABSENT or RECALL_RULE.event is not Event.LOOKUP or RECALLED is not RESOLVED:
    raise ImportError("lifecycle changed what a remembered verdict does; LookupCore._new_probe must follow it")


def _compiled_probe() -> None:
    """A function whose type tells how this module was built."""


#: True when the hot-path modules (this one, ``records``, ``inputs``,
#: ``chain`` and ``core``; setup.py compiles them together) were compiled
#: with mypyc (an opt-in build, see docs/performance.md), False for the
#: pure-Python source.  Both builds run the same source and the same tests.
COMPILED: Final = type(_compiled_probe) is not types.FunctionType
