"""Executor side of phase 1: Arrow batches in, staged Parquet data files out.

Each Spark task runs ``stage_partition`` over its Arrow batches (via ``mapInArrow``). Rows are
split into good rows and dead letters, good rows fan out to one rolling writer per partition value
(a file never spans two partitions), and each writer closes its file when it reaches the table's
target file size. Memory is bounded by the open writers' row-group buffers, not by the batch size.
The task returns one Arrow row holding the pickled ``TaskResult``; nothing it writes is visible to
readers until the driver commits it.
"""

from __future__ import annotations

import itertools
import math
import pickle
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyiceberg.io import FileIO, load_file_io
from pyiceberg.io.pyarrow import schema_to_pyarrow
from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
from pyiceberg.partitioning import PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.table.locations import LocationProvider, load_location_provider
from pyiceberg.typedef import Record

from icebergsync.transient.object_store import close_upload
from spark_app.decoding.deadletter import Rejection, count_reasons, dead_letter_rows, split_dead_letters
from spark_app.iceberg import bloom_filter
from spark_app.iceberg.internals import footer_statistics, new_data_location, partition_value
from spark_app.sources.units import UnitStats
from spark_app.staging.equality_deletes import DeletePlan

RESULT_SCHEMA = "result binary"

_MIN_ROW_GROUP_BYTES = 256 * 1024
_MAX_ROW_GROUP_BYTES = 128 * 1024 * 1024
_INITIAL_COMPRESSION_RATIO = 0.35
_FOOTER_RESERVE_BYTES = 16 * 1024
_CLOSE_AT_FRACTION = 0.97
_DICTIONARY_SAMPLE_ROWS = 32_768
# Up to this many runs of one partition value in a batch, the batch is sliced instead of grouped.
MAX_SLICED_RUNS = 16
_DICTIONARY_PAGE_BYTES = 1 << 20  # parquet.dictionary.page.size, Parquet's Java writer's default
_ZSTD_DEFAULT_LEVEL = 3  # what Parquet's Java writer uses when write.parquet.compression-level is unset


@dataclass(frozen=True)
class TablePlan:
    """What an executor needs to write files for one table (schema, spec, location, FileIO)."""

    location: str
    properties: dict[str, str]
    schema: Schema
    spec: PartitionSpec
    io_properties: dict[str, str]

    def arrow_schema(self) -> pa.Schema:
        return schema_to_pyarrow(self.schema, include_field_ids=True)


@dataclass(frozen=True)
class WritePlan:
    """Everything a task needs, shipped once per trigger in the closure."""

    sink_id: str
    sink_version: int
    file_prefix: str
    table: TablePlan
    dead_letter: TablePlan | None
    target_file_bytes: int
    writer_memory_bytes: int
    required_columns: tuple[str, ...]
    event_time_column: str | None
    key: tuple[str, ...] | None = None  # a keyed sync's key: changes are routed and collapsed by it; () for a table
    # without a primary key: changes are routed by every column and collapsed as copies (spark_app/staging/keyless_collapse.py)
    deletes: DeletePlan | None = None  # with changes.deletes: equality, its equality deletes (spark_app/staging/equality_deletes.py)


@dataclass
class StagedFile:
    """A Parquet file written but not committed; ``data_file`` is ready for an Iceberg append."""

    table: str  # "data" | "delete" | "dead_letter"
    data_file: DataFile


@dataclass
class TaskResult:
    """What one task staged, plus what the driver aggregates into the commit's properties."""

    files: list[StagedFile] = field(default_factory=list)
    records: int = 0
    dead_letters: int = 0
    max_event_time_us: int | None = None
    dead_letter_reasons: dict[str, int] = field(default_factory=dict)
    rejection: Rejection | None = None  # set instead of writing anything when there is no dead-letter table
    touched_keys: bytes | None = None  # keyed, position deletes: the keys (Arrow IPC) whose older rows go
    carried: bytes | None = None  # keyed, position deletes: upserts missing values (Arrow IPC; spark_app/commit/carry/)
    moved: bytes | None = None  # keyed, position deletes: deleted keys of source events (Arrow IPC; spark_app/commit/carry/)
    removed_copies: bytes | None = None  # keyless: distinct rows whose live copies go, with counts (spark_app/commit/keyless_locate.py)
    unit_stats: UnitStats = field(default_factory=UnitStats)


def _partition_fields(plan: TablePlan) -> list[tuple[str, Any, Any]]:
    """(source column's path, arrow transform, source type) for each partition field."""
    fields = []
    for partition_field in plan.spec.fields:
        source = plan.schema.find_field(partition_field.source_id)
        path = plan.schema.find_column_name(partition_field.source_id)
        assert path is not None
        fields.append((path, partition_field.transform.pyarrow_transform(source.field_type), source.field_type))
    return fields


def column_at(table: pa.Table, path: str) -> pa.ChunkedArray:
    """The column at ``path``: a top-level column, or a field of a struct column (``event.ts``; null where the
    struct is null)."""
    name, *fields = path.split(".")
    column = table.column(name)
    for field_name in fields:
        column = pc.struct_field(column, field_name)
    return column


def _run_starts(keys: list[pa.Array | pa.ChunkedArray], rows: int) -> list[int]:
    """The first row of each run of equal partition keys (nulls equal each other, and no value)."""
    if rows == 0:
        return []
    changed = np.zeros(rows - 1, dtype=bool)
    for key in keys:
        after, before = key.slice(1), key.slice(0, rows - 1)
        differs = pc.fill_null(pc.not_equal(after, before), True).to_numpy(zero_copy_only=False)
        if key.null_count:
            differs &= ~(pc.is_null(after).to_numpy(zero_copy_only=False) & pc.is_null(before).to_numpy(zero_copy_only=False))
        changed |= differs
    return [0, *(np.flatnonzero(changed) + 1).tolist()]


def _as_table(rows: pa.Table | pa.RecordBatch) -> pa.Table:
    return pa.Table.from_batches([rows]) if isinstance(rows, pa.RecordBatch) else rows


def partition_groups(plan: TablePlan, table: pa.Table | pa.RecordBatch) -> Iterator[tuple[tuple[Any, ...], pa.Table]]:
    """``(partition key, rows)`` covering every row of ``table``, each group of one partition value.

    Rows ordered by partition (event time, as most streams are) come as zero-copy slices, one per run
    of equal keys; others are grouped, one group per value. Unpartitioned: one group, key ``()``.
    """
    fields = _partition_fields(plan)
    if not fields:
        yield (), _as_table(table)
        return
    rows = _as_table(table)
    keys = [transform(column_at(rows, path)) for path, transform, _ in fields]
    starts = _run_starts(keys, table.num_rows)
    if len(starts) <= MAX_SLICED_RUNS:
        for start, end in itertools.pairwise([*starts, table.num_rows]):
            yield tuple(key[start].as_py() for key in keys), _as_table(table.slice(start, end - start))
        return
    names = [f"k{i}" for i in range(len(keys))]
    keyed = pa.table({**dict(zip(names, keys, strict=True)), "_row": pa.array(np.arange(table.num_rows, dtype=np.int64))})
    groups = keyed.group_by(names, use_threads=False).aggregate([("_row", "list")])
    key_values = [groups.column(name).to_pylist() for name in names]
    row_lists = groups.column("_row_list")
    for index in range(groups.num_rows):
        yield tuple(values[index] for values in key_values), _as_table(table.take(row_lists[index].values))


def data_file_from_footer(plan: TablePlan, path: str, size: int, partition: Record, metadata: pq.FileMetaData) -> DataFile:
    """The Iceberg DataFile (with column statistics) of a written Parquet file, from its footer."""
    statistics = footer_statistics(plan.schema, plan.properties, metadata)
    data_file = DataFile.from_args(
        content=DataFileContent.DATA, file_path=path, file_format=FileFormat.PARQUET, partition=partition,
        file_size_in_bytes=size, sort_order_id=None, equality_ids=None, key_metadata=None,
        **statistics.to_serialized_dict(),
    )
    data_file.spec_id = plan.spec.spec_id  # not a field of the stored struct: from_args would drop it
    return data_file


def dictionary_columns(table: pa.Table) -> list[str]:
    """The columns worth dictionary-encoding, judged on a sample of a file's first rows.

    Parquet's Java writer (what Iceberg's Spark runtime writes with) keeps a dictionary only while
    its indexes plus the dictionary are smaller than the plain values and the dictionary fits one
    dictionary page (1 MiB); otherwise it falls back to plain encoding. The same rule here, on
    estimated sizes: high-cardinality columns such as ids, timestamps and unique strings are
    written plain, where a dictionary would only add bytes. Nested columns are judged leaf by leaf, each by its
    Parquet column path (``<name>.<field>`` in a struct, ``<name>.list.element``, ``<name>.key_value.key`` and
    ``.value``).
    """
    sample = table.slice(0, _DICTIONARY_SAMPLE_ROWS)
    chosen = []
    for name, column in _leaves(zip(sample.column_names, sample.columns, strict=True)):
        values = len(column) - column.null_count
        if values == 0 or pa.types.is_boolean(column.type):
            continue
        distinct = pc.count_distinct(column).as_py()
        plain = _plain_bytes(column)
        dictionary = distinct * plain / values
        indexes = values * max(1, math.ceil(math.log2(distinct + 1))) / 8
        if indexes + dictionary < plain and dictionary <= _DICTIONARY_PAGE_BYTES:
            chosen.append(name)
    return chosen


def _leaves(columns: Iterable[tuple[str, pa.ChunkedArray]]) -> Iterator[tuple[str, pa.ChunkedArray]]:
    """The primitive leaves of columns, each with its Parquet column path."""
    for name, column in columns:
        kind = column.type
        if pa.types.is_struct(kind):
            yield from _leaves((f"{name}.{kind.field(i).name}", pc.struct_field(column, i)) for i in range(kind.num_fields))
        elif pa.types.is_map(kind):
            yield from _leaves([(f"{name}.key_value.key", pa.chunked_array([c.keys for c in column.chunks], kind.key_type)),
                                (f"{name}.key_value.value",
                                 pa.chunked_array([c.items for c in column.chunks], kind.item_type))])
        elif pa.types.is_list(kind) or pa.types.is_large_list(kind):
            yield from _leaves([(f"{name}.list.element", pc.list_flatten(column))])
        else:
            yield name, column


def _plain_bytes(column: pa.ChunkedArray) -> int:
    """The bytes of a column's non-null values as Parquet's plain encoding writes them (a string: 4 + its length)."""
    values = len(column) - column.null_count
    if pa.types.is_string(column.type) or pa.types.is_binary(column.type) or \
            pa.types.is_large_string(column.type) or pa.types.is_large_binary(column.type):
        return 4 * values + sum(pc.sum(pc.binary_length(chunk)).as_py() or 0 for chunk in column.chunks)
    return values * max(1, column.type.bit_width // 8)


def partition_path(plan: TablePlan, partition: Record) -> str | None:
    """The path segment of ``partition`` under the table's data location (None: unpartitioned)."""
    return plan.spec.partition_to_path(partition, plan.schema) if plan.spec.fields else None


def new_file_path(location_provider: LocationProvider, partition_path: str | None, name_prefix: str,
                  sequence: int) -> str:
    """Where a new staged file goes: ``<name prefix>-<sequence>-<random>.parquet`` in its partition's place."""
    name = f"{name_prefix}-{sequence:05d}-{uuid.uuid4().hex[:12]}.parquet"
    return new_data_location(location_provider, name, partition_path)


def parquet_writer(sink: Any, plan: TablePlan, first_rows: pa.Table, compression: dict[str, Any]) -> pq.ParquetWriter:
    """The Parquet writer of every staged data file: one footer layout, so staged files can be stitched.
    Key columns get Bloom filters sized for row groups like ``first_rows`` (spark_app/iceberg/bloom_filter.py)."""
    blooms = bloom_filter.write_options(bloom_filter.bloom_filter_columns(plan.schema, plan.properties),
                                        first_rows.num_rows, plan.properties)
    return pq.ParquetWriter(sink, schema=plan.arrow_schema(), store_decimal_as_integer=True,
                            use_dictionary=dictionary_columns(first_rows), **compression, **blooms)


class RollingParquetWriter:
    """Writes one partition's rows into Parquet files that close at the target size.

    Rows are buffered up to a row-group budget, then written as a row group. The compressed size
    of the next row group is predicted from the ratio observed so far, so a file is cut within a
    row group's worth of rows of the target rather than overshooting by a whole group.
    """

    def __init__(self, plan: TablePlan, io: FileIO, partition: Record, name_prefix: str, target_file_bytes: int,
                 compression: dict[str, Any]):
        self._plan = plan
        self._io = io
        self._partition = partition
        self._partition_path = partition_path(plan, partition)
        self._name_prefix = name_prefix
        self._target = target_file_bytes
        self._compression = compression
        self._location_provider = load_location_provider(plan.location, plan.properties)
        self._arrow_schema = plan.arrow_schema()
        self._buffer: list[pa.RecordBatch] = []
        self.buffered_bytes = 0
        self._ratio = _INITIAL_COMPRESSION_RATIO
        self._file_uncompressed = 0
        self._writer: pq.ParquetWriter | None = None
        self._stream: Any = None
        self._path = ""
        self._sequence = 0
        self.closed_files: list[DataFile] = []

    def _row_group_budget(self) -> int:
        """Uncompressed bytes to buffer before writing a row group: about one row group per file
        (fewer, larger groups compress better), capped so that buffers stay small."""
        return max(_MIN_ROW_GROUP_BYTES, min(_MAX_ROW_GROUP_BYTES, int(self._target / self._ratio)))

    def write(self, batch: pa.RecordBatch) -> None:
        self._buffer.append(batch)
        self.buffered_bytes += batch.nbytes
        if self.buffered_bytes >= self._row_group_budget():
            self.flush()

    def flush(self) -> None:
        """Write the buffer as row groups, rolling to a new file whenever the target is reached.

        A slice is sized from the compression ratio measured so far; the file closes only once it
        is within a few percent of the target, so a wrong first guess costs a row group, not a file.
        """
        if not self._buffer:
            return
        table = pa.Table.from_batches(self._buffer, schema=self._arrow_schema)
        self._buffer, self.buffered_bytes = [], 0
        limit = self._target - _FOOTER_RESERVE_BYTES
        while table.num_rows:
            if self._writer is None:
                self._open(table)
            remaining = limit - self._stream.tell()
            predicted = max(1, int(table.nbytes * self._ratio))
            rows = table.num_rows if predicted <= remaining else max(1, int(table.num_rows * remaining / predicted))
            self._write_group(table.slice(0, rows))
            table = table.slice(rows)
            if self._stream.tell() >= limit * _CLOSE_AT_FRACTION:
                self._close()

    def _write_group(self, table: pa.Table) -> None:
        assert self._writer is not None
        before = self._stream.tell()
        self._writer.write_table(table, row_group_size=max(1, table.num_rows))
        self._file_uncompressed += table.nbytes
        written = self._stream.tell() - before
        if table.nbytes > 0 and written > 0:
            self._ratio = max(0.01, (self._stream.tell()) / max(1, self._file_uncompressed))

    def _open(self, first_rows: pa.Table) -> None:
        self._sequence += 1
        self._path = new_file_path(self._location_provider, self._partition_path, self._name_prefix, self._sequence)
        self._stream = self._io.new_output(self._path).create(overwrite=False)
        self._writer = parquet_writer(self._stream, self._plan, first_rows, self._compression)
        self._file_uncompressed = 0

    def _close(self) -> None:
        assert self._writer is not None
        self._writer.close()
        metadata = self._writer.writer.metadata
        size = self._stream.tell()
        close_upload(self._stream, self._io, self._path, size)
        self.closed_files.append(data_file_from_footer(self._plan, self._path, size, self._partition, metadata))
        self._writer, self._stream = None, None

    def finish(self) -> list[DataFile]:
        """Flush what is buffered and close the open file; return every file this writer closed."""
        self.flush()
        if self._writer is not None:
            self._close()
        return self.closed_files

    def abort(self) -> None:
        """Delete every file this writer wrote, open or closed (the task failed; nothing is committed)."""
        if self._writer is not None:
            try:
                self._writer.close()
                self._stream.close()
            finally:
                self._io.delete(self._path)
                self._writer = None
        for data_file in self.closed_files:
            self._io.delete(data_file.file_path)


def compression_options(properties: dict[str, str]) -> dict[str, Any]:
    codec = properties.get("write.parquet.compression-codec", "zstd")
    level = properties.get("write.parquet.compression-level")
    options: dict[str, Any] = {"compression": "none" if codec == "uncompressed" else codec}
    if level is not None:
        options["compression_level"] = int(level)
    elif codec == "zstd":
        options["compression_level"] = _ZSTD_DEFAULT_LEVEL  # Arrow's own default is 1: files 4-5% larger
    return options


WRITER_MEMORY_BYTES = 256 * 1024 * 1024  # what one task's partitioned writer may buffer, its partitions together


class PartitionedWriter:
    """Fans rows out to one rolling writer per partition value, within a shared memory budget."""

    def __init__(self, plan: TablePlan, name_prefix: str, target_file_bytes: int, memory_bytes: int):
        self._plan = plan
        self._io = load_file_io(plan.io_properties, plan.location)
        self._name_prefix = name_prefix
        self._target = target_file_bytes
        self._memory = memory_bytes
        self._fields = _partition_fields(plan)
        self._compression = compression_options(plan.properties)
        self._writers: dict[tuple[Any, ...], RollingParquetWriter] = {}
        self._arrow_schema = plan.arrow_schema()

    def write(self, table: pa.Table | pa.RecordBatch) -> None:
        """Append rows (already in the table's Arrow schema) to their partitions' writers."""
        if table.num_rows == 0:
            return
        for key, rows in partition_groups(self._plan, table):
            self._write_to(key, rows)

    def _write_to(self, key: tuple[Any, ...], table: pa.Table) -> None:
        writer = self._writers.get(key)
        if writer is None:
            record = Record(*[
                partition_value(source_type, value)
                for (_, _, source_type), value in zip(self._fields, key, strict=True)
            ])
            writer = RollingParquetWriter(self._plan, self._io, record, self._name_prefix, self._target,
                                          self._compression)
            self._writers[key] = writer
        for batch in table.to_batches():
            writer.write(batch)
        self._enforce_memory_budget()

    def _enforce_memory_budget(self) -> None:
        total = sum(writer.buffered_bytes for writer in self._writers.values())
        while total > self._memory:
            largest = max(self._writers.values(), key=lambda writer: writer.buffered_bytes)
            total -= largest.buffered_bytes
            largest.flush()

    def finish(self) -> list[DataFile]:
        files: list[DataFile] = []
        for writer in self._writers.values():
            files.extend(writer.finish())
        return files

    def abort(self) -> None:
        """Delete every file this writer wrote, open or closed (the task failed; nothing is committed)."""
        for writer in self._writers.values():
            writer.abort()


def conform(batch: pa.RecordBatch, target: pa.Schema) -> pa.Table:
    """Cast a batch's columns to the table's Arrow schema (with field ids); absent columns become null."""
    columns = []
    for target_field in target:
        if target_field.name in batch.schema.names:
            column = batch.column(target_field.name)
            columns.append(column if column.type == target_field.type else pc.cast(column, target_field.type))
        else:
            columns.append(pa.nulls(batch.num_rows, target_field.type))
    return pa.Table.from_arrays(columns, schema=target)


def stage_partition(plan: WritePlan, batches: Iterator[pa.RecordBatch], task_id: str) -> TaskResult:
    """Write one task's rows; on any error delete what it wrote and re-raise."""
    prefix = f"{plan.file_prefix}-{task_id}"
    data_writer = PartitionedWriter(plan.table, prefix, plan.target_file_bytes, plan.writer_memory_bytes)
    dead_writer = (
        PartitionedWriter(plan.dead_letter, prefix + "-dlq", plan.target_file_bytes, plan.writer_memory_bytes // 8)
        if plan.dead_letter else None
    )
    data_schema = plan.table.arrow_schema()
    dead_schema = plan.dead_letter.arrow_schema() if plan.dead_letter else None
    result = TaskResult()
    try:
        for batch in batches:
            good, bad, reasons = split_dead_letters(batch, plan.required_columns)
            bad_count = batch.num_rows - good.num_rows
            if bad_count and (dead_writer is None or dead_schema is None):
                rejection = Rejection.first(batch, bad, reasons)
                result.rejection = rejection if result.rejection is None else result.rejection.adding(rejection)
            if result.rejection is not None:
                continue  # nothing of this trigger will be committed: only count the bad records
            if bad_count and dead_writer is not None and dead_schema is not None:
                rows = dead_letter_rows(plan.sink_id, plan.sink_version, batch, bad, reasons)
                count_reasons(rows.column("reason").to_pylist(), result.dead_letter_reasons)
                dead_writer.write(pa.concat_tables([conform(rb, dead_schema) for rb in rows.to_batches()]))
                result.dead_letters += bad_count
            if good.num_rows:
                result.records += good.num_rows
                if plan.event_time_column:
                    newest = pc.max(pc.cast(good.column(plan.event_time_column), pa.timestamp("us", tz="UTC"))).value
                    if newest is not None and (result.max_event_time_us is None or newest > result.max_event_time_us):
                        result.max_event_time_us = newest
                data_writer.write(conform(good, data_schema))
        if result.rejection is not None:
            data_writer.abort()
            return TaskResult(rejection=result.rejection)
        result.files = [StagedFile("data", data_file) for data_file in data_writer.finish()]
        if dead_writer is not None:
            result.files += [StagedFile("dead_letter", data_file) for data_file in dead_writer.finish()]
    except BaseException:
        data_writer.abort()
        if dead_writer is not None:
            dead_writer.abort()
        raise
    return result


def discard_staged(plan: WritePlan, result: TaskResult) -> None:
    """Delete the files a task staged (it failed after writing them; nothing of it is committed)."""
    for staged in result.files:
        table = plan.dead_letter if staged.table == "dead_letter" and plan.dead_letter else plan.table
        load_file_io(table.io_properties, table.location).delete(staged.data_file.file_path)


def task_id() -> str:
    """``<partition>-<attempt>`` of the running Spark task (``00000-0`` outside one): names its files."""
    from pyspark import TaskContext

    context = TaskContext.get()
    return f"{context.partitionId():05d}-{context.attemptNumber()}" if context else "00000-0"


def make_stage_function(plan: WritePlan) -> Any:
    """The ``mapInArrow`` function for a trigger: one result row per task."""

    def stage(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        result = stage_partition(plan, batches, task_id())
        yield pa.RecordBatch.from_pydict({"result": [pickle.dumps(result)]}, schema=pa.schema([("result", pa.binary())]))

    return stage


def table_plan(table: Table) -> TablePlan:
    """What the tasks need of ``table`` to write its files."""
    return TablePlan(
        location=table.metadata.location,
        properties=dict(table.metadata.properties),
        schema=table.schema(),
        spec=table.spec(),
        io_properties=dict(table.io.properties),
    )


def rebuild_data_file(table: Table, path: str) -> DataFile:
    """A DataFile for an unpartitioned table's staged file, from its Parquet footer (dead-letter recovery)."""
    input_file = table.io.new_input(path)
    with input_file.open() as stream:
        metadata = pq.ParquetFile(stream).metadata
    return data_file_from_footer(table_plan(table), path, len(input_file), Record(), metadata)
