"""Key layout: names stay under the root for any key; bad key types are refused."""

from __future__ import annotations

import os
import random
import re
from pathlib import Path
from typing import Any

import pytest
from integ_harness import requires_nixl

from kvprobe.backends import FsBackend, relative_name
from kvprobe.backends.layout import MAX_DIRECT_BYTES

HOSTILE = [
    b"",
    b".",
    b"..",
    b"../..",
    b"../../../../etc/passwd",
    b"/",
    b"//",
    b"/etc/passwd",
    b"\x00",
    b"\x00" * 40,
    b"a\x00/../b",
    b"\\..\\..",
    b"\xff" * 3,
    "é/..".encode(),
    b"x" * MAX_DIRECT_BYTES,
    b"x" * (MAX_DIRECT_BYTES + 1),
    b"/.." * 5000,  # 15 KB: longer than PATH_MAX if it were used as is
]

_COMPONENT = re.compile(r"^(?:[0-9a-f_]{2}|[0-9a-f]+|empty|sha256-[0-9a-f]{64})$")


@pytest.mark.parametrize("key", HOSTILE, ids=lambda k: repr(k[:12]) + f"..{len(k)}")
def test_relative_name_is_three_safe_components(key: bytes) -> None:
    name = relative_name(key)
    parts = name.split("/")
    assert len(parts) == 3, name
    for part in parts:
        assert _COMPONENT.match(part), (key, name)
        assert part not in (".", "..") and not part.startswith(".")
    assert len(parts[2]) <= 2 * MAX_DIRECT_BYTES
    assert relative_name(key) == name  # deterministic


def test_relative_name_is_injective_and_keeps_group_suffix_distinct() -> None:
    rng = random.Random(1)
    keys = set(HOSTILE)
    for _ in range(2000):
        keys.add(rng.randbytes(rng.choice([0, 1, 2, 3, 4, 31, 32, 36, 64, 65, 100])))
    base = rng.randbytes(32)
    grouped = [base] + [base + g.to_bytes(4, "little") for g in range(8)]
    keys.update(grouped)
    names = {relative_name(k) for k in keys}
    assert len(names) == len(keys)
    # Group variants of one hash share the shard directories.
    assert len({relative_name(k).rsplit("/", 1)[0] for k in grouped}) == 1


@pytest.mark.parametrize("kind", ["fs", pytest.param("nixl_posix", marks=requires_nixl)])
def test_file_backends_store_hostile_keys_under_root(kind: str, make_store: Any, tmp_path: Path) -> None:
    backend = make_store(kind)
    root = Path(backend.root)
    assert root == (tmp_path / "tier").resolve()
    for key in HOSTILE:
        path = Path(backend.locate(key))
        assert path.is_absolute()
        assert os.path.commonpath([root, os.path.realpath(path)]) == str(root), (key, path)
    # Really write them, then check nothing appeared outside the root.
    root.mkdir(exist_ok=True)
    before = set(os.listdir(tmp_path))
    for key in HOSTILE:
        backend.store(key, key)
    assert set(os.listdir(tmp_path)) == before
    for key in HOSTILE:
        assert Path(backend.locate(key)).read_bytes() == key
    assert list(backend.batch_lookup(HOSTILE, None)) == [True] * len(HOSTILE)
    for dirpath, _dirs, files in os.walk(root):
        assert not [f for f in files if f.startswith(".tmp-")], f"temporary file left in {dirpath}"
    for key in HOSTILE:
        backend.remove(key)
    assert list(backend.batch_lookup(HOSTILE, None)) == [False] * len(HOSTILE)


def test_object_names_stay_under_prefix(make_store: Any) -> None:
    pytest.importorskip("moto.server")
    from integ_harness import nixl_missing

    if nixl_missing():
        pytest.skip(f"NIXL not importable: {nixl_missing()}")
    backend = make_store("nixl_obj")
    assert backend.prefix == "blocks/"
    for key in HOSTILE:
        name = backend.locate(key)
        assert name.startswith("blocks/") and name[len("blocks/") :] == relative_name(key)
        assert len(name.encode()) <= 1024
    for key in HOSTILE:
        backend.store(key, b"v")
    assert list(backend.batch_lookup(HOSTILE, None)) == [True] * len(HOSTILE)
    listed = backend._client().list_objects_v2(Bucket=backend.bucket)["Contents"]
    assert {o["Key"] for o in listed} == {backend.locate(k) for k in HOSTILE}


NOT_BYTES: list[Any] = ["abc", bytearray(b"abc"), memoryview(b"abc"), 12, None, (b"a",)]


@pytest.mark.parametrize("bad", NOT_BYTES, ids=lambda b: type(b).__name__)
def test_non_bytes_keys_raise_type_error_naming_the_type(block_store: Any, bad: Any) -> None:
    name = type(bad).__name__
    with pytest.raises(TypeError, match=name):
        block_store.locate(bad)
    with pytest.raises(TypeError, match=name):
        block_store.batch_lookup([b"ok", bad], None)
    with pytest.raises(TypeError, match=name):
        block_store.store(bad, b"")
    with pytest.raises(TypeError, match=name):
        block_store.remove(bad)


def test_fs_root_must_be_a_directory(tmp_path: Path) -> None:
    file = tmp_path / "f"
    file.write_bytes(b"")
    with pytest.raises(NotADirectoryError):
        FsBackend(file)
    with pytest.raises(TypeError, match="int"):
        FsBackend(3)  # type: ignore[arg-type]
    # A root that does not exist yet answers False and is created by store.
    backend = FsBackend(tmp_path / "later")
    assert backend.batch_lookup([b"k"], None) == [False]
    backend.store(b"k")
    assert backend.batch_lookup([b"k"], None) == [True]


def test_fs_directory_at_block_path_is_not_a_block(tmp_path: Path) -> None:
    backend = FsBackend(tmp_path)
    os.makedirs(backend.locate(b"dir"))
    assert backend.batch_lookup([b"dir"], None) == [False]


def test_fs_stat_error_raises_while_nixl_posix_reads_it_as_missing(make_store: Any) -> None:
    """A stat failing for another reason than a missing path (here ELOOP).

    FsBackend raises (the manager counts a backend error and answers MISS);
    NIXL POSIX cannot tell such a failure from a missing file and answers
    False.  Either way the verdict is MISS; only the counters differ.
    """
    fs = make_store("fs")
    key = b"\x01\x02\x03"
    Path(fs.root).mkdir(parents=True, exist_ok=True)
    shard = os.path.join(fs.root, "01")
    os.symlink(shard, shard)  # a symlink loop where the shard directory should be
    with pytest.raises(OSError, match="symbolic links"):
        fs.batch_lookup([key], None)
    from integ_harness import nixl_missing

    if nixl_missing() is None:
        assert make_store("nixl_posix").batch_lookup([key], None) == [False]
