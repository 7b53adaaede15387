"""Which modules of kvprobe.statemachine the compiled build compiles (mypyc): the pure core on the hot path.

The one declaration of the split between the compiled core and the drivers
that share this folder.  ``setup.py`` reads it as a file (before kvprobe is
installed, so this module imports nothing); ``tests/packaging`` and
docs/performance.md's check read it through :data:`COMPILED_MODULES`.  Every
other module of the package (the manager, the workers, the trace writer, the
CPU gate, the shared types) is a driver and stays pure Python in every build.
"""

__all__ = ["COMPILED_MODULES", "is_compiled_module"]

#: The modules on the scheduler's hot path, by import name, in build order.
COMPILED_MODULES: tuple[str, ...] = (
    "kvprobe.statemachine.records",
    "kvprobe.statemachine.rules",
    "kvprobe.statemachine.inputs",
    "kvprobe.statemachine.windows",
    "kvprobe.statemachine.chain",
    "kvprobe.statemachine.probe_table",
    "kvprobe.statemachine.handoff",
    "kvprobe.statemachine.core",
    "kvprobe.statemachine.inferred",
    "kvprobe.statemachine.verdict_cache",
)


def is_compiled_module(name: str) -> bool:
    """Whether the compiled build compiles the module ``name`` (a dotted import name)."""
    return name in COMPILED_MODULES
