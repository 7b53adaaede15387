"""NIXL POSIX and FsBackend read the same tree the same way; randomized sequences.

The randomized sequence stores and removes real blocks between scheduler
steps and checks every verdict against a small model of the manager's
semantics: a key's verdict is the tier's truth when it was probed, cached
while some request still waits on it, and False after ``mark_miss``.
"""

from __future__ import annotations

import os
import random
from pathlib import Path
from typing import Any

import pytest
from integ_harness import block_keys, requires_nixl, resolve

from kvprobe.backends import FsBackend
from kvprobe.statemachine import AsyncLookupManager, ReqContext


@requires_nixl
def test_nixl_posix_and_fs_agree_on_one_tree(tmp_path: Path) -> None:
    from kvprobe.backends.nixl_posix import NixlPosixBackend

    rng = random.Random(11)
    root = tmp_path / "shared"
    fs = FsBackend(root)
    with NixlPosixBackend(root) as nixl:
        keys = [*block_keys(rng, 120, groups=3), b"", b"\x00", b"../..", rng.randbytes(200)]
        # Writers of either backend; a directory where a block would be; an
        # empty file; a key whose group sibling exists but it does not.
        for key in keys:
            choice = rng.random()
            if choice < 0.3:
                fs.store(key, rng.randbytes(rng.randrange(0, 2048)))
            elif choice < 0.6:
                nixl.store(key, b"")
            elif choice < 0.65:
                os.makedirs(fs.locate(key))
        for backend in (fs, nixl):
            assert backend.locate(keys[0]) == fs.locate(keys[0])
        fs_view = fs.batch_lookup(keys, None)
        nixl_view = nixl.batch_lookup(keys, None)
        assert fs_view == nixl_view
        assert 0 < sum(fs_view) < len(keys)
        truth = [os.path.isfile(fs.locate(k)) for k in keys]
        assert fs_view == truth
        files_or_nothing = [k for k in keys if not os.path.isdir(fs.locate(k))]
        for key in rng.sample(files_or_nothing, 60):
            (fs if rng.random() < 0.5 else nixl).remove(key)
        with pytest.raises(IsADirectoryError):
            fs.remove(next(k for k in keys if os.path.isdir(fs.locate(k))))
        assert fs.batch_lookup(keys, None) == nixl.batch_lookup(keys, None)


@requires_nixl
@pytest.mark.parametrize("chunk", [1, 7, 64, 1000])
def test_chunked_nixl_posix_agrees_with_one_call(tmp_path: Path, chunk: int) -> None:
    from kvprobe.backends.nixl_posix import NixlPosixBackend

    rng = random.Random(chunk)
    fs = FsBackend(tmp_path)
    keys = block_keys(rng, 150, groups=2)
    stored = set(rng.sample(keys, 70))
    for key in stored:
        fs.store(key)
    with NixlPosixBackend(tmp_path) as whole, NixlPosixBackend(tmp_path, chunk_keys=chunk) as chunked:
        expected = [k in stored for k in keys]
        assert whole.batch_lookup(keys, None) == expected
        assert chunked.batch_lookup(keys, None) == expected
        # A bad key in a late chunk is reported before any chunk is queried.
        with pytest.raises(TypeError, match="str"):
            chunked.batch_lookup([*keys, "not-bytes"], None)  # type: ignore[list-item]


@requires_nixl
@pytest.mark.parametrize("bad", [0, -5, True, 2.5])
def test_chunk_keys_must_be_a_positive_int(tmp_path: Path, bad: object) -> None:
    from kvprobe.backends.nixl_posix import NixlPosixBackend

    with pytest.raises(ValueError, match="chunk_keys"):
        NixlPosixBackend(tmp_path, chunk_keys=bad)  # type: ignore[arg-type]


def test_randomized_sequence_with_real_writes(block_store: Any) -> None:
    rng = random.Random(2026)
    universe = block_keys(rng, 60, groups=2)
    truth: set[bytes] = set()
    cached: dict[bytes, bool] = {}  # model: verdict of each key a live request holds
    holders: dict[bytes, set[str]] = {}
    live: dict[str, list[bytes]] = {}
    checked = 0
    with AsyncLookupManager(block_store, name="integ-random", lookup_timeout_s=60.0) as m:
        for step in range(12):
            # Between steps (nothing in flight): change the tier for real.
            for key in rng.sample(universe, 15):
                if key in truth:
                    block_store.remove(key)
                    truth.discard(key)
                else:
                    block_store.store(key, rng.randbytes(16))
                    truth.add(key)
            # New requests arrive; each looks up a random prefix-like run.
            arrivals = {f"s{step}-r{i}": rng.sample(universe, rng.randrange(5, 40)) for i in range(rng.randrange(1, 4))}
            expected = {req: [cached[k] if k in cached else (k in truth) for k in ks] for req, ks in arrivals.items()}
            got = resolve(m, arrivals)
            assert got == expected, f"step {step}"
            checked += sum(map(len, arrivals.values()))
            for req, ks in arrivals.items():
                live[req] = ks
                for k in ks:
                    cached.setdefault(k, k in truth)
                    holders.setdefault(k, set()).add(req)
            # A failed load: force misses on some keys some request holds.
            if rng.random() < 0.5 and cached:
                forced = rng.sample(sorted(cached), min(5, len(cached)))
                m.mark_miss(forced)
                for k in forced:
                    cached[k] = False
                req = rng.choice(sorted(live))
                assert [m.lookup(k, ReqContext(req)) for k in live[req]] == [cached[k] for k in live[req]]
            # Some requests finish.
            for req in rng.sample(sorted(live), rng.randrange(0, len(live) + 1)):
                m.cleanup(req)
                for k in live.pop(req):
                    holders[k].discard(req)
                    if not holders[k]:
                        del holders[k]
                        del cached[k]
            assert len(m) == len(cached)
        for req in list(live):
            m.cleanup(req)
        assert len(m) == 0
        assert m.stats.backend_errors == 0
    assert checked > 100


@pytest.mark.parametrize("kind", ["fs", pytest.param("nixl_posix", marks=requires_nixl)])
def test_store_is_atomic_replace(kind: str, make_store: Any) -> None:
    backend = make_store(kind)
    key = b"\x10" * 36
    backend.store(key, b"old")
    backend.store(key, b"new")
    assert Path(backend.locate(key)).read_bytes() == b"new"
    assert sorted(os.listdir(Path(backend.locate(key)).parent)) == [Path(backend.locate(key)).name]
