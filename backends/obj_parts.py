"""The object tier's parts that run outside a backend: the pace, the lookup's plans, NIXL's presence.

The fleet simulation drives the pace and the chunked lookup's plans in
virtual time, the benchmarks time the pace alone, and the vLLM tier options
check a pace scope; they import these names from here.  Each is defined once,
in a private module of this package, which stays free to move it.
"""

from __future__ import annotations

from kvprobe.backends._fair_pool import RoundRobin
from kvprobe.backends._host_pace import PACE_SCOPES, HostPacer, pace_dir
from kvprobe.backends._nixl_import import nixl_unavailable
from kvprobe.backends._obj_lookup import Chunk, RetryPlan, RetryPolicy, shed_margin, usual_query_s
from kvprobe.backends._pacing import PaceCore, Pacer

__all__ = [
    "PACE_SCOPES",
    "Chunk",
    "HostPacer",
    "PaceCore",
    "Pacer",
    "RetryPlan",
    "RetryPolicy",
    "RoundRobin",
    "nixl_unavailable",
    "pace_dir",
    "shed_margin",
    "usual_query_s",
]
