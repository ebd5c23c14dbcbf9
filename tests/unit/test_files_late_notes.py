"""The files source's notes about files that appear behind the frontier (they are not ingested)."""

from __future__ import annotations

from pathlib import Path

from icebergsync.spec import parse_spec
from spark_app.sources.files import FilesSource
from spark_app.sources.units import UnitStats


def no_spark() -> None:
    raise AssertionError("planning files needs no Spark session")


def test_ingested_files_are_not_late_and_a_late_files_note_waits_for_the_next_commit(tmp_path: Path) -> None:
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    for name in ("0001.json", "0002.json"):
        (inbox / name).write_text('{"id": 1}\n')
    sync = parse_spec({
        "apiVersion": "icebergsync.io/v1alpha1", "kind": "IcebergSync", "metadata": {"name": "f", "namespace": "t"},
        "spec": {"source": {"files": {"path": str(inbox)}}, "schema": [{"name": "id", "type": "long"}],
                 "table": {"name": "a.b"}}})
    source = FilesSource(no_spark, sync.spec)  # type: ignore[arg-type]
    source.cores = lambda: 2  # type: ignore[method-assign]
    pending = source.pending({"after": ""}, 1 << 30)
    assert pending is not None and pending.notes is None
    source.plan_units({"after": ""}, pending)
    assert "files-before-frontier" not in (source.trigger_notes(pending, UnitStats()) or {})
    # After the commit the ingested files sort at the frontier: they are not late.
    assert source.pending({"after": "0002.json"}, 1 << 30) is None
    assert source._late_unnoted == []
    (inbox / "0000.json").write_text('{"id": 0}\n')  # really late, seen by a poll with nothing new to read
    assert source.pending({"after": "0002.json"}, 1 << 30) is None
    (inbox / "0003.json").write_text('{"id": 3}\n')
    pending = source.pending({"after": "0002.json"}, 1 << 30)
    assert pending is not None and pending.notes is not None
    assert pending.notes["files-before-frontier"] == ["0000.json"]
    source.plan_units({"after": "0002.json"}, pending)
    notes = source.trigger_notes(pending, UnitStats()) or {}
    assert notes["files-before-frontier"] == ["0000.json"] and notes["files"] == '["0003.json"]'
    # Named once in a commit's notes, it is not named again.
    (inbox / "0004.json").write_text('{"id": 4}\n')
    later = source.pending({"after": "0003.json"}, 1 << 30)
    assert later is not None and later.notes is None
