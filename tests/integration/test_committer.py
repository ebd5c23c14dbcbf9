"""The fence and commit protocol against a real catalog: CAS, fencing, recovery, expiry, cleanup."""

from __future__ import annotations

import multiprocessing
import os
import time
from pathlib import Path

import pyarrow as pa
import pytest
from pyiceberg.catalog import Catalog
from pyiceberg.table import Table
from pyiceberg.types import StringType

import spark_app.commit.swap as swap_module
from icebergsync import protocol
from icebergsync.errors import FencedError
from icebergsync.metrics.lag import lag_text
from icebergsync.protocol import Writer, sink_file_prefix
from icebergsync.schema import SchemaChange
from icebergsync.sink_state import read_sink_state
from icebergsync.storage import list_files, normalize
from spark_app.commit.committer import SinkCommitter
from spark_app.commit.references import referenced_files
from spark_app.commit.swap import MaintenanceConflictError
from spark_app.commit.trigger_output import TriggerOutput
from spark_app.decoding.deadletter import DEAD_LETTER_SCHEMA
from spark_app.iceberg.cut import TableChange
from tests.integration.committer_support import (
    TABLE,
    commit_range,
    committed_ids,
    create_table,
    open_catalog,
    stage,
)

SINK = "ns/ledger"
DEAD = "ns.dead"


def committer(catalog, version: int, attempt: str = "a") -> SinkCommitter:  # type: ignore[no-untyped-def]
    return SinkCommitter(catalog, TABLE, Writer(SINK, version, f"{attempt}{version}"))


def started_sink(directory: Path, rows: int = 0) -> tuple[Catalog, Table, SinkCommitter]:
    """A new table with version 1 of the sink fenced and ids ``0 … rows-1`` committed."""
    catalog = open_catalog(directory)
    table = create_table(catalog)
    first = committer(catalog, 1)
    first.start([])
    if rows:
        commit_range(first, table, 0, rows)
    return catalog, table, first


def sink_commits(table: Table) -> list[protocol.SinkCommit]:
    """This sink's commits on main, oldest first."""
    commits = [protocol.parse_commit(s) for s in protocol.main_ancestry(table.metadata)]
    return [c for c in reversed(commits) if c is not None and c.writer.sink_id == SINK]


def test_fence_then_commits_carry_the_protocol(tmp_path: Path) -> None:
    catalog = open_catalog(tmp_path)
    table = create_table(catalog)
    first = committer(catalog, 1)
    progress = first.start([])
    assert progress.frontier is None and progress.resumed_from == "none"
    commit_range(first, table, 0, 10)
    commit_range(first, table, 10, 25)
    table = catalog.load_table(TABLE)
    commits = sink_commits(table)
    assert [c.kind for c in commits] == ["fence", "data", "data"]
    assert [c.frontier for c in commits] == [None, {"next_id": 10}, {"next_id": 25}]
    assert [c.records for c in commits] == [0, 10, 15]
    summary = table.metadata.current_snapshot().summary.additional_properties  # type: ignore[union-attr]
    assert summary[protocol.SINK_ID] == SINK and summary[protocol.SINK_VERSION] == "1"
    assert summary[protocol.FRONTIER] == '{"next_id":25}'
    checkpoint = protocol.parse_checkpoint(table.metadata, SINK)
    assert checkpoint is not None and checkpoint.frontier == {"next_id": 25}
    assert committed_ids(catalog) == list(range(25))


def test_a_restart_fence_carries_the_freshness_status_and_lag_show(tmp_path: Path) -> None:
    catalog, table, first = started_sink(tmp_path)
    output = TriggerOutput(data_files=stage(table, first.writer, range(0, 5)), records=5,
                           max_event_time="2026-05-09T08:12:31+00:00",
                           source_lag={"records": 40, "partitions": {"orders": {"0": 40}}})
    first.commit(output, {"next_id": 5})
    committer(catalog, 2).start([])  # a restart: the newest commit is now the fence, and the source is idle
    state = read_sink_state(catalog, TABLE, SINK)
    assert state.kind == "fence" and state.written_by_version == 2
    assert state.max_event_time == "2026-05-09T08:12:31+00:00"
    assert lag_text(state.source_lag) == "40 records"


def test_schema_and_maintenance_commits_carry_the_freshness_status_and_lag_show(tmp_path: Path) -> None:
    catalog, table, sink = started_sink(tmp_path)
    output = TriggerOutput(data_files=stage(table, sink.writer, range(0, 5)), records=5,
                           max_event_time="2026-05-09T08:12:31+00:00",
                           source_lag={"records": 40, "partitions": {"orders": {"0": 40}}})
    sink.commit(output, {"next_id": 5})
    sink.evolve_schema([SchemaChange("add", "note", StringType())])
    state = read_sink_state(catalog, TABLE, SINK)
    assert state.kind == "schema"
    assert state.max_event_time == "2026-05-09T08:12:31+00:00" and lag_text(state.source_lag) == "40 records"
    planned = catalog.load_table(TABLE).current_snapshot()
    assert planned is not None
    [old] = [task.file for task in catalog.load_table(TABLE).scan().plan_files()]
    sink.commit_maintenance(planned, [old], stage(catalog.load_table(TABLE), sink.writer, range(0, 5)))
    state = read_sink_state(catalog, TABLE, SINK)
    assert state.kind == "maintenance"
    assert state.max_event_time == "2026-05-09T08:12:31+00:00" and lag_text(state.source_lag) == "40 records"


def test_restart_resumes_from_the_newest_own_snapshot_skipping_foreign_ones(tmp_path: Path) -> None:
    catalog, table, _first = started_sink(tmp_path, 10)
    # Other writers land on top: a rewrite of the table (pyiceberg writes a delete and an append
    # snapshot for it), then a manual append.
    table = catalog.load_table(TABLE)
    table.overwrite(table.scan().to_arrow())
    catalog.load_table(TABLE).append(table.scan().to_arrow().slice(0, 0))
    progress = committer(catalog, 2).start([])
    assert progress.frontier == {"next_id": 10}
    assert progress.resumed_from == "snapshot"
    assert progress.foreign_snapshots_on_top == 3


def test_higher_version_fences_lower_one_at_start_and_before_commit(tmp_path: Path) -> None:
    catalog, table, old = started_sink(tmp_path, 5)
    new = committer(catalog, 2)
    assert new.start([]).frontier == {"next_id": 5}
    staged = stage(table, old.writer, range(5, 9))
    with pytest.raises(FencedError) as caught:
        old.commit(TriggerOutput(data_files=staged, records=4), {"next_id": 9})
    assert caught.value.by_version == 2
    with pytest.raises(FencedError):
        committer(catalog, 1, attempt="z").start([])
    assert committed_ids(catalog) == list(range(5))


def test_same_version_restart_takes_over_and_fences_the_zombie(tmp_path: Path) -> None:
    catalog = open_catalog(tmp_path)
    table = create_table(catalog)
    zombie = committer(catalog, 3, attempt="old")
    zombie.start([])
    restarted = committer(catalog, 3, attempt="new")
    restarted.start([])
    with pytest.raises(FencedError) as caught:
        commit_range(zombie, table, 0, 3)
    assert caught.value.by_version == 3 and caught.value.by_attempt == "new3"
    commit_range(restarted, table, 0, 3)
    assert committed_ids(catalog) == [0, 1, 2]


def test_progress_survives_expiry_of_every_own_snapshot(tmp_path: Path) -> None:
    catalog, table, _first = started_sink(tmp_path, 7)
    foreign = catalog.load_table(TABLE)
    foreign.append(foreign.scan().to_arrow().slice(0, 0))  # someone else's snapshot becomes the head
    table = catalog.load_table(TABLE)
    head = table.metadata.current_snapshot()
    assert head is not None
    time.sleep(0.01)
    table.maintenance.expire_snapshots().older_than(
        __import__("datetime").datetime.fromtimestamp(head.timestamp_ms / 1000 + 0.001)
    ).commit()
    table = catalog.load_table(TABLE)
    assert sink_commits(table) == [], "every snapshot carrying our properties was expired"
    progress = committer(catalog, 2).start([])
    assert progress.resumed_from == "checkpoint"
    assert progress.frontier == {"next_id": 7}


def test_rolled_back_table_does_not_resume_past_what_it_holds(tmp_path: Path) -> None:
    catalog, table, first = started_sink(tmp_path, 4)
    table = catalog.load_table(TABLE)
    keep = table.metadata.current_snapshot()
    commit_range(first, table, 4, 8)
    assert keep is not None
    catalog.load_table(TABLE).manage_snapshots().rollback_to_snapshot(keep.snapshot_id).commit()
    progress = committer(catalog, 2).start([])
    assert progress.frontier == {"next_id": 4}


def test_a_version_the_dead_letter_table_fences_lands_nothing_after_main_forgets_it(tmp_path: Path) -> None:
    """Version 2 fenced the main and the dead-letter table; main is rolled back past every commit of the sink
    and its checkpoint removed to start over. Main no longer records version 2, the dead-letter table does: a
    stale version 1 is fenced by it before it writes anything, on either table (docs/protocol.md, "Fencing")."""
    catalog = open_catalog(tmp_path)
    table = create_table(catalog)
    catalog.create_table(DEAD, DEAD_LETTER_SCHEMA)
    table.append(pa.Table.from_pylist([{"id": -1, "who": "foreign"}], schema=table.schema().as_arrow()))
    before_the_sink = catalog.load_table(TABLE).metadata.current_snapshot_id
    assert before_the_sink is not None
    for version in (1, 2):
        SinkCommitter(catalog, TABLE, Writer(SINK, version, f"a{version}"), DEAD).start([])
    catalog.load_table(TABLE).manage_snapshots().rollback_to_snapshot(before_the_sink).commit()
    with catalog.load_table(TABLE).transaction() as transaction:
        transaction.remove_properties(protocol.checkpoint_key(SINK))

    def snapshots() -> dict[str, list[int]]:
        return {name: [s.snapshot_id for s in catalog.load_table(name).metadata.snapshots] for name in (TABLE, DEAD)}

    seen = snapshots()
    with pytest.raises(FencedError) as caught:
        SinkCommitter(catalog, TABLE, Writer(SINK, 1, "b1"), DEAD).start([])
    assert (caught.value.by_version, caught.value.by_attempt) == (2, "a2")
    assert snapshots() == seen, "a fenced version landed a snapshot"
    assert protocol.parse_checkpoint(catalog.load_table(TABLE).metadata, SINK) is None
    progress = SinkCommitter(catalog, TABLE, Writer(SINK, 2, "b2"), DEAD).start([])  # version 2 starts over
    assert progress.frontier is None and progress.resumed_from == "none"


def test_leftover_staged_files_are_deleted_on_start_and_only_those(tmp_path: Path) -> None:
    catalog, table, crashed = started_sink(tmp_path, 3)
    orphan = stage(table, crashed.writer, range(3, 6))[0].file_path  # staged, then the job "crashed"
    foreign_file = tmp_path / "warehouse" / "ns" / "events" / "data" / "someone-else.parquet"
    foreign_file.write_bytes(b"not ours")
    restarted = committer(catalog, 2)
    restarted.start([])
    deleted = restarted.cleanup_orphans(catalog.load_table(TABLE))
    assert [Path(p.removeprefix("file://")).name for p in deleted] == [Path(orphan.removeprefix("file://")).name]
    remaining = {Path(f.uri).name for f in list_files(catalog.load_table(TABLE).metadata.location + "/data", {})}
    assert "someone-else.parquet" in remaining
    assert all(name.startswith(sink_file_prefix(SINK)) or name == "someone-else.parquet" for name in remaining)
    assert committed_ids(catalog) == [0, 1, 2]


def _race_writer(directory: str, version: int, rounds: int, started: multiprocessing.synchronize.Event | None) -> None:  # type: ignore[name-defined]
    """A writer process: fence, then commit ``rounds`` small batches as fast as it can, until fenced."""
    catalog = open_catalog(Path(directory))
    me = committer(catalog, version, attempt=f"p{os.getpid()}-")
    try:
        me.start([])
        if started is not None:
            started.set()
        table = catalog.load_table(TABLE)
        for index in range(rounds):
            base = version * 1_000_000 + index * 10
            commit_range(me, table, base, base + 10)
    except FencedError:
        os._exit(75)
    os._exit(0)


def test_stale_writers_never_land_after_a_newer_fence(tmp_path: Path) -> None:
    """Race each version against the next, many rounds: no stale commit lands after a newer fence."""
    catalog = open_catalog(tmp_path)
    create_table(catalog)
    context = multiprocessing.get_context("spawn")
    processes = []
    for version in range(1, 6):
        started = context.Event()
        process = context.Process(target=_race_writer, args=(str(tmp_path), version, 40, started))
        process.start()
        processes.append(process)
        assert started.wait(120), f"writer v{version} did not fence in time"
    for process in processes:
        process.join(300)
    codes = [process.exitcode for process in processes]
    assert codes[-1] == 0, "the newest writer must finish all its rounds"
    assert 75 in codes[:-1], "at least one stale writer must have been fenced while racing"
    table = catalog.load_table(TABLE)
    commits = sink_commits(table)
    fence_index = {c.writer.version: i for i, c in enumerate(commits) if c.kind == "fence"}
    for version, index in fence_index.items():
        stale_after = [c for c in commits[index + 1:] if c.writer.version < version]
        assert stale_after == [], f"version(s) {sorted({c.writer.version for c in stale_after})} landed after v{version}'s fence"
    newest_rows = [i for i in committed_ids(catalog) if i >= 5_000_000]
    assert len(newest_rows) == 400 and len(set(newest_rows)) == 400


def test_a_table_the_sink_creates_keeps_a_bounded_number_of_metadata_files(tmp_path: Path) -> None:
    from icebergsync.catalog import NEW_TABLE_DEFAULTS, ensure_table
    from tests.integration.committer_support import SCHEMA

    catalog = open_catalog(tmp_path)
    table = ensure_table(catalog, TABLE, SCHEMA, [], {"write.metadata.previous-versions-max": "3"})
    assert table.properties["write.metadata.delete-after-commit.enabled"] == "true"
    assert NEW_TABLE_DEFAULTS["write.metadata.delete-after-commit.enabled"] == "true"
    sink = committer(catalog, 1)
    sink.start([])
    for start in range(0, 80, 10):
        commit_range(sink, table, start, start + 10)
    table = catalog.load_table(TABLE)
    metadata_files = sorted(normalize(f.uri) for f in list_files(f"{table.location()}/metadata", dict(table.io.properties))
                            if f.uri.endswith(".metadata.json"))
    assert len(table.metadata.metadata_log) == 3
    assert metadata_files == sorted(normalize(uri) for uri in [
        *(entry.metadata_file for entry in table.metadata.metadata_log), table.metadata_location])
    assert committed_ids(catalog) == list(range(80))


def _metadata_avro(catalog: Catalog) -> set[str]:
    """Names of the manifests and manifest lists in the table's metadata directory."""
    table = catalog.load_table(TABLE)
    return {Path(f.uri).name for f in list_files(table.metadata.location + "/metadata", {}) if f.uri.endswith(".avro")}


def _referenced_avro(catalog: Catalog) -> set[str]:
    return {Path(p).name for p in referenced_files(catalog.load_table(TABLE)) if p.endswith(".avro")}


def test_a_commit_round_that_lost_to_a_conflict_leaves_no_manifest(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    catalog, table, sink = started_sink(tmp_path, 3)
    real_commit = swap_module.commit_transactions
    rounds = []

    def another_writer_first(catalog_: Catalog, changes: list[TableChange]) -> object:
        rounds.append(len(changes))
        if len(rounds) == 1:  # the head moves between the build and the send: this round's snapshot loses
            foreign = catalog.load_table(TABLE)
            foreign.append(pa.Table.from_pylist([{"id": -1, "who": "foreign"}], schema=foreign.schema().as_arrow()))
        return real_commit(catalog_, changes)

    monkeypatch.setattr(swap_module, "commit_transactions", another_writer_first)
    commit_range(sink, table, 3, 6)
    assert len(rounds) == 2
    assert _metadata_avro(catalog) == _referenced_avro(catalog)  # the lost round's manifests went with it
    assert committed_ids(catalog) == [-1, 0, 1, 2, 3, 4, 5]


def test_manifests_of_a_commit_that_never_landed_are_deleted_on_start_and_only_those(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    catalog, table, crashed = started_sink(tmp_path, 3)

    def crash_before_sending(catalog_: Catalog, changes: list[TableChange]) -> object:
        raise KeyboardInterrupt("killed between writing the commit's manifests and sending it")

    monkeypatch.setattr(swap_module, "commit_transactions", crash_before_sending)
    with pytest.raises(KeyboardInterrupt):
        commit_range(crashed, table, 3, 6)
    monkeypatch.undo()
    left = _metadata_avro(catalog) - _referenced_avro(catalog)
    assert len(left) >= 2 and all(sink_file_prefix(SINK) in name for name in left)  # a manifest and its list
    foreign = catalog.load_table(TABLE)
    foreign.append(pa.Table.from_pylist([{"id": -1, "who": "foreign"}], schema=foreign.schema().as_arrow()))
    restarted = committer(catalog, 2)
    restarted.start([])
    deleted = {Path(p).name for p in restarted.cleanup_orphans(catalog.load_table(TABLE)) if p.endswith(".avro")}
    assert deleted == left
    assert _metadata_avro(catalog) == _referenced_avro(catalog)
    assert committed_ids(catalog) == [-1, 0, 1, 2]


def _another_writer_first(monkeypatch: pytest.MonkeyPatch, catalog: Catalog) -> list[int]:
    """Make the first commit the sink sends lose to another writer's append (the head moves under it)."""
    real_commit = swap_module.commit_transactions
    rounds: list[int] = []

    def commit(catalog_: Catalog, changes: list[TableChange]) -> object:
        rounds.append(len(changes))
        if len(rounds) == 1:
            foreign = catalog.load_table(TABLE)
            foreign.append(pa.Table.from_pylist([{"id": -1, "who": "foreign"}], schema=foreign.schema().as_arrow()))
        return real_commit(catalog_, changes)

    monkeypatch.setattr(swap_module, "commit_transactions", commit)
    return rounds


def test_a_schema_commit_round_that_lost_leaves_no_manifest(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    catalog, _, sink = started_sink(tmp_path, 3)
    rounds = _another_writer_first(monkeypatch, catalog)
    sink.evolve_schema([SchemaChange("add", "note", StringType())])
    assert len(rounds) == 2
    assert _metadata_avro(catalog) == _referenced_avro(catalog)


def test_a_maintenance_commit_refused_because_main_moved_leaves_no_manifest(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    catalog, table, sink = started_sink(tmp_path, 3)
    planned = catalog.load_table(TABLE).current_snapshot()
    assert planned is not None
    [old] = [task.file for task in catalog.load_table(TABLE).scan().plan_files()]
    replacement = stage(table, sink.writer, range(3))
    rounds = _another_writer_first(monkeypatch, catalog)
    with pytest.raises(MaintenanceConflictError):
        sink.commit_maintenance(planned, [old], replacement)
    assert len(rounds) == 1
    assert _metadata_avro(catalog) == _referenced_avro(catalog)


def test_an_expiry_that_lost_to_a_conflict_is_recomputed_on_the_new_head(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An expiry goes through the same compare-and-swap as every commit: the head moved under its first send, so
    the next round re-checks the fence on the new head and expires what is expirable there (the newest snapshot of
    main and the sink's own newest are kept)."""
    catalog, table, sink = started_sink(tmp_path, 3)
    commit_range(sink, table, 3, 6)
    rounds = _another_writer_first(monkeypatch, catalog)
    expired = sink.expire_snapshots(int(time.time() * 1000) + 60_000, retain_last=1)
    assert len(rounds) == 2
    after = catalog.load_table(TABLE).metadata
    kept = {s.snapshot_id for s in after.snapshots}
    assert kept == {after.current_snapshot_id, sink.last_snapshot_id} and len(kept) == 2
    assert expired and not kept & {s.snapshot_id for s in expired}
    assert committed_ids(catalog) == [-1, 0, 1, 2, 3, 4, 5]


def test_an_expiry_whose_answer_was_lost_after_it_landed_sends_nothing_more(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An expiry adds no snapshot to look for after an unknown outcome: it is idempotent, so the next round
    recomputes on the head, finds nothing left to expire and sends nothing."""
    catalog, _, sink = started_sink(tmp_path, 3)
    before = {s.snapshot_id for s in catalog.load_table(TABLE).metadata.snapshots}
    real_commit = swap_module.commit_transactions
    rounds: list[int] = []

    def answer_lost(catalog_: Catalog, changes: list[TableChange]) -> object:
        rounds.append(len(changes))
        real_commit(catalog_, changes)
        raise ConnectionError("the answer to the expiry was lost")

    monkeypatch.setattr(swap_module, "commit_transactions", answer_lost)
    assert sink.expire_snapshots(int(time.time() * 1000) + 60_000, retain_last=1) == []
    assert rounds == [1]
    assert {s.snapshot_id for s in catalog.load_table(TABLE).metadata.snapshots} == {sink.last_snapshot_id} != before
    assert committed_ids(catalog) == [0, 1, 2]
