"""kvprobe.statemachine: the verified lookup manager.

``AsyncLookupManager`` is the public entry point; ``LookupCore`` is its pure,
I/O-free core (one method per TLA+ action); the workers are its drivers.
The shared types (requests, groups, outcomes, errors) are those of
:mod:`kvprobe.statemachine.types`, re-exported whole.
"""

from kvprobe.spec.lifecycle import LookupPhase
from kvprobe.statemachine import types
from kvprobe.statemachine.core import LookupCore, ProbeState, WaitingRequest
from kvprobe.statemachine.manager import AsyncLookupManager
from kvprobe.statemachine.trace import NdjsonTrace, TracingCore
from kvprobe.statemachine.types import *  # noqa: F403
from kvprobe.statemachine.verdict_cache import VerdictCache
from kvprobe.statemachine.workers import ManualWorker, ThreadedWorker, Worker, probe_group

__all__ = [
    "AsyncLookupManager",
    "LookupCore",
    "LookupPhase",
    "ManualWorker",
    "NdjsonTrace",
    "ProbeState",
    "ThreadedWorker",
    "TracingCore",
    "VerdictCache",
    "WaitingRequest",
    "Worker",
    "probe_group",
]
__all__ += types.__all__
