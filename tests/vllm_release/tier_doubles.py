"""kvprobe's tiers in place of vLLM's, for vLLM's own tier tests (``kvprobe_switch.py --lookup-manager=tiers``).

:func:`install` replaces, in vLLM's tier modules, ``FileSystemTierManager``
with ``kvprobe.integrations.vllm.tiers.FsTier`` and
``ObjectStoreSecondaryTierManager`` with :class:`ObjTierOnTestAgent`, before
the test modules import those names (and vLLM's factory, which reads the
module attribute when it builds ``fs`` or ``obj``, builds them too).

``ObjTierOnTestAgent`` is ``ObjTier`` with one change: vLLM's obj tests
replace NIXL by an in-memory mock agent (patched in while the tier is built)
and never start an S3 server, so the tier's kvprobe backend sends its
queries to that same agent instead of its own NIXL agents, and by the names
as vLLM gives them (the mock keeps names as given, where NIXL's S3 client
collapses ``//``).  Everything else of kvprobe's lookup path runs: the
manager, the backend's chunking, deadline and pace (kept to the process),
its retries of a failed query (through NIXL only: boto3 would ask the
mock's address).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

FS_MODULE = "vllm.v1.kv_offload.tiering.fs.manager"
OBJ_MODULE = "vllm.v1.kv_offload.tiering.obj.manager"


def _classes() -> tuple[type, type]:
    from kvprobe.integrations.vllm.tiers.fs import FsTier
    from kvprobe.integrations.vllm.tiers.lookup import VllmNamedObjBackend
    from kvprobe.integrations.vllm.tiers.obj import ObjTier, endpoint_url

    class TestAgentBackend(VllmNamedObjBackend):
        """kvprobe's object backend whose NIXL queries go to the tier's (mock) agent."""

        def __init__(self, agent: Any, **kwargs: Any) -> None:
            self._test_agent = agent
            super().__init__(**kwargs)

        def locate(self, key: bytes) -> str:
            return self._name_of(key)

        def _query(self, names: Sequence[str]) -> list[Any]:
            answers: list[Any] = self._test_agent.query_memory([(0, 1, 0, n) for n in names], "OBJ", "OBJ")
            return answers

    class ObjTierOnTestAgent(ObjTier):
        """``ObjTier`` whose lookups reach the agent vLLM's tests put in place of NIXL."""

        def _make_lookup_backend(self, store: Any, prefix: str, options: Any) -> TestAgentBackend:
            return TestAgentBackend(
                self._agent,
                name_of=self._file_mapper.get_file_name,
                bucket=store.bucket,
                endpoint_url=endpoint_url(store),
                access_key=store.access_key or None,
                secret_key=store.secret_key or None,
                prefix=prefix,
                num_threads=options.threads,
                deadline_s=options.deadline_s,
                pace_scope="process",
                retry_with_boto3=False,
                check=False,
            )

    return FsTier, ObjTierOnTestAgent


def install() -> None:
    """Put kvprobe's tier classes in vLLM's tier modules (before any test module is imported)."""
    import importlib

    fs_tier, obj_tier = _classes()
    importlib.import_module(FS_MODULE).FileSystemTierManager = fs_tier
    importlib.import_module(OBJ_MODULE).ObjectStoreSecondaryTierManager = obj_tier


def installed() -> list[str]:
    """What vLLM's tier modules hold now, one line each."""
    import sys

    lines = []
    for module, name in ((FS_MODULE, "FileSystemTierManager"), (OBJ_MODULE, "ObjectStoreSecondaryTierManager")):
        cls = getattr(sys.modules.get(module), name, None)
        where = "not imported" if cls is None else f"{cls.__module__}.{cls.__qualname__}"
        lines.append(f"{module}.{name} is {where}")
    return lines


def not_installed() -> list[str]:
    """The tier classes that are not kvprobe's (empty when :func:`install` held)."""
    import sys

    from kvprobe.integrations.vllm.tiers import FsTier, ObjTier

    wrong = []
    for module, name, want in (
        (FS_MODULE, "FileSystemTierManager", FsTier),
        (OBJ_MODULE, "ObjectStoreSecondaryTierManager", ObjTier),
    ):
        cls = getattr(sys.modules.get(module), name, None)
        if not (isinstance(cls, type) and issubclass(cls, want)):
            wrong.append(f"{module}.{name} is {cls!r}")
    return wrong
