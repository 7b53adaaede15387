"""The OBJ plugin's parameters: what the backend hands NIXL, and a malformed endpoint refused by name."""

from __future__ import annotations

import pytest

from kvprobe.backends._obj_sdk import nixl_obj_params


def test_the_params_carry_the_endpoint_the_credentials_given_and_the_extras_last() -> None:
    params = nixl_obj_params(
        "kvblocks",
        "eu-west-1",
        16,
        "https://s3.example:9000",
        ("AK", "SK", None),
        {"use_virtual_addressing": "false", "region": "us-east-2"},
    )
    assert params == {
        "bucket": "kvblocks",
        "region": "us-east-2",  # an extra overrides ours
        "num_threads": "16",
        "endpoint_override": "https://s3.example:9000",
        "scheme": "https",
        "access_key": "AK",
        "secret_key": "SK",
        "use_virtual_addressing": "false",
    }


def test_without_an_endpoint_or_credentials_nixl_uses_the_sdks_defaults() -> None:
    assert nixl_obj_params("b0b", "us-east-1", 4, None, (None, None, None), {}) == {
        "bucket": "b0b",
        "region": "us-east-1",
        "num_threads": "4",
    }


@pytest.mark.parametrize("endpoint", ["ftp://host:21", "localhost:9000", "http://"])
def test_a_malformed_endpoint_is_a_value_error_naming_it(endpoint: str) -> None:
    with pytest.raises(ValueError, match="endpoint_url must look like"):
        nixl_obj_params("kvblocks", "us-east-1", 16, endpoint, (None, None, None), {})


def test_the_backend_refuses_a_malformed_endpoint_before_creating_anything() -> None:
    from kvprobe.backends.nixl_obj import NixlObjBackend

    with pytest.raises(ValueError, match="ftp://host"):
        NixlObjBackend("kvblocks", endpoint_url="ftp://host:21", check=False)
