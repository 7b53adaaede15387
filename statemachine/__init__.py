"""kvprobe.statemachine: the verified lookup manager.

``AsyncLookupManager`` is the public entry point; ``LookupCore`` is its pure,
I/O-free core (one method per TLA+ action); the workers are its drivers.
"""

from kvprobe.spec.lifecycle import LookupPhase
from kvprobe.statemachine.core import InvariantViolation, LookupCore, ProbeState, WaitingRequest
from kvprobe.statemachine.manager import AsyncLookupManager
from kvprobe.statemachine.trace import NdjsonTrace, TracingCore
from kvprobe.statemachine.types import (
    Batch,
    ChainAnswer,
    FailureKind,
    GroupOutcome,
    HasReqId,
    InvalidInputError,
    InvalidValueError,
    KvprobeError,
    ManagerClosedError,
    ProbeGroup,
    ReqContext,
    Stats,
    WrongThreadError,
)
from kvprobe.statemachine.workers import ManualWorker, ThreadedWorker, Worker, probe_group

__all__ = [
    "AsyncLookupManager",
    "Batch",
    "ChainAnswer",
    "FailureKind",
    "GroupOutcome",
    "HasReqId",
    "InvalidInputError",
    "InvalidValueError",
    "InvariantViolation",
    "KvprobeError",
    "LookupCore",
    "LookupPhase",
    "ManagerClosedError",
    "ManualWorker",
    "NdjsonTrace",
    "ProbeGroup",
    "ProbeState",
    "ReqContext",
    "Stats",
    "ThreadedWorker",
    "TracingCore",
    "WaitingRequest",
    "Worker",
    "WrongThreadError",
    "probe_group",
]
