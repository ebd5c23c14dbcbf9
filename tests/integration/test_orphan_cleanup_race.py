"""Orphan cleanup while the stale writer is still alive: it may delete its own staged files (after
being fenced) between our listing and our delete. Found by tests/integration/test_kafka.py's race."""

from __future__ import annotations

from pathlib import Path

import pytest

import spark_app.commit.cleanup as cleanup_module
from icebergsync.protocol import Writer, attempt_file_prefix
from icebergsync.storage import StoredFile
from spark_app.commit.committer import SinkCommitter
from tests.integration.committer_support import TABLE, create_table, open_catalog, stage


def test_cleanup_tolerates_orphans_that_vanish_before_the_delete(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    catalog = open_catalog(tmp_path)
    table = create_table(catalog)
    stale = Writer("sink", 1, "old")
    vanished = stage(table, stale, range(3))[0].file_path
    Path(vanished.removeprefix("file://")).unlink()  # the stale writer discarded it after we listed it
    listing = cleanup_module.list_files

    def listed_before_the_discard(location: str, properties: dict[str, str]) -> list[StoredFile]:
        return [*listing(location, properties), StoredFile(vanished, None, 1)]

    monkeypatch.setattr(cleanup_module, "list_files", listed_before_the_discard)
    kept = stage(table, stale, range(3, 6))[0].file_path
    newer = SinkCommitter(catalog, TABLE, Writer("sink", 2, "new"))
    newer.start([])
    deleted = newer.cleanup_orphans(catalog.load_table(TABLE))
    assert sorted(deleted) == sorted([vanished, kept])
    assert attempt_file_prefix(stale) in Path(kept).name and not Path(kept.removeprefix("file://")).exists()
