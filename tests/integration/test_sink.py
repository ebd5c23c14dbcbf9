"""The job end to end on real Spark and a real catalog: exactly-once output, files, partitions,
idle behaviour, dead letters, transforms and schema evolution."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from pyiceberg.expressions import EqualTo
from pyspark.sql import SparkSession

from icebergsync import protocol
from icebergsync.errors import IncompatibleSchemaError
from icebergsync.sink_state import read_sink_state
from spark_app.commit.committer import SinkCommitter
from spark_app.job.loop import SyncJob
from spark_app.sources.generator import generate
from spark_app.staging import packing
from tests.integration.sync_support import (
    BackgroundJob,
    catalog_of,
    data_file_rows,
    make_sync,
    sink_commits,
    table_ids,
    unreferenced_sink_files,
)

FAST = {"rowsPerSecond": 1_000_000}


def test_generator_rows_land_exactly_once_with_protocol_properties(tmp_path: Path, spark: SparkSession) -> None:
    sync = make_sync(tmp_path, {"generator": {**FAST, "totalRows": 30_000, "maxRowsPerTrigger": 12_000}},
                     eventTimeColumn="ts")
    summary = SyncJob(sync, 1, spark).run()
    assert summary.records == 30_000 and summary.commits == 3
    table = catalog_of(sync).load_table("sales.orders")
    assert table_ids(table) == list(range(30_000))
    commits = sink_commits(table, "test/orders")
    assert [c.kind for c in commits] == ["fence", "data", "data", "data"]
    assert [c.frontier for c in commits[1:]] == [{"next_id": 12_000}, {"next_id": 24_000}, {"next_id": 30_000}]
    assert commits[-1].max_event_time == "2025-01-01T00:04:59.990000+00:00"  # id 29999 is 10 ms apart per id
    status = read_sink_state(catalog_of(sync), "sales.orders", "test/orders")
    assert status.frontier == {"next_id": 30_000} and status.total_records == 30_000 and status.sink_version == 1
    # A rerun of a finished bounded sync fences, finds nothing to do and writes no data.
    again = SyncJob(sync, 2, spark).run()
    assert again.records == 0 and again.commits == 0
    assert table_ids(catalog_of(sync).load_table("sales.orders")) == list(range(30_000))


def test_a_backlog_commits_each_capped_trigger_at_once_and_stages_the_next_during_the_commit(
        tmp_path: Path, spark: SparkSession, monkeypatch: pytest.MonkeyPatch) -> None:
    """With a backlog, waiting cannot make a capped trigger bigger: it commits without waiting for
    ``commit.interval`` (1 h here), and the next one is read and written while it commits."""
    events: list[tuple[str, object]] = []
    stage, commit = SyncJob._stage, SinkCommitter.commit

    def recording_stage(job: SyncJob, source: object, frontier: dict[str, object], *rest: object) -> object:
        events.append(("stage", (frontier["next_id"], threading.current_thread().name)))
        return stage(job, source, frontier, *rest)  # type: ignore[arg-type]

    def recording_commit(committer: SinkCommitter, output: object, end: dict[str, object]) -> object:
        events.append(("commit-begins", end["next_id"]))
        return commit(committer, output, end)  # type: ignore[arg-type]

    monkeypatch.setattr(SyncJob, "_stage", recording_stage)
    monkeypatch.setattr(SinkCommitter, "commit", recording_commit)
    sync = make_sync(tmp_path, {"generator": {**FAST, "totalRows": 40_000, "maxRowsPerTrigger": 10_000}},
                     commit={"interval": "1h"})
    job = SyncJob(sync, 1, spark)
    with BackgroundJob(job) as background:
        background.wait_until(lambda: background.summary is not None, "the bounded sync to finish", timeout=120)
    assert background.summary.commits == 4 and background.summary.records == 40_000
    table = catalog_of(sync).load_table("sales.orders")
    assert table_ids(table) == list(range(40_000))
    data = [c for c in sink_commits(table, "test/orders") if c.kind == "data"]
    assert [c.frontier for c in data] == [{"next_id": n} for n in (10_000, 20_000, 30_000, 40_000)]
    # Triggers 2..4 were staged ahead: on the stager thread, started just before the commit of the
    # trigger before them (the job submits the next trigger, then commits).
    stages = [value for kind, value in events if kind == "stage"]
    assert [(start, thread.startswith("isync-stage")) for start, thread in stages] == [
        (0, False), (10_000, True), (20_000, True), (30_000, True)]
    assert [value for kind, value in events if kind == "commit-begins"] == [10_000, 20_000, 30_000, 40_000]


def test_files_at_the_cap_are_staged_ahead_and_a_smaller_trigger_waits_only_for_the_interval(
        tmp_path: Path, spark: SparkSession, monkeypatch: pytest.MonkeyPatch) -> None:
    """Five files, two per trigger: the second trigger takes two at the cap, so it cannot grow and is
    staged during the first commit; the third (one file) is due once ``commit.interval`` (1 ms) is up
    after the second commit, not at the next poll (``pollInterval`` is an hour here)."""
    stages: list[tuple[str, bool]] = []
    stage = SyncJob._stage

    def recording_stage(job: SyncJob, source: object, frontier: dict[str, object], *rest: object) -> object:
        stages.append((str(frontier["after"]), threading.current_thread().name.startswith("isync-stage")))
        return stage(job, source, frontier, *rest)  # type: ignore[arg-type]

    monkeypatch.setattr(SyncJob, "_stage", recording_stage)
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    for number in range(5):
        (inbox / f"{number}.json").write_text(f'{{"id": {number}}}\n')
    sync = make_sync(tmp_path, {"files": {"path": str(inbox), "format": "json", "maxFilesPerTrigger": 2}},
                     schema=[{"name": "id", "type": "long"}], commit={"interval": "1ms", "pollInterval": "1h"})
    catalog = catalog_of(sync)
    with BackgroundJob(SyncJob(sync, 1, spark)) as running:
        running.wait_until(lambda: table_ids(catalog.load_table("sales.orders")) == [0, 1, 2, 3, 4],
                           "every file committed", timeout=60)
    data = [c for c in sink_commits(catalog.load_table("sales.orders"), "test/orders") if c.kind == "data"]
    assert [c.frontier for c in data] == [{"after": "1.json"}, {"after": "3.json"}, {"after": "4.json"}]
    assert stages == [("", False), ("1.json", True), ("3.json", False)]


@pytest.mark.parametrize("merged_by", ["copying row groups", "writing rows again"])
def test_spark_iceberg_runtime_reads_exactly_the_source_rows(tmp_path: Path, spark: SparkSession,
                                                              monkeypatch: pytest.MonkeyPatch, merged_by: str) -> None:
    """An independent reader (Spark's own Iceberg runtime) sees exactly the generator's rows, in files
    as the tasks wrote them and in files merged both ways (spark_app/staging/packing.py)."""
    monkeypatch.setattr(packing, "MIN_COPIED_ROW_GROUP_BYTES", 0 if merged_by == "copying row groups" else 1 << 40)
    sync = make_sync(tmp_path, {"generator": {**FAST, "totalRows": 50_000, "maxRowsPerTrigger": 20_000}},
                     table={"partitionBy": ["day(ts)", "bucket(8, vendor)"]},
                     commit={"targetFileSize": "256Ki"})  # two tasks a trigger, so partitions to merge
    SyncJob(sync, 1, spark).run()
    table = catalog_of(sync).load_table("sales.orders")
    row_groups = {f.file_path: len(f.split_offsets or ()) for f, _ in data_file_rows(table)}
    merged = [groups for path, groups in row_groups.items() if "-mdriver-" in path.rsplit("/", 1)[-1]]
    assert merged and len(merged) < len(row_groups)  # merged in the driver (small), and unmerged files too
    assert max(merged) > 1 if merged_by == "copying row groups" else set(merged) == {1}
    read_back = spark.read.format("iceberg").load(table.metadata_location)
    expected = generate(spark.range(0, 50_000))
    assert read_back.columns == expected.columns
    assert read_back.count() == 50_000
    assert read_back.select("id").distinct().count() == 50_000
    assert read_back.exceptAll(expected).count() == 0
    assert expected.exceptAll(read_back).count() == 0


def test_files_close_at_the_target_size(tmp_path: Path, spark: SparkSession) -> None:
    sync = make_sync(tmp_path, {"generator": {**FAST, "totalRows": 600_000}},
                     table={"partitionBy": ["bucket(2, id)"]},
                     commit={"targetFileSize": "1Mi", "maxStagedSize": "1Gi"})
    SyncJob(sync, 1, spark).run()
    table = catalog_of(sync).load_table("sales.orders")
    target = 1024 * 1024
    # File names: <sink prefix>-v<version>-<attempt>-<task>-<task attempt>-<sequence>-<uuid>.parquet
    rolls: dict[tuple[object, ...], list[tuple[int, int]]] = {}
    for data_file, _ in data_file_rows(table):
        parts = data_file.file_path.rsplit("/", 1)[-1].split("-")
        key = (tuple(data_file.partition), parts[4])
        rolls.setdefault(key, []).append((int(parts[6]), data_file.file_size_in_bytes))
    assert {key[0] for key in rolls} == {(0,), (1,)}
    full = [size for files in rolls.values() for _, size in sorted(files)[:-1]]  # all but each roll's last file
    assert len(full) >= 6
    outside = [size for size in full if abs(size - target) > 0.1 * target]
    assert outside == [], f"files outside ±10% of {target}: {outside}"
    assert table_ids(table) == list(range(600_000))


def test_each_trigger_writes_one_file_per_partition_when_every_task_saw_every_partition(
        tmp_path: Path, spark: SparkSession) -> None:
    """Both tasks of a trigger read ids of all 4 buckets (8 small files staged): the small files of
    a partition are merged before the commit, so each commit adds one file per bucket, holds every
    row once, and the merged-away originals are gone from storage."""
    sync = make_sync(tmp_path, {"generator": {**FAST, "totalRows": 40_000, "maxRowsPerTrigger": 20_000}},
                     table={"partitionBy": ["bucket(4, id)"]}, commit={"targetFileSize": "256Ki"})  # 2 tasks
    summary = SyncJob(sync, 1, spark).run()
    assert summary.records == 40_000 and summary.commits == 2
    table = catalog_of(sync).load_table("sales.orders")
    data_ids = {c.snapshot_id for c in sink_commits(table, "test/orders") if c.kind == "data"}
    data = [s for s in table.snapshots() if s.snapshot_id in data_ids]
    assert [s.summary["added-data-files"] for s in data] == ["4", "4"]
    assert [s.summary["added-records"] for s in data] == ["20000", "20000"]
    assert sorted(tuple(f.partition) for f, _ in data_file_rows(table)) == sorted([(b,) for b in range(4)] * 2)
    assert all("-mdriver-" in f.file_path.rsplit("/", 1)[-1] for f, _ in data_file_rows(table))  # all merged
    assert table_ids(table) == list(range(40_000))
    assert unreferenced_sink_files(table, "test/orders") == []


def test_partition_fan_out_never_mixes_partitions(tmp_path: Path, spark: SparkSession) -> None:
    partition_by = ["day(ts)", "bucket(4, vendor)", "truncate(2, payment_type)", "store_and_forward"]
    sync = make_sync(tmp_path, {"generator": {**FAST, "totalRows": 20_000_000 // 1000 * 10}},
                     table={"partitionBy": partition_by})
    SyncJob(sync, 1, spark).run()
    table = catalog_of(sync).load_table("sales.orders")
    spec, schema = table.spec(), table.schema()
    partitions = set()
    for data_file, rows in data_file_rows(table):
        for field, value in zip(spec.fields, data_file.partition, strict=True):
            source = schema.find_field(field.source_id)
            transformed = field.transform.pyarrow_transform(source.field_type)(rows.column(source.name))
            assert pc.all(pc.equal(transformed, pa.scalar(value, transformed.type))).as_py(), (
                f"{data_file.file_path} holds rows outside partition {field.name}={value}"
            )
        partitions.add(tuple(data_file.partition))
    assert len(partitions) > 8
    assert table_ids(table) == list(range(200_000))


def test_idle_source_writes_no_snapshots_and_restart_resumes(tmp_path: Path, spark: SparkSession) -> None:
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    source = {"files": {"path": str(inbox), "format": "json"}}
    schema = [{"name": "id", "type": "long", "required": True}, {"name": "item", "type": "string"}]
    sync = make_sync(tmp_path, source, schema=schema)

    def orders_commits() -> list[protocol.SinkCommit]:
        return sink_commits(catalog_of(sync).load_table("sales.orders"), "test/orders")

    with BackgroundJob(SyncJob(sync, 1, spark)) as running:
        running.wait_until(lambda: len(orders_commits()) == 1, "the fence")
        time.sleep(5)  # five commit intervals with nothing arriving
        assert [c.kind for c in orders_commits()] == ["fence"]
        (inbox / "0001.json").write_text("\n".join(json.dumps({"id": i, "item": f"i{i}"}) for i in range(5)))
        running.wait_until(lambda: len(orders_commits()) == 2, "the new file's commit")
        time.sleep(3)  # idle again: still exactly one data commit
    assert [c.kind for c in orders_commits()] == ["fence", "data"]
    assert orders_commits()[-1].frontier == {"after": "0001.json"}
    (inbox / "0002.json").write_text(json.dumps({"id": 5, "item": "i5"}))
    (inbox / "_0003.json.inprogress").write_text("{ half a record")
    with BackgroundJob(SyncJob(sync, 2, spark)) as running:
        running.wait_until(lambda: len(orders_commits()) == 4, "the restart's commit of the second file")
    assert table_ids(catalog_of(sync).load_table("sales.orders")) == list(range(6))
    assert orders_commits()[-1].frontier == {"after": "0002.json"}


def test_bad_records_go_to_the_dead_letter_table(tmp_path: Path, spark: SparkSession) -> None:
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    lines = [
        '{"id": 1, "amount": "12.50", "at": "2025-03-01T10:00:00Z"}',
        "this is not json",
        '{"id": "two", "amount": 3}',
        '{"amount": 4}',
        '{"id": 5, "amount": 5, "at": "2025-03-01T11:00:00Z"}',
        "",
    ]
    (inbox / "batch-1.json").write_text("\n".join(lines))
    schema = [{"name": "id", "type": "long", "required": True}, {"name": "amount", "type": "decimal(10,2)"},
              {"name": "at", "type": "timestamptz"}]
    sync = make_sync(tmp_path, {"files": {"path": str(inbox)}}, schema=schema, deadLetter={"table": "sales.orders_dlq"})
    catalog = catalog_of(sync)
    with BackgroundJob(SyncJob(sync, 1, spark)) as running:
        running.wait_until(lambda: len(sink_commits(catalog.load_table("sales.orders"), "test/orders")) == 2,
                           "the commit of batch-1.json")
    assert table_ids(catalog.load_table("sales.orders")) == [1, 5]
    dead = catalog.load_table("sales.orders_dlq").scan().to_arrow().sort_by("payload").to_pylist()
    reasons = {row["payload"]: row["reason"] for row in dead}
    assert reasons == {
        "this is not json": "malformed JSON",
        '{"id": "two", "amount": 3}': 'field id: value two is not a long',
        '{"amount": 4}': "required field id is missing or null",
    }
    for row in dead:
        assert json.loads(row["position"])["file"].endswith("batch-1.json")
        assert row["sink_id"] == "test/orders" and row["sink_version"] == 1 and row["failed_at"] is not None
    main_commit = sink_commits(catalog.load_table("sales.orders"), "test/orders")[-1]
    assert main_commit.dead_letters == 3 and main_commit.records == 2
    dead_commit = sink_commits(catalog.load_table("sales.orders_dlq"), "test/orders")[-1]
    assert dead_commit.frontier == main_commit.frontier


def test_transform_runs_on_good_rows_and_its_violations_are_dead_letters(tmp_path: Path, spark: SparkSession) -> None:
    sync = make_sync(
        tmp_path, {"generator": {**FAST, "totalRows": 2_000}},
        schema=[{"name": "id", "type": "long", "required": True}, {"name": "ts", "type": "timestamptz"},
                {"name": "vendor", "type": "string", "required": True}],
        transform="SELECT id, ts, CASE WHEN id % 100 = 7 THEN NULL ELSE lower(vendor) END AS vendor "
                  "FROM source WHERE id % 2 = 1",
        deadLetter={"table": "sales.orders_dlq"},
    )
    summary = SyncJob(sync, 1, spark).run()
    catalog = catalog_of(sync)
    rows = catalog.load_table("sales.orders").scan().to_arrow()
    expected = [i for i in range(2_000) if i % 2 == 1 and i % 100 != 7]
    assert sorted(rows.column("id").to_pylist()) == expected
    assert all(v == v.lower() for v in rows.column("vendor").to_pylist())
    dead = catalog.load_table("sales.orders_dlq").scan().to_arrow()
    assert dead.num_rows == 20 == summary.dead_letters
    assert set(dead.column("reason").to_pylist()) == {"required field vendor is missing or null"}
    assert sorted(json.loads(p)["id"] for p in dead.column("payload").to_pylist()) == [i for i in range(2000) if i % 100 == 7]


def test_schema_evolves_before_the_first_commit_of_the_new_version(tmp_path: Path, spark: SparkSession) -> None:
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    (inbox / "a.json").write_text('{"id": 1, "qty": 2, "price": 1.5}')
    v1 = [{"name": "id", "type": "long", "required": True}, {"name": "qty", "type": "int"},
          {"name": "price", "type": "float"}]
    source = {"files": {"path": str(inbox)}}

    def run_until_ids(version: int, schema: list[dict[str, object]], ids: list[int]) -> None:
        sync = make_sync(tmp_path, source, schema=schema)
        with BackgroundJob(SyncJob(sync, version, spark)) as running:
            running.wait_until(lambda: table_ids(catalog_of(sync).load_table("sales.orders")) == ids, f"ids {ids}")

    run_until_ids(1, v1, [1])
    (inbox / "b.json").write_text('{"id": 2, "qty": 3000000000, "price": 2.25, "note": "new"}')
    v2 = [{"name": "id", "type": "long", "required": True}, {"name": "qty", "type": "long"},
          {"name": "price", "type": "double"}, {"name": "note", "type": "string"}]
    run_until_ids(2, v2, [1, 2])
    table = catalog_of(make_sync(tmp_path, source, schema=v2)).load_table("sales.orders")
    assert [(f.name, str(f.field_type)) for f in table.schema().fields] == [
        ("id", "long"), ("qty", "long"), ("price", "double"), ("note", "string")]
    rows = table.scan().to_arrow().sort_by("id").to_pylist()
    assert rows == [{"id": 1, "qty": 2, "price": 1.5, "note": None},
                    {"id": 2, "qty": 3_000_000_000, "price": 2.25, "note": "new"}]
    fence = next(c for c in sink_commits(table, "test/orders") if c.writer.version == 2)
    assert fence.kind == "fence"
    snapshots_before = len(table.metadata.snapshots)
    narrowed = [{"name": "id", "type": "long", "required": True}, {"name": "qty", "type": "int"}]
    with pytest.raises(IncompatibleSchemaError, match="'qty': long cannot change to int"):
        SyncJob(make_sync(tmp_path, source, schema=narrowed), 3, spark).run()
    assert len(catalog_of(make_sync(tmp_path, source, schema=v2)).load_table("sales.orders").metadata.snapshots) == snapshots_before
    assert protocol.parse_checkpoint(table.metadata, "test/orders") is not None


def test_csv_and_parquet_files_decode_against_the_schema(tmp_path: Path, spark: SparkSession) -> None:
    import pyarrow.parquet as pq

    schema = [{"name": "id", "type": "long", "required": True}, {"name": "price", "type": "double"},
              {"name": "day", "type": "date"}]
    csv_inbox, parquet_inbox = tmp_path / "csv", tmp_path / "parquet"
    csv_inbox.mkdir()
    parquet_inbox.mkdir()
    (csv_inbox / "a.csv").write_text("id,price,day\n1,2.5,2025-01-02\nseven,1.0,2025-01-03\n3,4.25,2025-01-04\n")
    pq.write_table(pa.table({"id": pa.array([10, 11], pa.int64()), "price": ["1.5", "not a number"],
                             "day": pa.array([None, None], pa.date32())}), parquet_inbox / "a.parquet")
    for name, inbox, fmt, expected_ids, expected_reason in [
        ("csv", csv_inbox, "csv", [1, 3], "CSV row does not match the schema: field id: value seven is not a long"),
        ("parquet", parquet_inbox, "parquet", [10], "field price: value not a number is not a double"),
    ]:
        sync = make_sync(tmp_path / f"{name}-sync", {"files": {"path": str(inbox), "format": fmt}}, schema=schema,
                         deadLetter={"table": "sales.orders_dlq"})
        catalog = catalog_of(sync)
        with BackgroundJob(SyncJob(sync, 1, spark)) as running:
            running.wait_until(lambda c=catalog: len(sink_commits(c.load_table("sales.orders"), "test/orders")) == 2,
                               f"the {fmt} commit")
        assert table_ids(catalog.load_table("sales.orders")) == expected_ids
        dead = catalog.load_table("sales.orders_dlq").scan().to_arrow().to_pylist()
        assert [row["reason"] for row in dead] == [expected_reason]
        assert json.loads(dead[0]["position"])["file"].endswith(f"a.{fmt}")
    csv_rows = catalog_of(make_sync(tmp_path / "csv-sync", {"files": {"path": str(csv_inbox), "format": "csv"}},
                                    schema=schema)).load_table("sales.orders").scan().to_arrow().sort_by("id")
    assert csv_rows.column("price").to_pylist() == [2.5, 4.25]
    assert [str(d) for d in csv_rows.column("day").to_pylist()] == ["2025-01-02", "2025-01-04"]


def test_a_changed_partition_spec_evolves_the_table_and_upkeep_moves_the_older_files(tmp_path: Path,
                                                                                     spark: SparkSession) -> None:
    """A changed partitionBy is Iceberg partition-spec evolution in the new version's fence, its data laid
    out by the new spec; upkeep then writes the files of the old spec again in the new layout (their rows under
    the right partition values, so a scan pruned by the new spec finds each), and Iceberg's own Spark reader reads
    every row once."""
    SyncJob(make_sync(tmp_path, {"generator": {**FAST, "totalRows": 100}}, table={"partitionBy": ["day(ts)"]}),
            1, spark).run()
    evolved = make_sync(tmp_path, {"generator": {**FAST, "totalRows": 200}}, table={"partitionBy": ["bucket(4, id)"]})
    SyncJob(evolved, 2, spark).run()
    table = catalog_of(evolved).load_table("sales.orders")
    assert [(str(f.transform), f.name) for f in table.spec().fields] == [("bucket[4]", "id_bucket_4")]
    kinds = [c.kind for c in sink_commits(table, "test/orders") if c.writer.version == 2]
    assert kinds[0] == "fence" and "maintenance" in kinds
    assert {task.file.spec_id for task in table.scan().plan_files()} == {table.spec().spec_id}
    assert table_ids(table) == list(range(200))
    for key in (0, 7, 99, 100, 199):  # pruned by the files' partition values
        assert table.scan(row_filter=EqualTo("id", key)).to_arrow().column("id").to_pylist() == [key]
    read = spark.read.format("iceberg").load(table.metadata_location)
    assert sorted(row.id for row in read.select("id").collect()) == list(range(200))




def zip_cache_check(_: object) -> str:
    """What a Python worker's zip importers run when PySpark invalidates import caches before a task."""
    import zipimport

    return zipimport.zipimporter.invalidate_caches.__qualname__


def test_python_workers_fork_from_the_daemon_with_its_zip_importer_check_in_place(spark: SparkSession) -> None:
    """The worker daemon (spark_app/worker_daemon.py) installs the check at its start-up; the workers inherit it."""
    assert spark.sparkContext.parallelize([0, 1], 2).map(zip_cache_check).collect() == ["invalidate_when_changed"] * 2
