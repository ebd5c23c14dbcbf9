"""Copy-on-write of small data files in a keyed commit (spark_app/commit/copy_on_write.py).

A keyed trigger that touches a data file smaller than ``changes.copyOnWriteBelow`` writes it again, merged
with the trigger's new rows of its partition, in its own commit: a small table keeps ONE data file per
partition and no delete file after every commit (format 2 and 3), equal to the model for Apache
Iceberg's Spark reader and pyiceberg. Larger files still get position deletes or DVs; equality deletes
are untouched; on format 3 every row that was not changed keeps its row lineage; a foreign commit on
the head between the staging and the commit is rebuilt on; unreferenced files are not left behind.
"""

from __future__ import annotations

import random
from collections import Counter
from datetime import timedelta
from pathlib import Path

import pyarrow as pa
import pytest
from pyiceberg.catalog import Catalog
from pyiceberg.manifest import DataFileContent
from pyiceberg.table import Table
from pyspark.sql import SparkSession

import spark_app.commit.data_commit as data_commit_module
import spark_app.commit.head_writes as head_writes_module
import spark_app.commit.swap as swap_module
from icebergsync import protocol
from icebergsync.protocol import Writer
from spark_app.commit.committer import SinkCommitter
from spark_app.iceberg.internals import is_deletion_vector, live_files, referenced_data_file
from tests.integration.keyed_support import (
    START,
    ChangeStream,
    delete_contents,
    micros,
    pyiceberg_rows,
    spark_rows,
    sync_change_files,
)
from tests.integration.sync_support import unreferenced_sink_files
from tests.integration.test_keyed_commit import SINK, open_catalog, stage
from tests.integration.test_maintenance import Triggers, WideStream, keyed_table, spark_lineage

BELOW = 256 * 1024


def layout(table: Table, snapshot_id: int | None = None) -> tuple[Counter[object], Counter[str]]:
    """Data files per partition and delete files by kind, live in a snapshot (the head when None)."""
    snapshot = table.metadata.snapshot_by_id(snapshot_id) if snapshot_id is not None else table.current_snapshot()
    assert snapshot is not None
    data: Counter[object] = Counter()
    deletes: Counter[str] = Counter()
    for f in live_files(table, snapshot):
        if f.data_file.content == DataFileContent.DATA:
            data[(f.data_file.spec_id, f.data_file.partition)] += 1
        else:
            deletes["dv" if is_deletion_vector(f.data_file) else str(f.data_file.content)] += 1
    return data, deletes


def committer(catalog: Catalog, name: str, version: int = 1, below: int = BELOW) -> SinkCommitter:
    writer = SinkCommitter(catalog, name, Writer(SINK, version, f"attempt{version}"), copy_on_write_bytes=below)
    writer.start([])
    return writer


@pytest.mark.parametrize("format_version", [2, 3])
def test_a_small_table_keeps_one_data_file_per_partition_and_no_deletes(
        tmp_path: Path, spark: SparkSession, format_version: int) -> None:
    catalog = open_catalog(tmp_path)
    name = keyed_table(catalog, format_version)
    triggers = Triggers(catalog, name, WideStream("debezium", random.Random(f"cow-{format_version}")),
                        by_position=True)
    v1 = committer(catalog, name)
    lineage: dict[int, tuple[int, int]] = {}
    for number in range(8):
        before = dict(triggers.stream.model)
        triggers.commit(v1, 300)
        table = catalog.load_table(name)
        data, deletes = layout(table)
        assert not deletes, f"trigger {number}: delete files {deletes}"
        assert set(data.values()) == {1}, f"trigger {number}: data files per partition {data}"
        assert pyiceberg_rows(table) == triggers.stream.model, f"trigger {number}"
        if format_version == 3:
            now = spark_lineage(spark, table)
            unchanged = [k for k, row in triggers.stream.model.items() if before.get(k) == row and k in lineage]
            assert unchanged or number == 0, "no row outlived a trigger"
            assert {k: now[k] for k in unchanged} == {k: lineage[k] for k in unchanged}, "row lineage changed"
            lineage = now
    table = catalog.load_table(name)
    assert spark_rows(spark, table) == triggers.stream.model
    summary = table.current_snapshot().summary  # type: ignore[union-attr]
    assert summary is not None and int(summary["deleted-data-files"]) >= 1
    assert unreferenced_sink_files(table, SINK) == []  # the staged files the merged ones replace were deleted


def test_files_above_the_threshold_still_get_position_deletes(tmp_path: Path, spark: SparkSession) -> None:
    """Large files (here: the first trigger's) get deletion vectors as before; the small files of later
    triggers are written again. Every delete file names a large file."""
    catalog = open_catalog(tmp_path)
    name = keyed_table(catalog, 3)
    triggers = Triggers(catalog, name, WideStream("debezium", random.Random("cow-large")), by_position=True)
    v1 = committer(catalog, name, below=0)
    triggers.commit(v1, 3000)
    table = catalog.load_table(name)
    snapshot = table.current_snapshot()
    assert snapshot is not None
    large = {f.path for f in live_files(table, snapshot) if f.data_file.content == DataFileContent.DATA}
    threshold = min(f.data_file.file_size_in_bytes for f in live_files(table, snapshot)
                    if f.data_file.content == DataFileContent.DATA)
    v2 = committer(catalog, name, version=2, below=threshold)
    for number in range(4):
        triggers.commit(v2, 150)
        table = catalog.load_table(name)
        snapshot = table.current_snapshot()
        assert snapshot is not None
        files = live_files(table, snapshot)
        named = {referenced_data_file(f.data_file) for f in files if is_deletion_vector(f.data_file)}
        assert named and named <= large, f"trigger {number}: DVs of {named - large}"
        small = [f for f in files if f.data_file.content == DataFileContent.DATA and f.path not in large]
        by_partition = Counter((f.data_file.spec_id, f.data_file.partition) for f in small)
        assert set(by_partition.values()) <= {1}, f"trigger {number}: small files per partition {by_partition}"
        assert pyiceberg_rows(table) == triggers.stream.model
    assert spark_rows(spark, catalog.load_table(name)) == triggers.stream.model


def test_equality_deletes_are_untouched(tmp_path: Path, spark: SparkSession) -> None:
    catalog = open_catalog(tmp_path)
    name = keyed_table(catalog, 2)
    triggers = Triggers(catalog, name, ChangeStream("debezium", random.Random("cow-equality")))
    v1 = committer(catalog, name)
    for _ in range(3):
        triggers.commit(v1, 300)
    table = catalog.load_table(name)
    assert set(delete_contents(table)) == {"equality"}
    data, _ = layout(table)
    assert max(data.values()) > 1
    assert all(s.summary is None or int(s.summary.get("deleted-data-files") or "0") == 0 for s in table.metadata.snapshots)
    assert spark_rows(spark, table) == triggers.stream.model


def test_a_foreign_commit_between_staging_and_commit_is_rebuilt_on(tmp_path: Path) -> None:
    """The copy-on-write is recomputed on the head the commit swaps against: another engine appends a row (a new
    small file in a partition the trigger writes to) after the first round was built; that round conflicts, its
    files are deleted, the next round merges the foreign file too, and the table holds every row once."""
    catalog = open_catalog(tmp_path)
    name = keyed_table(catalog, 2)
    triggers = Triggers(catalog, name, WideStream("debezium", random.Random("cow-foreign")), by_position=True)
    v1 = committer(catalog, name)
    triggers.commit(v1, 300)
    output = stage(catalog.load_table(name), v1.writer, *triggers.stream.records(300), "debezium", "foreign-0", True)
    original = v1.head_writes.position_deletes
    rounds: list[int] = []
    foreign_key, moment = 10**9, START + timedelta(days=1, hours=3)

    def interfere(table: Table, trigger_output: object) -> object:
        result = original(table, trigger_output)  # type: ignore[arg-type]
        rounds.append(len(result[1].added))
        if len(rounds) == 1:  # after the first round's files are written, another engine appends on main
            foreign = catalog.load_table(name)
            foreign.append(pa.Table.from_pylist(
                [{"id": foreign_key, "name": "foreign", "updated_at": moment}],
                schema=pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("name", pa.string()),
                                  pa.field("updated_at", pa.timestamp("us", tz="UTC"))])))
        return result

    v1.head_writes.position_deletes = interfere  # type: ignore[method-assign]
    v1.commit(output, {"after": "t-foreign"})
    assert len(rounds) == 2 and rounds[0] > 0, rounds
    table = catalog.load_table(name)
    assert pyiceberg_rows(table) == {**triggers.stream.model, foreign_key: ("foreign", micros(moment))}
    data, deletes = layout(table)
    assert not deletes and set(data.values()) == {1}
    assert unreferenced_sink_files(table, SINK) == []


@pytest.mark.parametrize("format_version", ["2", "3"])
def test_a_keyed_sync_through_the_job_keeps_one_file_per_partition(
        tmp_path: Path, spark: SparkSession, format_version: str) -> None:
    """The job with the default changes.copyOnWriteBelow (upkeep's rewrites off): after every data commit each
    partition is one data file and there is no delete file; Spark and pyiceberg read the model."""
    stream = ChangeStream("debezium", random.Random(f"cow-job-{format_version}"))
    table = sync_change_files(tmp_path, spark, stream, deletes="position", format_version=format_version,
                              copy_on_write_below="256Ki")
    for snapshot in protocol.main_ancestry(table.metadata):
        commit = protocol.parse_commit(snapshot)
        if commit is None or commit.kind != protocol.KIND_DATA:
            continue
        data, deletes = layout(table, snapshot.snapshot_id)
        assert not deletes and set(data.values()) <= {1}, (snapshot.snapshot_id, data, deletes)
    assert spark_rows(spark, table) == stream.model
    assert pyiceberg_rows(table) == stream.model



class Killed(BaseException):
    """Stands for a kill -9: nothing after it runs (no cleanup of what the attempt staged)."""


@pytest.mark.parametrize("when", ["before-the-swap", "after-the-swap"])
def test_a_kill_around_the_copy_on_write_commit_leaves_every_row_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, when: str) -> None:
    """Killed once the round's merged files are written but before the swap is sent (the trigger did not land:
    the restart replays it), or once it landed but before the staged files it merged were deleted (the restart
    resumes after it): either way the table holds every row once and the restart's orphan removal leaves no file
    of the killed attempt behind."""
    catalog = open_catalog(tmp_path)
    name = keyed_table(catalog, 3)
    triggers = Triggers(catalog, name, WideStream("debezium", random.Random(f"cow-kill-{when}")), by_position=True)
    v1 = committer(catalog, name)
    for _ in range(2):
        triggers.commit(v1, 300)
    before = dict(triggers.stream.model)
    values, keys = triggers.stream.records(300)
    output = stage(catalog.load_table(name), v1.writer, values, keys, "debezium", "kill-0", True)
    with monkeypatch.context() as patched:
        if when == "before-the-swap":
            def refuse(*_: object) -> object:
                raise Killed
            patched.setattr(swap_module, "commit_transactions", refuse)
        else:
            def killed(*_: object) -> object:
                raise Killed
            patched.setattr(data_commit_module.DataCommit, "land", killed)
        with pytest.raises(Killed):
            v1.commit(output, {"after": "t-killed"})
    table = catalog.load_table(name)
    assert unreferenced_sink_files(table, SINK), "the killed attempt left files (what a kill -9 leaves)"
    v2 = SinkCommitter(catalog, name, Writer(SINK, 2, "attempt2"), copy_on_write_bytes=BELOW)
    resumed = v2.start([]).frontier
    v2.cleanup_orphans(catalog.load_table(name))
    if when == "before-the-swap":
        assert resumed != {"after": "t-killed"}
        assert pyiceberg_rows(catalog.load_table(name)) == before
        replay = stage(catalog.load_table(name), v2.writer, values, keys, "debezium", "kill-1", True)
        v2.commit(replay, {"after": "t-replayed"})
    else:
        assert resumed == {"after": "t-killed"}
    table = catalog.load_table(name)
    assert pyiceberg_rows(table) == triggers.stream.model
    data, deletes = layout(table)
    assert not deletes and set(data.values()) == {1}
    assert unreferenced_sink_files(table, SINK) == []


def test_a_threshold_above_every_file_rewrites_no_more_than_the_driver_budget(
        tmp_path: Path, spark: SparkSession, monkeypatch: pytest.MonkeyPatch) -> None:
    """A tenant's ``copyOnWriteBelow: 1Ti`` makes every data file eligible; each commit still writes again no more
    than the driver's budget (the real one is ``spark_app.staging.packing.DRIVER_REWRITE_BYTES``, shrunk here to a third of
    the table) and deletes the older rows of the other partitions by position, every row still exactly once."""
    catalog = open_catalog(tmp_path)
    name = keyed_table(catalog, 2)
    triggers = Triggers(catalog, name, WideStream("debezium", random.Random("cow-hostile")), by_position=True)
    v1 = committer(catalog, name, below=1 << 40)
    triggers.commit(v1, 3000)
    table = catalog.load_table(name)
    budget = sum(f.data_file.file_size_in_bytes for f in live_files(table, table.current_snapshot())) // 3  # type: ignore[arg-type]
    real = head_writes_module.copy_on_write
    monkeypatch.setattr(head_writes_module, "copy_on_write",
                        lambda *args, **kwargs: real(*args, **kwargs, budget_bytes=budget))
    for number in range(4):
        before = {f.path: f.data_file.file_size_in_bytes for f in live_files(table, table.current_snapshot())  # type: ignore[arg-type]
                  if f.data_file.content == DataFileContent.DATA}
        triggers.commit(v1, 600)
        table = catalog.load_table(name)
        after = {f.path for f in live_files(table, table.current_snapshot())}  # type: ignore[arg-type]
        rewritten = sum(size for path, size in before.items() if path not in after)
        assert 0 < rewritten <= budget, f"trigger {number}: {rewritten} bytes written again, budget {budget}"
        assert pyiceberg_rows(table) == triggers.stream.model, f"trigger {number}"
    assert layout(table)[1], "the partitions past the budget got no position deletes"
    assert spark_rows(spark, table) == triggers.stream.model
