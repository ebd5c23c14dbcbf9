"""The worker daemon's zip importers: read an archive's directory again only when the archive changed."""

from __future__ import annotations

import os
import zipfile
import zipimport
from pathlib import Path

import pytest

from spark_app.worker_daemon import invalidate_when_changed


def write_zip(path: Path, modules: list[str]) -> None:
    with zipfile.ZipFile(path, "w") as archive:
        for name in modules:
            archive.writestr(f"{name}.py", f"NAME = {name!r}\n")


def test_an_unchanged_archive_is_not_read_again_and_a_changed_one_is(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "code.zip"
    write_zip(path, ["first"])
    importer = zipimport.zipimporter(str(path))
    reads: list[str] = []
    read_directory = zipimport._read_directory  # type: ignore[attr-defined]
    monkeypatch.setattr(zipimport, "_read_directory", lambda archive: reads.append(archive) or read_directory(archive))

    invalidate_when_changed(importer)  # the first call reads: this importer may have read an older file
    invalidate_when_changed(importer)
    invalidate_when_changed(importer)
    assert reads == [str(path)]
    assert importer.find_spec("first") is not None

    write_zip(path, ["first", "second"])
    os.utime(path, ns=(1, 1))  # a different modification time, whatever the clock's resolution
    invalidate_when_changed(importer)
    assert reads == [str(path), str(path)]
    assert importer.find_spec("second") is not None
