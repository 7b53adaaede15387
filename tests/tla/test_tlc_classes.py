"""TLC's classes come from a shared archive once one run has written it, and an archive never changes a result."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from kvprobe.tlc import run_tlc, tla_dir
from kvprobe.tlc_classes import ClassArchive, class_archive
from kvprobe.tlc_java import find_jar, find_java

#: One key, one request: a run of a few states that ends in a deadlock (no Shutdown step).
SMALL = (
    "CONSTANTS\n Keys = {k1}\n Reqs = {r1}\n MaxGen = 1\n MaxStuck = 1\n MaxDeaths = 0\nINIT Init\nNEXT SchedulerNext\n"
)

needs_java = pytest.mark.skipif(shutil.which("java") is None, reason="TLC needs Java")


def _small_run(tmp_path: Path) -> tuple[str, int | None]:
    cfg = tmp_path / "small.cfg"
    cfg.write_text(SMALL)
    result = run_tlc(tla_dir() / "MC.tla", cfg, coverage=False)
    return result.outcome, result.distinct


@needs_java
@pytest.mark.tlc
def test_the_first_run_writes_the_archive_and_the_next_maps_it(cache: Path, tmp_path: Path) -> None:
    first = _small_run(tmp_path)
    archives = list(cache.glob("tlc-classes-*.jsa"))
    assert len(archives) == 1 and archives[0].stat().st_size > 1_000_000, archives
    assert list(cache.glob("*.tmp")) == [], "the file the run wrote was moved into place"
    archive = class_archive(find_java(), find_jar())
    assert archive is not None and archive.dump_to is None
    assert archive.java_options()[0] == f"-XX:SharedArchiveFile={archives[0]}"
    assert _small_run(tmp_path) == first
    assert first[0] == "deadlock" and first[1] is not None and first[1] > 1


@needs_java
@pytest.mark.tlc
def test_an_archive_java_cannot_use_changes_no_result(cache: Path, tmp_path: Path) -> None:
    archive = class_archive(find_java(), find_jar())
    assert archive is not None
    archive.path.write_bytes(b"not an archive")  # torn, or written by another JDK
    outcome, distinct = _small_run(tmp_path)
    assert outcome == "deadlock" and distinct is not None and distinct > 1


def test_the_archive_is_off_when_asked_or_without_a_cache_folder(
    cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    jar = tmp_path / "tla2tools.jar"
    jar.write_bytes(b"jar")
    monkeypatch.setenv("KVPROBE_TLC_CLASS_ARCHIVE", "0")
    assert class_archive("/bin/sh", jar) is None
    monkeypatch.delenv("KVPROBE_TLC_CLASS_ARCHIVE")
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv("KVPROBE_CACHE_DIR", str(blocker / "cache"))  # under a file: cannot be made
    assert class_archive("/bin/sh", jar) is None


def test_a_new_jar_gets_an_archive_of_its_own(cache: Path, tmp_path: Path) -> None:
    jar = tmp_path / "tla2tools.jar"
    jar.write_bytes(b"jar")
    before = class_archive("/bin/sh", jar)
    jar.write_bytes(b"another jar")
    after = class_archive("/bin/sh", jar)
    assert before is not None and after is not None and before.path != after.path
    assert before.dump_to is not None and before.dump_to.parent == cache and before.dump_to.name.endswith(".tmp")


def test_keep_moves_a_written_archive_into_place_and_never_a_missing_or_empty_one(tmp_path: Path) -> None:
    final = tmp_path / "a.jsa"
    ClassArchive(final, tmp_path / "missing.tmp").keep()
    empty = tmp_path / "empty.tmp"
    empty.write_bytes(b"")
    ClassArchive(final, empty).keep()
    assert not final.exists() and not empty.exists()
    written = tmp_path / "written.tmp"
    written.write_bytes(b"classes")
    ClassArchive(final, written).keep()
    assert final.read_bytes() == b"classes" and not written.exists()
