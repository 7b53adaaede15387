"""kvprobe's tiers for vLLM: the config keys' checks and the plugin, without vLLM.

The checks run before vLLM's tier is built, so they are tested here on
``kvprobe.integrations.vllm.tiers.options`` directly; tests/engine/test_vllm_tiers.py
checks that the tier classes raise the same errors through vLLM's factory.
"""

from __future__ import annotations

import importlib.util
import math
from typing import Any

import pytest

from kvprobe.integrations.vllm.tiers import TIER_NAMES, TierConfigError, register_tiers
from kvprobe.integrations.vllm.tiers.options import (
    FS_DEFAULT_LOOKUP_TIMEOUT_S,
    obj_default_timeout,
    obj_lookup_options,
    tier_lookup_options,
)
from kvprobe.statemachine.types import InvalidValueError

_LOOKUP_DEFAULTS: dict[str, Any] = {
    "chain_mode": "exact",
    "lookup_timeout_s": None,
    "default_timeout_s": FS_DEFAULT_LOOKUP_TIMEOUT_S,
    "cache_hit_ttl_s": 0,
    "cache_miss_ttl_s": 0,
    "cache_max_entries": None,
}
_OBJ_DEFAULTS: dict[str, Any] = {"lookup_deadline_s": 5.0, "pace_scope": "host", "lookup_threads": 64}


def test_defaults_keep_no_cache_and_the_tier_timeout() -> None:
    options = tier_lookup_options(**_LOOKUP_DEFAULTS)
    assert (options.chain_mode, options.lookup_timeout_s, options.verdict_cache) == (
        "exact",
        FS_DEFAULT_LOOKUP_TIMEOUT_S,
        None,
    )
    obj = obj_lookup_options(**_OBJ_DEFAULTS)
    assert (obj.deadline_s, obj.pace_scope, obj.threads) == (5.0, "host", 64)
    assert obj_default_timeout(obj) > obj.deadline_s  # the backend returns before the manager gives up


def test_a_ttl_turns_the_cache_on() -> None:
    options = tier_lookup_options(**{**_LOOKUP_DEFAULTS, "cache_hit_ttl_s": 30, "cache_max_entries": 500})
    cache = options.verdict_cache
    assert cache is not None
    assert (cache.max_entries, cache.hit_ttl_s, cache.miss_ttl_s) == (500, 30.0, 0.0)
    assert tier_lookup_options(**{**_LOOKUP_DEFAULTS, "chain_mode": "inferred"}).chain_mode == "inferred"


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("chain_mode", "sideways"),
        ("chain_mode", 3),
        ("lookup_timeout_s", 0),
        ("lookup_timeout_s", -1.0),
        ("lookup_timeout_s", "5"),
        ("lookup_timeout_s", math.nan),
        ("cache_hit_ttl_s", -1),
        ("cache_hit_ttl_s", math.inf),
        ("cache_miss_ttl_s", "60"),
        ("cache_miss_ttl_s", True),
        ("cache_max_entries", 500),  # set with no TTL: a cache that remembers nothing
    ],
)
def test_bad_lookup_values_name_the_key(key: str, value: object) -> None:
    with pytest.raises(TierConfigError, match=f"'{key}'") as raised:
        tier_lookup_options(**{**_LOOKUP_DEFAULTS, key: value})
    assert raised.value.key == key
    assert isinstance(raised.value, InvalidValueError)


def test_bad_cache_bound_with_a_ttl_names_the_key() -> None:
    with pytest.raises(TierConfigError, match="'cache_max_entries'"):
        tier_lookup_options(**{**_LOOKUP_DEFAULTS, "cache_hit_ttl_s": 5, "cache_max_entries": 0})


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("lookup_deadline_s", 0),
        ("lookup_deadline_s", 7200),
        ("lookup_deadline_s", None),
        ("pace_scope", "fleet"),
        ("pace_scope", None),
        ("lookup_threads", 0),
        ("lookup_threads", 2000),
        ("lookup_threads", 8.0),
        ("lookup_threads", True),
    ],
)
def test_bad_obj_values_name_the_key(key: str, value: object) -> None:
    with pytest.raises(TierConfigError, match=f"'{key}'") as raised:
        obj_lookup_options(**{**_OBJ_DEFAULTS, key: value})
    assert raised.value.key == key


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vLLM is installed here")
def test_the_plugin_does_nothing_without_vllm() -> None:
    assert register_tiers() == []


def test_the_short_names_point_at_the_package_classes() -> None:
    assert TIER_NAMES == {"kvprobe-obj": "ObjTier", "kvprobe-fs": "FsTier"}
    import kvprobe.integrations.vllm.tiers as tiers

    with pytest.raises(AttributeError, match="NoSuchTier"):
        tiers.NoSuchTier  # noqa: B018
