"""Routine operations on a synced table (expiry, rollback, recreation, schema changes by others, damaged
records, format v1) against the real committer and a real SQLite catalog: nothing is lost or duplicated,
or the sink stops with a clear error having written nothing."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import pyarrow as pa
import pytest
from pyiceberg.catalog import Catalog
from pyiceberg.types import StringType

from icebergsync import protocol
from icebergsync.errors import ProgressConflictError, TableChangedError
from icebergsync.protocol import Writer
from spark_app.commit import data_commit as data_commit_module
from spark_app.commit import fence as fence_module
from spark_app.commit.committer import SinkCommitter
from spark_app.commit.trigger_output import TriggerOutput
from spark_app.decoding.deadletter import DEAD_LETTER_SCHEMA
from spark_app.staging.writer import rebuild_data_file, table_plan
from tests.integration.committer_support import (
    SCHEMA,
    TABLE,
    commit_range,
    committed_ids,
    create_table,
    dead_letter_rows,
    open_catalog,
    stage,
    stage_rows,
)

SINK = "ns/ledger"
DEAD = "ns.dead"
GENERATOR = {"kind": "generator"}


class Killed(BaseException):
    """Stands for kill -9 at a crash point: nothing after it runs."""


def committer(catalog: Catalog, version: int, dead: bool = False) -> SinkCommitter:
    return SinkCommitter(catalog, TABLE, Writer(SINK, version, f"a{version}"), DEAD if dead else None,
                         rebuild_data_file)


def started(catalog: Catalog, version: int, dead: bool = False) -> SinkCommitter:
    sink = committer(catalog, version, dead)
    sink.start([], GENERATOR)
    return sink


def snapshot_count(catalog: Catalog, identifier: str = TABLE) -> int:
    return len(catalog.load_table(identifier).metadata.snapshots)


def test_expiring_a_snapshot_below_the_head_resumes_from_the_checkpoint(tmp_path: Path) -> None:
    catalog = open_catalog(tmp_path)
    table = create_table(catalog)
    first = started(catalog, 1)
    commit_range(first, table, 0, 10)
    # A compaction by another engine: pyiceberg's overwrite writes a delete and an append snapshot.
    catalog.load_table(TABLE).overwrite(catalog.load_table(TABLE).scan().to_arrow())
    table = catalog.load_table(TABLE)
    head = table.metadata.current_snapshot()
    assert head is not None and head.parent_snapshot_id is not None
    table.maintenance.expire_snapshots().by_id(head.parent_snapshot_id).commit()
    second = committer(catalog, 2)
    progress = second.start([], GENERATOR)
    assert (progress.resumed_from, progress.frontier) == ("checkpoint", {"next_id": 10})
    commit_range(second, catalog.load_table(TABLE), 10, 15)
    assert committed_ids(catalog) == list(range(15))


def test_a_running_sink_commits_on_after_a_snapshot_below_the_head_expired(tmp_path: Path) -> None:
    catalog = open_catalog(tmp_path)
    table = create_table(catalog)
    sink = started(catalog, 1)
    commit_range(sink, table, 0, 5)
    commit_range(sink, table, 5, 9)
    catalog.load_table(TABLE).overwrite(catalog.load_table(TABLE).scan().to_arrow())
    table = catalog.load_table(TABLE)
    assert sink.last_snapshot_id is not None
    table.maintenance.expire_snapshots().by_id(table.metadata.current_snapshot().parent_snapshot_id).commit()  # type: ignore[union-attr]
    commit_range(sink, table, 9, 12)
    assert committed_ids(catalog) == list(range(12))


def test_a_rollback_past_every_commit_of_the_sink_stops_it_instead_of_replaying(tmp_path: Path) -> None:
    catalog = open_catalog(tmp_path)
    table = create_table(catalog)
    table.append(table.scan().to_arrow().slice(0, 0))  # someone's snapshot before the sink started
    before = catalog.load_table(TABLE).metadata.current_snapshot()
    assert before is not None
    sink = started(catalog, 1)
    commit_range(sink, table, 0, 10)
    catalog.load_table(TABLE).manage_snapshots().rollback_to_snapshot(before.snapshot_id).commit()
    with pytest.raises(ProgressConflictError, match="rolled back"):
        commit_range(sink, table, 10, 12)
    snapshots = snapshot_count(catalog)
    with pytest.raises(ProgressConflictError, match="rolled back past every commit"):
        committer(catalog, 2).start([], GENERATOR)
    assert snapshot_count(catalog) == snapshots and committed_ids(catalog) == []


@pytest.mark.parametrize("format_version", ["1", "2"])
def test_a_rollback_below_a_restarts_commits_stops_it_as_rolled_back_not_fenced(
        tmp_path: Path, format_version: str) -> None:
    """Attempt 1 of version 1 commits; attempt 2 of the same version takes over and commits; main is
    rolled back below attempt 2's last commit. Attempt 2 still holds the claim (the checkpoint names
    it), so its next trigger stops as rolled back (exit 5), not as fenced by attempt 1's older commit."""
    catalog = open_catalog(tmp_path)
    catalog.create_namespace_if_not_exists("ns")
    table = catalog.create_table(TABLE, SCHEMA, properties={"format-version": format_version})
    first = SinkCommitter(catalog, TABLE, Writer(SINK, 1, "at1"), None, rebuild_data_file)
    first.start([], GENERATOR)
    commit_range(first, table, 0, 5)
    restarted = SinkCommitter(catalog, TABLE, Writer(SINK, 1, "at2"), None, rebuild_data_file)
    restarted.start([], GENERATOR)
    kept = catalog.load_table(TABLE).metadata.current_snapshot()
    assert kept is not None
    commit_range(restarted, catalog.load_table(TABLE), 5, 10)
    catalog.load_table(TABLE).manage_snapshots().rollback_to_snapshot(kept.snapshot_id).commit()
    with pytest.raises(ProgressConflictError, match="rolled back"):
        commit_range(restarted, catalog.load_table(TABLE), 10, 12)
    assert committed_ids(catalog) == list(range(5))
    relaunched = SinkCommitter(catalog, TABLE, Writer(SINK, 2, "at3"), None, rebuild_data_file)
    assert relaunched.start([], GENERATOR).frontier == {"next_id": 5}
    commit_range(relaunched, catalog.load_table(TABLE), 5, 12)
    assert committed_ids(catalog) == list(range(12))


def test_a_rollback_whose_rolled_back_snapshots_expired_still_stops_the_running_sink(tmp_path: Path) -> None:
    catalog = open_catalog(tmp_path)
    table = create_table(catalog)
    sink = started(catalog, 1)
    commit_range(sink, table, 0, 5)
    kept = catalog.load_table(TABLE).metadata.current_snapshot()
    assert kept is not None
    commit_range(sink, table, 5, 10)
    rolled_back = catalog.load_table(TABLE).metadata.current_snapshot_id
    assert rolled_back is not None
    catalog.load_table(TABLE).manage_snapshots().rollback_to_snapshot(kept.snapshot_id).commit()
    catalog.load_table(TABLE).maintenance.expire_snapshots().by_id(rolled_back).commit()
    with pytest.raises(ProgressConflictError, match="rolled back"):
        commit_range(sink, table, 10, 12)  # ids 5..9 are gone from main: committing 10.. would lose them
    restarted = committer(catalog, 2)
    assert restarted.start([], GENERATOR).frontier == {"next_id": 5}
    commit_range(restarted, catalog.load_table(TABLE), 5, 12)
    assert committed_ids(catalog) == list(range(12))


def test_a_rollback_past_every_commit_then_their_expiry_stops_the_sink_instead_of_skipping(tmp_path: Path) -> None:
    catalog = open_catalog(tmp_path)
    table = create_table(catalog)
    table.append(table.scan().to_arrow().slice(0, 0))
    before = catalog.load_table(TABLE).metadata.current_snapshot()
    assert before is not None
    commit_range(started(catalog, 1), table, 0, 10)
    catalog.load_table(TABLE).manage_snapshots().rollback_to_snapshot(before.snapshot_id).commit()
    rolled_back = [s.snapshot_id for s in catalog.load_table(TABLE).metadata.snapshots if s.snapshot_id != before.snapshot_id]
    catalog.load_table(TABLE).maintenance.expire_snapshots().by_ids(rolled_back).commit()
    assert protocol.read_progress(catalog.load_table(TABLE).metadata, SINK).last_commit is None
    with pytest.raises(ProgressConflictError, match="rolled back past every commit"):
        committer(catalog, 2).start([], GENERATOR)
    assert committed_ids(catalog) == []


def test_a_damaged_checkpoint_stops_the_sink_before_it_writes(tmp_path: Path) -> None:
    catalog = open_catalog(tmp_path)
    table = create_table(catalog)
    sink = started(catalog, 1)
    commit_range(sink, table, 0, 10)
    with catalog.load_table(TABLE).transaction() as transaction:
        transaction.set_properties({protocol.checkpoint_key(SINK): '{"version": 1, "frontier": {"next_id": 1'})
    snapshots = snapshot_count(catalog)
    with pytest.raises(ProgressConflictError, match="damaged"):
        committer(catalog, 2).start([], GENERATOR)
    with pytest.raises(ProgressConflictError, match="damaged"):
        commit_range(sink, table, 10, 12)
    assert snapshot_count(catalog) == snapshots and committed_ids(catalog) == list(range(10))


def test_a_frontier_of_another_source_is_refused_before_the_fence(tmp_path: Path) -> None:
    catalog = open_catalog(tmp_path)
    table = create_table(catalog)
    commit_range(started(catalog, 1), table, 0, 10)
    snapshots = snapshot_count(catalog)
    files_source = {"kind": "files", "path": "file:///inbox"}
    with pytest.raises(ProgressConflictError, match="share a sinkId"):
        committer(catalog, 2).start([], files_source)

    def files_frontier(frontier: protocol.Frontier) -> None:
        if set(frontier) != {"after"}:
            raise ValueError("not a files frontier")

    with pytest.raises(ProgressConflictError, match="does not fit"):  # a frontier recorded before identities
        committer(catalog, 2).start([], None, files_frontier)
    table = catalog.load_table(TABLE)
    assert snapshot_count(catalog) == snapshots
    checkpoint = protocol.parse_checkpoint(table.metadata, SINK)
    assert checkpoint is not None and checkpoint.source == GENERATOR and checkpoint.frontier == {"next_id": 10}


def test_a_table_recreated_under_a_running_sink_stops_it(tmp_path: Path) -> None:
    catalog = open_catalog(tmp_path)
    table = create_table(catalog)
    sink = started(catalog, 1)
    commit_range(sink, table, 0, 10)
    catalog.drop_table(TABLE)
    create_table(catalog)
    staged = stage(catalog.load_table(TABLE), sink.writer, range(10, 20))
    with pytest.raises(TableChangedError, match="dropped and recreated"):
        sink.commit(TriggerOutput(data_files=staged, records=10), {"next_id": 20})
    assert committed_ids(catalog) == [] and snapshot_count(catalog) == 0
    assert not Path(staged[0].file_path.removeprefix("file://")).exists(), "refused staged files are discarded"
    restarted = committer(catalog, 2).start([], GENERATOR)
    assert restarted.resumed_from == "none", "the new table is synced from the source's start"


def test_a_column_dropped_and_re_added_by_another_writer_stops_the_sink(tmp_path: Path) -> None:
    catalog = open_catalog(tmp_path)
    table = create_table(catalog)
    sink = started(catalog, 1)
    plan = table_plan(catalog.load_table(TABLE))  # what the job plans its writes with after the fence
    commit_range(sink, table, 0, 5)
    with catalog.load_table(TABLE).update_schema() as update:
        update.delete_column("who")
    with catalog.load_table(TABLE).update_schema() as update:
        update.add_column("who", StringType())
    staged = stage(catalog.load_table(TABLE), sink.writer, range(5, 9), plan)
    with pytest.raises(TableChangedError, match="schema"):
        sink.commit(TriggerOutput(data_files=staged, records=4), {"next_id": 9})
    assert committed_ids(catalog) == list(range(5))
    restarted = committer(catalog, 2)
    restarted.start([], GENERATOR)
    commit_range(restarted, catalog.load_table(TABLE), 5, 9)
    rows = catalog.load_table(TABLE).scan(row_filter="id >= 5").to_arrow()
    assert sorted(rows.column("who").to_pylist()) == ["v2"] * 4, "rows written after the change keep their column"
    assert SCHEMA.find_field("who").field_id != catalog.load_table(TABLE).schema().find_field("who").field_id


class ChangesColumnsBeforeTheCommit:
    """A catalog where another writer drops and re-adds a column just before the sink's next commit request."""

    def __init__(self, catalog: Catalog):
        self._catalog = catalog
        self.armed = False

    def commit_table(self, *args: object) -> object:
        if self.armed:
            self.armed = False
            with self._catalog.load_table(TABLE).update_schema() as update:
                update.delete_column("who")
            with self._catalog.load_table(TABLE).update_schema() as update:
                update.add_column("who", StringType())
        return self._catalog.commit_table(*args)

    def __getattr__(self, name: str) -> object:
        return getattr(self._catalog, name)


def test_a_column_change_between_the_fence_check_and_the_commit_stops_the_sink(tmp_path: Path) -> None:
    """The schema change moves no head: only the commit's schema requirement keeps the old schema's files out."""
    catalog = open_catalog(tmp_path)
    table = create_table(catalog)
    racing = ChangesColumnsBeforeTheCommit(catalog)
    sink = SinkCommitter(racing, TABLE, Writer(SINK, 1, "a1"), None, rebuild_data_file)  # type: ignore[arg-type]
    sink.start([], GENERATOR)
    plan = table_plan(catalog.load_table(TABLE))
    commit_range(sink, table, 0, 5)
    racing.armed = True
    staged = stage(catalog.load_table(TABLE), sink.writer, range(5, 9), plan)
    with pytest.raises(TableChangedError, match="schema"):
        sink.commit(TriggerOutput(data_files=staged, records=4), {"next_id": 9})
    assert committed_ids(catalog) == list(range(5))
    assert catalog.load_table(TABLE).scan().to_arrow().column("who").null_count == 5


@pytest.mark.parametrize("format_version", ["1", "2"])
def test_dead_letters_are_recovered_after_a_crash_between_the_two_commits(
        tmp_path: Path, format_version: str, monkeypatch: pytest.MonkeyPatch) -> None:
    catalog = open_catalog(tmp_path)
    catalog.create_namespace_if_not_exists("ns")
    table = catalog.create_table(TABLE, SCHEMA, properties={"format-version": format_version})
    dead = catalog.create_table(DEAD, DEAD_LETTER_SCHEMA, properties={"format-version": format_version})
    sink = started(catalog, 1, dead=True)
    ok = TriggerOutput(data_files=stage(table, sink.writer, range(0, 5)), records=5,
                       dead_letter_files=stage_rows(dead, sink.writer, dead_letter_rows(sink.writer, [5])))
    sink.commit(ok, {"next_id": 6})

    def kill_between_commits(point: str) -> None:
        if point == "main-committed":
            raise Killed

    monkeypatch.setattr(data_commit_module, "crash_point", kill_between_commits)
    crashing = TriggerOutput(data_files=stage(table, sink.writer, range(6, 9)), records=3,
                             dead_letter_files=stage_rows(dead, sink.writer, dead_letter_rows(sink.writer, [9, 10])))
    with pytest.raises(Killed):
        sink.commit(crashing, {"next_id": 11})
    monkeypatch.undo()
    assert sorted(catalog.load_table(DEAD).scan().to_arrow().column("payload").to_pylist()) == ["5"]
    for version in (2, 3):  # recovery happens once: a second restart adds nothing
        started(catalog, version, dead=True)
        payloads = sorted(catalog.load_table(DEAD).scan().to_arrow().column("payload").to_pylist())
        assert payloads == ["10", "5", "9"]
    assert committed_ids(catalog) == [0, 1, 2, 3, 4, 6, 7, 8]


@pytest.mark.parametrize("format_version", ["1", "2"])
@pytest.mark.parametrize("meanwhile", ["restarts-killed-after-their-main-fence", "another-writer-commits"])
def test_pending_dead_letters_survive_expiry_of_the_snapshot_that_listed_them(
        tmp_path: Path, format_version: str, meanwhile: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A crash between the main and the dead-letter commit, then expiry of every snapshot but the head
    before any start-up recovered the dead letters: a later start-up still recovers them, once."""
    catalog = open_catalog(tmp_path)
    catalog.create_namespace_if_not_exists("ns")
    table = catalog.create_table(TABLE, SCHEMA, properties={"format-version": format_version})
    dead = catalog.create_table(DEAD, DEAD_LETTER_SCHEMA, properties={"format-version": format_version})
    sink = started(catalog, 1, dead=True)

    def kill(*_: object) -> None:
        raise Killed

    monkeypatch.setattr(data_commit_module, "crash_point", kill)
    crashing = TriggerOutput(data_files=stage(table, sink.writer, range(0, 3)), records=3,
                             dead_letter_files=stage_rows(dead, sink.writer, dead_letter_rows(sink.writer, [3])))
    with pytest.raises(Killed):
        sink.commit(crashing, {"next_id": 4})
    monkeypatch.undo()
    if meanwhile == "another-writer-commits":
        table = catalog.load_table(TABLE)
        table.append(pa.table({"id": [-1], "who": ["foreign"]}, schema=table.schema().as_arrow()))
    else:
        monkeypatch.setattr(fence_module, "fence_dead_letters", kill)
        for version in (2, 2, 3):
            with pytest.raises(Killed):
                started(catalog, version, dead=True)
        monkeypatch.undo()
    table = catalog.load_table(TABLE)
    head = table.metadata.current_snapshot()
    assert head is not None
    table.maintenance.expire_snapshots().older_than(
        datetime.fromtimestamp(head.timestamp_ms / 1000)).commit()
    assert len(catalog.load_table(TABLE).metadata.snapshots) == 1
    for version in (4, 5):
        started(catalog, version, dead=True)
        assert catalog.load_table(DEAD).scan().to_arrow().column("payload").to_pylist() == ["3"]
    assert [i for i in committed_ids(catalog) if i >= 0] == [0, 1, 2]
