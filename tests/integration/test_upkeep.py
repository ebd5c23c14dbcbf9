"""Upkeep on by default (spark_app/upkeep/runner.py, spark_app/upkeep/), against a real SQLite catalog.

The real job with no maintenance section compacts an append sync's many small triggers and a keyed
sync's files and deletes; Apache Iceberg's Spark runtime reads every result. Position delete files are
merged to one per data file and applied once they remove enough rows; large runs go to Spark tasks;
files written under an older schema are read by field id; a run planned while another writer commits
is dropped and retried; a fenced writer lands none; kill -9 around a compaction's commit loses and
duplicates nothing; each part turns off on its own.
"""

from __future__ import annotations

import logging
import os
import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyiceberg.catalog import Catalog
from pyiceberg.manifest import DataFileContent
from pyiceberg.table import Table, Transaction
from pyiceberg.types import StringType
from pyspark.sql import SparkSession

from icebergsync import protocol
from icebergsync.errors import FencedError
from icebergsync.protocol import Writer
from icebergsync.schema import SchemaChange
from icebergsync.spec import Maintenance
from spark_app.commit.committer import SinkCommitter
from spark_app.commit.trigger_output import TriggerOutput
from spark_app.iceberg import internals
from spark_app.iceberg.position_deletes.deletion_vector import DeletionVector
from spark_app.iceberg.position_deletes.stage import stage_position_deletes
from spark_app.job.loop import SyncJob
from spark_app.staging import packing
from spark_app.staging.writer import table_plan
from spark_app.upkeep import runner
from spark_app.upkeep.runner import Maintainer
from tests.integration.committer_support import TABLE, commit_range, create_table, open_catalog, stage_rows
from tests.integration.keyed_support import spark_rows
from tests.integration.sync_support import (
    BackgroundJob,
    catalog_of,
    make_sync,
    run_job_process,
    sink_commits,
    sync_document,
    table_ids,
    unreferenced_sink_files,
    write_spec,
)
from tests.integration.test_keyed_commit import SINK
from tests.integration.test_maintenance import (
    SCHEMA,
    Triggers,
    WideStream,
    keyed_table,
    live,
    pyiceberg_rows,
    spark_lineage,
    write_change_files,
)

FAST = {"rowsPerSecond": 1_000_000}
SMALL_TARGET = 256 * 1024


def settings(**parts: dict[str, Any]) -> Maintenance:
    """The defaults with the parts given changed (``compaction={"enabled": False}``, ...)."""
    return Maintenance.model_validate({name: value for name, value in parts.items()})


def spark_ids(spark: SparkSession, table: Table) -> list[int]:
    """The ids Apache Iceberg's Spark runtime reads (deletes applied)."""
    frame = spark.read.format("iceberg").load(table.metadata_location)
    return sorted(row["id"] for row in frame.select("id").collect())


def data_files(table: Table) -> list[Any]:
    snapshot = table.current_snapshot()
    assert snapshot is not None
    return [f.data_file for f in internals.live_files(table, snapshot) if f.data_file.content == DataFileContent.DATA]


def test_an_append_sync_of_many_small_triggers_ends_with_few_files_near_the_target(tmp_path: Path,
                                                                                   spark: SparkSession) -> None:
    """No maintenance section: 40 triggers of 1,200 rows (one small file each) end in a handful of files."""
    total = 48_000
    sync = make_sync(tmp_path, {"generator": {**FAST, "totalRows": total, "maxRowsPerTrigger": 1_200}},
                     commit={"interval": "100ms", "targetFileSize": "256Ki"})
    assert sync.spec.maintenance == Maintenance()  # the defaults: on
    summary = SyncJob(sync, 1, spark).run()
    assert summary.commits == 40 and summary.upkeep.runs > 0 and summary.upkeep.data_files_rewritten > 0
    table = catalog_of(sync).load_table("sales.orders")
    assert spark_ids(spark, table) == list(range(total)) and table_ids(table) == list(range(total))
    files = data_files(table)
    sizes = sorted(f.file_size_in_bytes for f in files)
    small = [size for size in sizes if size < 0.75 * SMALL_TARGET]
    assert len(small) < 5, sizes  # fewer small files than make a compaction due
    assert len(files) <= sum(sizes) / (0.75 * SMALL_TARGET) + len(small), sizes
    assert all(size <= 1.1 * SMALL_TARGET for size in sizes), sizes
    kinds = [c.kind for c in sink_commits(table, "test/orders")]
    upkeep = summary.upkeep
    assert kinds.count("data") == 40 and kinds.count("maintenance") == upkeep.runs + upkeep.manifest_runs
    assert unreferenced_sink_files(table, "test/orders") == []  # replaced files live on in the older snapshots


def test_a_keyed_sync_with_equality_deletes_ends_with_compacted_files_no_deletes_and_the_model(
        tmp_path: Path, spark: SparkSession) -> None:
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    stream = WideStream("debezium", random.Random("upkeep-keyed"))
    files = 8
    write_change_files(inbox, stream, files, 600)
    sync = make_sync(tmp_path, {"files": {"path": str(inbox), "maxFilesPerTrigger": 1}}, schema=SCHEMA,
                     table={"key": ["id"], "partitionBy": ["day(updated_at)"]},
                     changes={"format": "debezium", "deletes": "equality"})
    catalog = catalog_of(sync)
    last = {"after": f"{files - 1:04d}.json"}

    def rewritten_after_the_last_trigger() -> bool:
        commits = sink_commits(catalog.load_table("sales.orders"), "test/orders")
        return bool(commits) and commits[-1].frontier == last and commits[-1].kind == protocol.KIND_MAINTENANCE

    with BackgroundJob(SyncJob(sync, 1, spark)) as running:
        running.wait_until(rewritten_after_the_last_trigger, "the last trigger's deletes rewritten", timeout=300)
    table = catalog.load_table("sales.orders")
    assert live(table, DataFileContent.EQUALITY_DELETES) == [] and live(table, DataFileContent.POSITION_DELETES) == []
    assert spark_rows(spark, table) == stream.model and pyiceberg_rows(table) == stream.model
    partitions = {f.partition for f in data_files(table)}
    assert len(data_files(table)) <= 2 * len(partitions)  # per day: the older files folded into one, the last trigger's


def small_append_table(tmp_path: Path, triggers: int = 6) -> tuple[Catalog, SinkCommitter]:
    catalog = open_catalog(tmp_path)
    table = create_table(catalog)
    committer = SinkCommitter(catalog, TABLE, Writer("sink", 1, "attempt1"))
    committer.start([])
    for number in range(triggers):
        commit_range(committer, table, number * 100, (number + 1) * 100)
    return catalog, committer


def test_a_run_planned_while_another_writer_commits_is_dropped_and_retried(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    catalog, committer = small_append_table(tmp_path)
    run_plan = runner.run_plan

    def run_then_another_writer_appends(*arguments: Any) -> Any:
        outcome = run_plan(*arguments)
        foreign = catalog.load_table(TABLE)
        foreign.append(pa.table({"id": [-1], "who": ["foreign"]}, schema=foreign.schema().as_arrow()))
        return outcome

    monkeypatch.setattr(runner, "run_plan", run_then_another_writer_appends)
    maintainer = Maintainer(settings(), committer, catalog, TABLE, SMALL_TARGET)
    with caplog.at_level(logging.INFO, logger="icebergsync.maintenance"):
        maintainer.after_commit()
    assert "maintenance rewrite skipped: main moved" in caplog.text
    table = catalog.load_table(TABLE)
    head = table.current_snapshot()
    assert head is not None and protocol.parse_commit(head) is None  # the foreign append, nothing after it
    assert len(data_files(table)) == 7 and unreferenced_sink_files(table, "sink") == []  # its files were deleted

    monkeypatch.setattr(runner, "run_plan", run_plan)
    maintainer.after_commit()  # due again after the next commit: planned on the new head, it lands
    table = catalog.load_table(TABLE)
    commit = protocol.parse_commit(table.current_snapshot())  # type: ignore[arg-type]
    assert commit is not None and commit.kind == protocol.KIND_MAINTENANCE and commit.frontier == {"next_id": 600}
    assert len(data_files(table)) == 1
    assert sorted(table.scan().to_arrow().column("id").to_pylist()) == [-1, *range(600)]


def test_a_fenced_writer_never_lands_a_compaction(tmp_path: Path) -> None:
    catalog, stale = small_append_table(tmp_path)
    newer = SinkCommitter(catalog, TABLE, Writer("sink", 2, "attempt2"))
    newer.start([])
    head = catalog.load_table(TABLE).metadata.current_snapshot_id
    with pytest.raises(FencedError):
        Maintainer(settings(), stale, catalog, TABLE, SMALL_TARGET).after_commit()
    table = catalog.load_table(TABLE)
    assert table.metadata.current_snapshot_id == head and len(data_files(table)) == 6
    assert unreferenced_sink_files(table, "sink") == []  # the stale run's replacements were deleted
    assert Maintainer(settings(), newer, catalog, TABLE, SMALL_TARGET).rewrite() is not None  # the owner compacts
    assert sorted(catalog.load_table(TABLE).scan().to_arrow().column("id").to_pylist()) == list(range(600))


def test_kill_9_around_a_compactions_commit_loses_and_duplicates_nothing(tmp_path: Path, spark: SparkSession) -> None:
    total = 24_000
    document = sync_document(tmp_path, {"generator": {**FAST, "totalRows": total, "maxRowsPerTrigger": 1_000}},
                             commit={"interval": "100ms", "targetFileSize": "256Ki"})
    spec_path = write_spec(tmp_path, document)
    catalog = catalog_of(make_sync(tmp_path, document["spec"]["source"]))

    def exactly_the_frontier() -> Table:
        table = catalog.load_table("sales.orders")
        ids = spark_ids(spark, table)
        frontier = sink_commits(table, "test/orders")[-1].frontier or {"next_id": 0}
        assert ids == list(range(frontier["next_id"])), "the table holds other rows than its frontier covers"
        return table

    status, log = run_job_process(spec_path, 1, crash_at="maintenance-staged:1", timeout=240)
    assert status == -9, log[-3000:]
    table = exactly_the_frontier()
    assert sink_commits(table, "test/orders")[-1].kind == protocol.KIND_DATA
    assert unreferenced_sink_files(table, "test/orders"), "the killed compaction's files were staged"

    status, log = run_job_process(spec_path, 2, crash_at="maintenance-committed:1", timeout=240)
    assert status == -9, log[-3000:]
    table = exactly_the_frontier()
    assert sink_commits(table, "test/orders")[-1].kind == protocol.KIND_MAINTENANCE

    status, log = run_job_process(spec_path, 3, timeout=240)
    assert status == 0, log[-3000:]
    table = exactly_the_frontier()
    assert spark_ids(spark, table) == list(range(total))
    assert unreferenced_sink_files(table, "test/orders") == []  # v3's start-up removed what the kills left
    assert len(data_files(table)) < total // 1_000 // 2


def commit_position_deletes(catalog: Catalog, positions: dict[str, DeletionVector], name: str) -> None:
    """Another writer deletes rows by position (a format 2 position delete file)."""
    table = catalog.load_table(TABLE)
    delta = stage_position_deletes(table, positions, name)
    transaction = Transaction(table)
    internals.row_delta(transaction, {}, [], delta.added, delta.removed)
    internals.commit_transaction(catalog, table, transaction)


def test_position_deletes_are_merged_to_one_per_data_file_then_applied(tmp_path: Path, spark: SparkSession) -> None:
    catalog, committer = small_append_table(tmp_path, triggers=0)
    table = catalog.load_table(TABLE)
    committer.commit(TriggerOutput(data_files=stage_rows(table, committer.writer, {
        "id": list(range(1000)), "who": ["a"] * 1000}), records=1000), {"next_id": 1000})
    (data,) = data_files(catalog.load_table(TABLE))
    commit_position_deletes(catalog, {data.file_path: DeletionVector(range(0, 50))}, "other-1")
    commit_position_deletes(catalog, {data.file_path: DeletionVector(range(50, 100))}, "other-2")
    maintainer = Maintainer(settings(), committer, catalog, TABLE, SMALL_TARGET)
    assert len(live(catalog.load_table(TABLE), DataFileContent.POSITION_DELETES)) == 2

    result = maintainer.rewrite()  # 10 % deleted: the two files become one, the data file stays
    assert result is not None and (result.merged_position_files, result.added_delete_files) == (2, 1)
    table = catalog.load_table(TABLE)
    assert [f.file_path for f in data_files(table)] == [data.file_path]
    assert len(live(table, DataFileContent.POSITION_DELETES)) == 1
    assert spark_ids(spark, table) == list(range(100, 1000)) and table_ids(table) == list(range(100, 1000))
    assert maintainer.rewrite() is None

    commit_position_deletes(catalog, {data.file_path: DeletionVector(range(100, 250))}, "other-3")
    result = maintainer.rewrite()  # 25 % deleted: the data file is written again without them
    assert result is not None and result.files_due_to_deletes == 1 and result.rows_read - result.rows_written == 250
    assert result.removed_delete_files == 2  # the merged file and other-3: both applied, neither applies any more
    table = catalog.load_table(TABLE)
    assert live(table, DataFileContent.POSITION_DELETES) == [] and len(data_files(table)) == 1
    assert spark_ids(spark, table) == list(range(250, 1000)) and table_ids(table) == list(range(250, 1000))


@pytest.mark.parametrize(("format_version", "by_position"), [(2, False), (3, True)])
def test_a_large_run_is_written_by_spark_tasks(tmp_path: Path, spark: SparkSession, monkeypatch: pytest.MonkeyPatch,
                                               format_version: int, by_position: bool) -> None:
    """Equality deletes on format 2; deletion vectors on format 3, whose rows keep their lineage in the tasks too."""
    monkeypatch.setattr(packing, "DRIVER_MERGE_BYTES", 0)  # everything counts as more than the driver takes on
    catalog = open_catalog(tmp_path)
    name = keyed_table(catalog, format_version)
    triggers = Triggers(catalog, name, WideStream("debezium", random.Random("upkeep-spark")), by_position)
    committer = SinkCommitter(catalog, name, Writer(SINK, 1, "attempt1"))
    committer.start([])
    for _ in range(4):
        triggers.commit(committer, 400)
    lineage = spark_lineage(spark, catalog.load_table(name)) if by_position else None
    maintainer = Maintainer(settings(), committer, catalog, name, SMALL_TARGET, lambda: spark)
    result = maintainer.rewrite()
    assert result is not None and result.spark and result.rewritten_files > 0
    assert result.removed_delete_files > 0 and (by_position or result.removed_delete_files == 4)
    table = catalog.load_table(name)
    assert live(table, DataFileContent.EQUALITY_DELETES) == []
    assert spark_rows(spark, table) == triggers.stream.model and pyiceberg_rows(table) == triggers.stream.model
    assert lineage is None or spark_lineage(spark, table) == lineage


def test_files_of_an_older_schema_are_compacted_by_field_id(tmp_path: Path, spark: SparkSession) -> None:
    catalog, _ = small_append_table(tmp_path, triggers=3)
    newer = SinkCommitter(catalog, TABLE, Writer("sink", 2, "attempt2"))
    newer.start([SchemaChange("add", "note", StringType())])
    table = catalog.load_table(TABLE)
    for number in range(3, 6):
        ids = range(number * 100, (number + 1) * 100)
        output = TriggerOutput(data_files=stage_rows(table, newer.writer, {
            "id": list(ids), "who": ["v2"] * 100, "note": [f"n{i}" for i in ids]}, table_plan(table)), records=100)
        newer.commit(output, {"next_id": (number + 1) * 100})
    result = Maintainer(settings(), newer, catalog, TABLE, SMALL_TARGET).rewrite()
    assert result is not None and result.compacted_files == 6 and result.added_files == 1
    frame = spark.read.format("iceberg").load(catalog.load_table(TABLE).metadata_location)
    rows = {row["id"]: (row["who"], row["note"]) for row in frame.collect()}
    assert rows == {i: ("v1", None) if i < 300 else ("v2", f"n{i}") for i in range(600)}


def test_each_part_turns_off_on_its_own(tmp_path: Path) -> None:
    catalog, committer = small_append_table(tmp_path)
    orphan = stage_rows(catalog.load_table(TABLE), Writer("sink", 0, "earlier"), {"id": [7], "who": ["x"]})[0]
    snapshots = len(catalog.load_table(TABLE).metadata.snapshots)
    now = {"olderThan": "0s", "every": "1ms"}

    def after_a_commit(**parts: dict[str, Any]) -> Table:
        time.sleep(0.01)  # every: 1ms has passed; the orphan and the snapshots are older than 0s
        Maintainer(settings(**parts), committer, catalog, TABLE, SMALL_TARGET, clock=clock()).after_commit()
        return catalog.load_table(TABLE)

    off = {"enabled": False}
    table = after_a_commit(compaction=off, rewriteDeletes=off, expireSnapshots=off, removeOrphans=off)
    assert len(table.metadata.snapshots) == snapshots and len(data_files(table)) == 6
    assert Path(orphan.file_path.removeprefix("file://")).exists()

    table = after_a_commit(compaction=off, expireSnapshots={**now, "retainLast": 1}, removeOrphans=off)
    assert len(table.metadata.snapshots) == 1 and len(data_files(table)) == 6  # expired, not compacted
    assert Path(orphan.file_path.removeprefix("file://")).exists()

    table = after_a_commit(compaction=off, expireSnapshots=off, removeOrphans=now)
    assert not Path(orphan.file_path.removeprefix("file://")).exists() and len(data_files(table)) == 6

    table = after_a_commit(expireSnapshots=off, removeOrphans=off)
    assert len(data_files(table)) == 1 and len(table.metadata.snapshots) == 2  # compacted only
    assert sorted(table.scan().to_arrow().column("id").to_pylist()) == list(range(600))


def clock() -> Callable[[], float]:
    """A clock on which every ``every`` of maintenance has passed since the maintainer was made."""
    readings = iter([0.0])
    return lambda: next(readings, 1e9)


def test_figures_full_scans_against_a_freshly_written_copy(tmp_path: Path, spark: SparkSession) -> None:
    """Prints (never asserts) what docs/operations.md reports: along a keyed change stream (Debezium changes,
    ``ICEBERGSYNC_FIGURES_CHANGES`` changes over a tenth as many keys in 40 triggers) committed and maintained as
    the job does, Spark's full scan of the table against one of a freshly written copy of its live rows: right
    after a trigger's commit (before its upkeep) and after the upkeep; and at the end without upkeep. Then an append
    sync of the generator's rows in 40 small triggers, with the most small files it leaves. Asserts the rows."""
    from pyiceberg.partitioning import PartitionSpec

    from tests.integration.keyed_support import ChangeStream

    changes = int(os.environ.get("ICEBERGSYNC_FIGURES_CHANGES", "20000"))
    catalog = open_catalog(tmp_path)

    def scan_seconds(table: Table, columns: str = "id, name, updated_at") -> float:
        timings = []
        for _ in range(3):
            started = time.perf_counter()
            spark.read.format("iceberg").load(table.metadata_location).selectExpr(f"sum(hash({columns}))").collect()
            timings.append(time.perf_counter() - started)
        return min(timings)

    def copy_of(table: Table, number: int) -> Table:
        rows = spark.read.format("iceberg").load(table.metadata_location).toArrow()
        copy = catalog.create_table(f"{table.name()[0]}.copy{number}", table.schema(),
                                    partition_spec=table.spec() if table.spec().fields else PartitionSpec())
        copy.append(rows.cast(copy.schema().as_arrow()))
        return catalog.load_table(f"{table.name()[0]}.copy{number}")

    def shape(table: Table) -> str:
        contents = [f.data_file.content for f in internals.live_files(table, table.current_snapshot())]  # type: ignore[arg-type]
        return (f"{contents.count(DataFileContent.DATA)} data files, "
                f"{len(contents) - contents.count(DataFileContent.DATA)} delete files")

    copies = 0
    for upkeep in (True, False):
        name = keyed_table(catalog)
        stream = ChangeStream("debezium", random.Random("figures-upkeep"), max_keys=max(100, changes // 10))
        triggers = Triggers(catalog, name, stream)
        committer = SinkCommitter(catalog, name, Writer(SINK, 1, "attempt1"))
        committer.start([])
        parts = {} if upkeep else {part: {"enabled": False} for part in ("compaction", "rewriteDeletes")}
        maintainer = Maintainer(settings(**parts), committer, catalog, name, 512 * 1024 * 1024)
        for number in range(1, 41):
            triggers.commit(committer, changes // 40)
            samples = []
            if (upkeep and number % 10 == 0) or number == 40:
                table = catalog.load_table(name)
                copies += 1
                fresh = scan_seconds(copy_of(table, copies))
                samples.append(("after the commit", table, fresh))
            maintainer.after_commit()
            if upkeep and number % 10 == 0:
                samples.append(("after its upkeep", catalog.load_table(name), fresh))
            for moment, table, fresh in samples:
                seconds = scan_seconds(table)
                print(f"\nfigures ({'upkeep on' if upkeep else 'upkeep off'}) trigger {number} {moment}: "
                      f"{shape(table)}, {len(stream.model)} live rows; full scan {seconds * 1000:.0f} ms, fresh copy "
                      f"{fresh * 1000:.0f} ms ({seconds / fresh:.2f}x)")
        assert spark_rows(spark, catalog.load_table(name)) == stream.model
        if upkeep:
            print(f"\nfigures: upkeep of {changes} changes in 40 triggers: {maintainer.totals}")

    # An append sync of the generator's rows, 40 triggers of 2,500 rows, with the default target size.
    from icebergsync.catalog import ensure_table
    from icebergsync.schema import iceberg_schema
    from icebergsync.spec import GENERATOR_COLUMNS
    from spark_app.sources.generator import generate_arrow

    table = ensure_table(catalog, "gen.trips", iceberg_schema(list(GENERATOR_COLUMNS)), [], {})
    committer = SinkCommitter(catalog, "gen.trips", Writer("gen", 1, "attempt1"))
    committer.start([])
    maintainer = Maintainer(settings(), committer, catalog, "gen.trips", 512 * 1024 * 1024)
    for number in range(1, 41):
        table = catalog.load_table("gen.trips")
        rows = generate_arrow((number - 1) * 2_500, number * 2_500)
        output = TriggerOutput(data_files=stage_rows(table, committer.writer, rows.to_pydict()), records=rows.num_rows)
        committer.commit(output, {"next_id": number * 2_500})
        maintainer.after_commit()
        if number % 10 in (4, 5):  # the most small files a partition holds, and right after they were compacted
            table = catalog.load_table("gen.trips")
            frame = spark.read.format("iceberg").load(table.metadata_location)
            copies += 1
            copy = catalog.create_table(f"gen.copy{copies}", table.schema())
            copy.append(frame.toArrow().cast(copy.schema().as_arrow()))
            seconds, fresh = scan_seconds(table, "*"), scan_seconds(catalog.load_table(f"gen.copy{copies}"), "*")
            print(f"\nfigures (append, upkeep on) trigger {number}: {shape(table)}, {number * 2_500} rows; full scan "
                  f"{seconds * 1000:.0f} ms, fresh copy {fresh * 1000:.0f} ms ({seconds / fresh:.2f}x)")
    assert spark_ids(spark, catalog.load_table("gen.trips")) == list(range(100_000))
