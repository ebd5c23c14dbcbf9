"""Position deletes (format 2) and deletion vectors (format 3) committed with data files in ONE snapshot.

Real SQLite catalog, real Parquet and Puffin files; Apache Iceberg's own Spark runtime is the
independent reader (rows and its ``delete_files``/``all_delete_files`` metadata tables), pyiceberg
the second one.
"""

from __future__ import annotations

from datetime import date
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.manifest import DataFile
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table import Table, Transaction
from pyiceberg.transforms import IdentityTransform
from pyiceberg.types import DateType, LongType, NestedField
from pyspark.sql import SparkSession

from spark_app.iceberg import internals
from spark_app.iceberg.position_deletes.deletion_vector import DeletionVector
from spark_app.iceberg.position_deletes.stage import PositionDeleteDelta, stage_position_deletes
from spark_app.staging.writer import PartitionedWriter, TablePlan, conform

SCHEMA = Schema(NestedField(1, "id", LongType(), required=True), NestedField(2, "day", DateType(), required=True))
SPEC = PartitionSpec(PartitionField(2, 1000, IdentityTransform(), "day"))
DAY1, DAY2 = date(2025, 1, 1), date(2025, 1, 2)


def create_table(directory: Path, format_version: int) -> Table:
    catalog = SqlCatalog("test", uri=f"sqlite:///{directory}/catalog.db", warehouse=(directory / "warehouse").as_uri())
    catalog.create_namespace("ns")
    return catalog.create_table("ns.t", SCHEMA, partition_spec=SPEC, properties={"format-version": str(format_version)})


def write_rows(table: Table, ids: range, day: date, name: str) -> DataFile:
    """One data file of ``ids`` (shuffled a little, so positions are not ids) in ``day``'s partition."""
    plan = TablePlan(table.metadata.location, dict(table.properties), table.schema(), table.spec(), dict(table.io.properties))
    writer = PartitionedWriter(plan, f"isync-test-{name}", 1 << 30, 1 << 26)
    ordered = list(ids)[1::2] + list(ids)[::2]
    writer.write(conform(pa.RecordBatch.from_pydict({"id": pa.array(ordered, pa.int64()), "day": [day] * len(ordered)}),
                         plan.arrow_schema()))
    (data_file,) = writer.finish()
    return data_file


NO_DELETES = PositionDeleteDelta()


def commit(table: Table, data_files: list[DataFile], delta: PositionDeleteDelta = NO_DELETES) -> Table:
    transaction = Transaction(table)
    internals.row_delta(transaction, {"test": "1"}, data_files, delta.added, delta.removed)
    internals.commit_transaction(table.catalog, table, transaction)
    return table.catalog.load_table("ns.t")


def positions(data_file: DataFile, ids: set[int]) -> DeletionVector:
    """The row positions of ``ids`` in ``data_file``."""
    column = pq.read_table(data_file.file_path.removeprefix("file://"), columns=["id"]).column("id")
    return DeletionVector(pc.indices_nonzero(pc.is_in(column, pa.array(sorted(ids), pa.int64()))))


def deleting(table: Table, name: str, deletes: dict[DataFile, set[int]]) -> PositionDeleteDelta:
    return stage_position_deletes(table, {f.file_path: positions(f, ids) for f, ids in deletes.items()}, f"isync-test-{name}")


def spark_ids(spark: SparkSession, table: Table) -> list[int]:
    rows = spark.read.format("iceberg").load(table.metadata_location).select("id").collect()
    return sorted(row["id"] for row in rows)


def spark_delete_files(spark: SparkSession, table: Table, metadata_table: str = "delete_files") -> list[tuple[object, ...]]:
    frame = spark.read.format("iceberg").load(f"{table.metadata_location}#{metadata_table}")
    rows = frame.select("content", "file_format", "file_path", "referenced_data_file", "content_offset",
                        "content_size_in_bytes", "record_count").collect()
    return sorted(tuple(row) for row in rows)


def pyiceberg_ids(table: Table) -> list[int]:
    return sorted(table.scan().to_arrow().column("id").to_pylist())


def test_v2_position_delete_files_land_with_data_files_in_one_snapshot(tmp_path: Path, spark: SparkSession) -> None:
    table = create_table(tmp_path, 2)
    a, b = write_rows(table, range(0, 100), DAY1, "a"), write_rows(table, range(100, 200), DAY2, "b")
    table = commit(table, [a, b])
    c = write_rows(table, range(200, 250), DAY1, "c")
    delta = deleting(table, "d1", {a: {3, 50, 99}, b: {100, 101}})
    assert len(delta.added) == 2 and delta.removed == []  # one file per partition
    table = commit(table, [c], delta)
    expected = sorted(set(range(250)) - {3, 50, 99, 100, 101})
    assert spark_ids(spark, table) == expected
    snapshot = table.current_snapshot()
    assert snapshot is not None and snapshot.summary is not None
    assert (snapshot.summary.operation.value, snapshot.summary["added-data-files"],
            snapshot.summary["added-position-delete-files"], snapshot.summary["added-position-deletes"]) == (
        "overwrite", "1", "2", "5")
    assert sorted((row[0], row[1], row[3], row[6]) for row in spark_delete_files(spark, table)) == sorted([
        (1, "PARQUET", a.file_path, 3), (1, "PARQUET", b.file_path, 2)])
    # More deletes of a: another position delete file; both apply (format 2 has no one-per-file rule).
    second = deleting(table, "d2", {a: {0, 1}, c: {249}})
    assert len(second.added) == 1  # a and c share a partition
    table = commit(table, [], second)
    expected = sorted(set(expected) - {0, 1, 249})
    assert spark_ids(spark, table) == expected
    assert len(spark_delete_files(spark, table)) == 3
    # pyiceberg reads position delete files: the same rows.
    assert pyiceberg_ids(table) == expected


def test_v3_deletion_vectors_replace_the_earlier_vector_of_a_data_file(tmp_path: Path, spark: SparkSession) -> None:
    table = create_table(tmp_path, 3)
    a, b = write_rows(table, range(0, 100), DAY1, "a"), write_rows(table, range(100, 200), DAY2, "b")
    table = commit(table, [a, b])
    c = write_rows(table, range(200, 250), DAY1, "c")
    first = deleting(table, "d1", {a: {3, 50, 99}, b: {100, 101}})
    assert len(first.added) == 2 and first.removed == [] and len({dv.file_path for dv in first.added}) == 1
    table = commit(table, [c], first)
    expected = sorted(set(range(250)) - {3, 50, 99, 100, 101})
    assert spark_ids(spark, table) == expected
    live = spark_delete_files(spark, table)
    assert live == sorted((1, "PUFFIN", dv.file_path, internals.referenced_data_file(dv),
                           internals.content_offset(dv), internals.content_size_in_bytes(dv),
                           dv.record_count) for dv in first.added)
    assert [(row[3], row[6]) for row in live] == sorted([(a.file_path, 3), (b.file_path, 2)])

    # More deletes of a: its new DV holds the union and replaces the old one in the same snapshot.
    d = write_rows(table, range(250, 260), DAY2, "d")
    second = deleting(table, "d2", {a: {4, 5}})
    assert [internals.referenced_data_file(f) for f in second.removed] == [a.file_path]
    assert [f.record_count for f in second.added] == [5]
    table = commit(table, [d], second)
    expected = sorted(set(range(260)) - {3, 4, 5, 50, 99, 100, 101})
    assert spark_ids(spark, table) == expected
    live = spark_delete_files(spark, table)
    assert sorted((row[3], row[6]) for row in live) == sorted([(a.file_path, 5), (b.file_path, 2)])
    assert len({row[3] for row in live}) == len(live)  # one live DV per data file
    assert (second.added[0].file_path, internals.content_offset(second.added[0])) in {(r[2], r[4]) for r in live}
    every = spark_delete_files(spark, table, "all_delete_files")
    assert sorted((row[3], row[6]) for row in set(every)) == sorted([(a.file_path, 3), (a.file_path, 5), (b.file_path, 2)])
    snapshot = table.current_snapshot()
    assert snapshot is not None and snapshot.summary is not None
    assert (snapshot.summary.operation.value, snapshot.summary["added-dvs"], snapshot.summary["removed-dvs"]) == (
        "overwrite", "1", "1")
    # Row lineage: Spark reads the row ids the snapshots assigned (first-row-id + position).
    assert (snapshot.first_row_id, snapshot.added_rows, internals.next_row_id(table.metadata)) == (250, 10, 260)
    row_ids = {row["_row_id"] for row in
               spark.read.format("iceberg").load(table.metadata_location).selectExpr("_row_id").collect()}
    assert len(row_ids) == len(expected) and min(row_ids) >= 0 and max(row_ids) < 260
    # pyiceberg 0.12 reads a v3 table's deletion vectors too: the same rows.
    assert pyiceberg_ids(table) == expected


def test_staging_refuses_files_that_are_not_live_data_files(tmp_path: Path) -> None:
    table = create_table(tmp_path, 3)
    a = write_rows(table, range(10), DAY1, "a")
    with pytest.raises(ValueError, match="not live data files"):
        stage_position_deletes(table, {a.file_path: DeletionVector([1])}, "isync-test")
    table = commit(table, [a])
    assert stage_position_deletes(table, {a.file_path: DeletionVector()}, "isync-test") == NO_DELETES
