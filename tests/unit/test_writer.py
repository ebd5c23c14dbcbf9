"""The executor writer without Spark: dead-letter split, fan-out, rolling and the memory budget."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.transforms import BucketTransform, IdentityTransform
from pyiceberg.types import LongType, NestedField, StringType

from spark_app.decoding.deadletter import ERROR_COLUMN, split_dead_letters
from spark_app.staging.writer import (
    MAX_SLICED_RUNS,
    PartitionedWriter,
    TablePlan,
    compression_options,
    conform,
    dictionary_columns,
    partition_groups,
)

SCHEMA = Schema(NestedField(1, "id", LongType(), required=True), NestedField(2, "kind", StringType()),
                NestedField(3, "text", StringType()))


def plan(tmp_path: Path, spec: PartitionSpec | None = None) -> TablePlan:
    return TablePlan(location=tmp_path.as_uri(), properties={}, schema=SCHEMA, spec=spec or PartitionSpec(),
                     io_properties={})


def rows(start: int, count: int, kinds: int = 3) -> pa.RecordBatch:
    ids = list(range(start, start + count))
    return pa.RecordBatch.from_pydict({
        "id": pa.array(ids, pa.int64()),
        "kind": [f"k{i % kinds}" for i in ids],
        "text": [f"row {i} " + "x" * (i % 37) + str(i * 7919 % 104729) for i in ids],
    })


def test_split_dead_letters_names_the_reason() -> None:
    batch = pa.RecordBatch.from_pydict({
        "id": pa.array([1, None, 3], pa.int64()),
        ERROR_COLUMN: pa.array([None, None, "malformed JSON"], pa.string()),
    })
    good, bad, reasons = split_dead_letters(batch, ("id",))
    assert good.column("id").to_pylist() == [1]
    assert bad.to_pylist() == [False, True, True]
    assert reasons.to_pylist() == [None, "required field id is missing or null", "malformed JSON"]


def test_fan_out_writes_one_partition_per_file(tmp_path: Path) -> None:
    spec = PartitionSpec(PartitionField(2, 1000, IdentityTransform(), "kind"),
                         PartitionField(1, 1001, BucketTransform(4), "id_bucket"))
    table_plan = plan(tmp_path, spec)
    writer = PartitionedWriter(table_plan, "isync-test", 1 << 30, 1 << 26)
    for start in range(0, 30_000, 5_000):
        writer.write(conform(rows(start, 5_000), table_plan.arrow_schema()))
    files = writer.finish()
    assert len(files) == 12  # 3 kinds x 4 buckets
    assert sum(f.record_count for f in files) == 30_000
    for data_file in files:
        content = pq.read_table(data_file.file_path.removeprefix("file://"))
        kind, bucket = data_file.partition
        assert set(content.column("kind").to_pylist()) == {kind}
        assert set(BucketTransform(4).pyarrow_transform(LongType())(content.column("id")).to_pylist()) == {bucket}
        field_ids = [f.metadata[b"PARQUET:field_id"] for f in pq.read_schema(data_file.file_path.removeprefix("file://"))]
        assert field_ids == [b"1", b"2", b"3"]


def test_rows_ordered_by_partition_are_sliced_per_run_and_interleaved_rows_grouped(tmp_path: Path) -> None:
    table_plan = plan(tmp_path, PartitionSpec(PartitionField(2, 1000, IdentityTransform(), "kind")))
    kinds = ["a", "a", "a", None, None, "b", "b", "a"]  # four runs, one of them null
    ordered = conform(pa.RecordBatch.from_pydict({"id": pa.array(range(8), pa.int64()), "kind": kinds}),
                      table_plan.arrow_schema())
    groups = list(partition_groups(table_plan, ordered))
    assert [(key, rows.column("id").to_pylist()) for key, rows in groups] == [
        (("a",), [0, 1, 2]), ((None,), [3, 4]), (("b",), [5, 6]), (("a",), [7])]
    source_ids = ordered.column("id").chunk(0).buffers()[1].address
    assert all(rows.column("id").chunk(0).buffers()[1].address == source_ids for _, rows in groups)  # no copy

    count = 2 * MAX_SLICED_RUNS
    interleaved = conform(pa.RecordBatch.from_pydict({"id": pa.array(range(count), pa.int64()),
                                                      "kind": ["a", "b"] * MAX_SLICED_RUNS}), table_plan.arrow_schema())
    grouped = {key: rows.column("id").to_pylist() for key, rows in partition_groups(table_plan, interleaved)}
    assert grouped == {("a",): list(range(0, count, 2)), ("b",): list(range(1, count, 2))}


def test_rolling_files_land_near_the_target(tmp_path: Path) -> None:
    table_plan = plan(tmp_path)
    target = 256 * 1024
    writer = PartitionedWriter(table_plan, "isync-test", target, 1 << 26)
    for start in range(0, 400_000, 20_000):
        writer.write(conform(rows(start, 20_000), table_plan.arrow_schema()))
    files = writer.finish()
    sizes = [f.file_size_in_bytes for f in files]
    assert len(files) >= 5
    assert all(abs(size - target) <= 0.1 * target for size in sizes[:-1]), sizes
    assert sizes[-1] <= 1.1 * target
    assert sum(f.record_count for f in files) == 400_000
    assert all(Path(f.file_path.removeprefix("file://")).stat().st_size == f.file_size_in_bytes for f in files)


def test_buffers_stay_within_the_memory_budget(tmp_path: Path) -> None:
    spec = PartitionSpec(PartitionField(1, 1000, BucketTransform(16), "id_bucket"))
    table_plan = plan(tmp_path, spec)
    budget = 2 * 1024 * 1024
    writer = PartitionedWriter(table_plan, "isync-test", 64 * 1024 * 1024, budget)
    peak = 0
    for start in range(0, 300_000, 10_000):
        writer.write(conform(rows(start, 10_000), table_plan.arrow_schema()))
        peak = max(peak, sum(w.buffered_bytes for w in writer._writers.values()))
    assert peak <= budget
    assert sum(f.record_count for f in writer.finish()) == 300_000


def test_a_clean_batch_passes_through_without_a_copy() -> None:
    batch = pa.RecordBatch.from_pydict({"id": pa.array([1, 2], pa.int64()), ERROR_COLUMN: pa.nulls(2, pa.string())})
    good, bad, _ = split_dead_letters(batch, ("id",))
    assert good is batch
    assert bad.to_pylist() == [False, False]


def test_abort_deletes_every_file_written_open_or_closed(tmp_path: Path) -> None:
    table_plan = plan(tmp_path)
    writer = PartitionedWriter(table_plan, "isync-test", 64 * 1024, 1 << 26)
    for start in range(0, 200_000, 20_000):
        writer.write(conform(rows(start, 20_000), table_plan.arrow_schema()))
    assert len(list(tmp_path.rglob("*.parquet"))) >= 2  # rolled files, and one still open
    writer.abort()
    assert list(tmp_path.rglob("*.parquet")) == []


def test_dictionary_encoding_only_where_it_makes_files_smaller() -> None:
    rows = 50_000
    table = pa.table({
        "id": pa.array(range(rows), pa.int64()),  # unique: a dictionary only adds bytes
        "vendor": pa.array(["CMT", "VTS", "DDS"] * (rows // 3) + ["CMT"] * (rows % 3)),
        "nothing": pa.nulls(rows, pa.string()),
        "flag": pa.array([True, False] * (rows // 2)),
        # unique strings, a quarter null: the dictionary would hold every value (the estimate once
        # spread the dictionary over the null slots too and chose it)
        "note": pa.array([None if i % 4 == 0 else f"trip {i} via bridge" for i in range(rows)]),
        # few distinct values, but a dictionary page (1 MiB) could not hold them: Parquet's Java writer writes plain
        "blob": pa.array([f"{i % 500:04d}" + "x" * 4000 for i in range(rows)]),
    })
    assert dictionary_columns(table) == ["vendor"]


def test_zstd_is_written_at_the_level_icebergs_java_writer_uses_unless_the_table_sets_one() -> None:
    assert compression_options({"write.parquet.compression-codec": "zstd"}) == {"compression": "zstd", "compression_level": 3}
    assert compression_options({"write.parquet.compression-codec": "zstd", "write.parquet.compression-level": "9"}) == {
        "compression": "zstd", "compression_level": 9}
    assert compression_options({"write.parquet.compression-codec": "snappy"}) == {"compression": "snappy"}


def test_nested_columns_partitioned_by_a_struct_field_keep_their_values_and_struct_fields_get_bounds(
        tmp_path: Path) -> None:
    """``day(event.ts)`` partitions by a struct's field (null where the struct is null); a struct's field has bounds
    (as Iceberg's Java writer gives them), an array's elements and a map's entries their counts only."""
    import datetime

    from pyiceberg.schema import assign_fresh_schema_ids

    from icebergsync.catalog import partition_spec
    from icebergsync.schema import iceberg_schema
    from icebergsync.spec import Column

    schema = assign_fresh_schema_ids(iceberg_schema([
        Column(name="id", type="long", required=True),
        Column.model_construct(name="event", required=False,
                               type="struct<ts: timestamp, tags: array<string>, attrs: map<string, long>>")]))
    spec = partition_spec(schema, ["day(event.ts)"])
    assert [field.name for field in spec.fields] == ["event.ts_day"]
    table_plan = TablePlan(location=tmp_path.as_uri(), properties={}, schema=schema, spec=spec, io_properties={})
    day = datetime.datetime(2024, 3, 1, 10)
    rows = [{"id": 1, "event": {"ts": day, "tags": ["a", None], "attrs": [("k", 1)]}},
            {"id": 2, "event": {"ts": day + datetime.timedelta(days=1), "tags": [], "attrs": []}},
            {"id": 3, "event": None},
            {"id": 4, "event": {"ts": day + datetime.timedelta(hours=3), "tags": None, "attrs": None}}]
    writer = PartitionedWriter(table_plan, "isync-test", 1 << 30, 1 << 26)
    writer.write(pa.Table.from_pylist(rows, schema=table_plan.arrow_schema()))
    files = {data_file.partition[0]: data_file for data_file in writer.finish()}
    epoch_day = (day.date() - datetime.date(1970, 1, 1)).days
    assert sorted(files, key=lambda key: (key is None, key)) == [epoch_day, epoch_day + 1, None]
    read = {key: pq.read_table(f.file_path.removeprefix("file://")).to_pylist() for key, f in files.items()}
    assert [row["id"] for row in read[epoch_day]] == [1, 4]
    assert read[None] == [{"id": 3, "event": None}]
    assert read[epoch_day][0]["event"] == {"ts": day, "tags": ["a", None], "attrs": [("k", 1)]}
    first = files[epoch_day]
    ts_id = schema.find_field("event.ts").field_id
    assert set(first.lower_bounds) == {schema.find_field("id").field_id, ts_id}
    assert first.value_counts[ts_id] == 2 and first.null_value_counts[ts_id] == 0
    repeated = {schema.find_field(name).field_id for name in ("event.tags.element", "event.attrs.key", "event.attrs.value")}
    assert repeated <= set(first.value_counts) and not repeated & (set(first.lower_bounds) | set(first.upper_bounds))
