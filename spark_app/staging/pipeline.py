"""Driver side of phase 1: run a trigger's work units through Spark into staged files (docs/dataplane.md).

Three shapes, all ending in :func:`spark_app.staging.writer.stage_partition` inside the tasks:

* direct — each task reads its units and writes what it read (appends; the small files this leaves
  per partition are merged before the commit, :mod:`spark_app.staging.packing`);
* keyed — each task reads its units and splits the decoded batches by a hash of the key; a Spark
  shuffle of Arrow IPC blocks brings every change of a key to one writer task (of a table without a
  primary key: a hash of the whole row, so every change of one distinct row meets in one task);
* transform — ``spec.transform`` needs rows in the JVM: the decoded batches become a DataFrame,
  the SQL runs, and the result is written as before.

Each task returns one pickled :class:`~spark_app.staging.writer.TaskResult`.
"""

from __future__ import annotations

import pickle
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.accumulators import AccumulatorParam
from pyspark.sql import SparkSession

from icebergsync.schema import spark_ddl
from icebergsync.spec import Column as SpecColumn
from spark_app.decoding.changes import CARRY_COLUMN, CHANGE_COLUMNS, UNAVAILABLE, collapse, declared_columns
from spark_app.decoding.deadletter import CONTROL_COLUMNS, ERROR_COLUMN, with_control_columns_arrow
from spark_app.decoding.schema_drift.drift import SchemaDrift
from spark_app.sources.units import UnitReader, UnitStats, WorkUnit
from spark_app.staging.equality_deletes import write_equality_deletes
from spark_app.staging.keyless_collapse import collapse_copies
from spark_app.staging.transform import apply_transform
from spark_app.staging.writer import (
    RESULT_SCHEMA,
    StagedFile,
    TaskResult,
    WritePlan,
    discard_staged,
    make_stage_function,
    stage_partition,
    task_id,
)

_STATS_BUCKET = -1


def _read(units: Iterable[WorkUnit], reader: UnitReader, stats: UnitStats) -> Iterator[pa.RecordBatch]:
    for unit in units:
        yield from reader(unit, stats)


def _ipc(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as stream:
        stream.write_table(table)
    return sink.getvalue().to_pybytes()


_MIX = np.uint64(0x9E3779B97F4A7C15)


def _column_hashes(column: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """A stable 64-bit hash of each value (the same in every process; nulls hash to 0; equal values, arrays
    included, hash equal)."""
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    kind = column.type
    if pa.types.is_integer(kind) or pa.types.is_temporal(kind) or pa.types.is_boolean(kind):
        width = pa.int64() if not pa.types.is_boolean(kind) else pa.int8()
        values = pc.fill_null(column.cast(width) if not pa.types.is_temporal(kind) else
                              column.view(pa.int64() if kind.bit_width == 64 else pa.int32()).cast(pa.int64()), 0)
        with np.errstate(over="ignore"):
            return values.to_numpy(zero_copy_only=False).astype(np.int64).view(np.uint64) * _MIX
    if pa.types.is_nested(kind):  # an array column (a keyless table's rows are routed by every column)
        text = pa.array([None if value is None else repr(value) for value in column.to_pylist()], pa.string())
    else:
        text = column.cast(pa.string()) if not (pa.types.is_string(kind) or pa.types.is_binary(kind)) else column
    distinct = pc.unique(text)
    codes = np.array([zlib.crc32(value.encode() if isinstance(value, str) else value) if value is not None else 0
                      for value in distinct.to_pylist()], dtype=np.uint64)
    positions = pc.fill_null(pc.index_in(text, distinct), 0).to_numpy(zero_copy_only=False)
    return codes[positions] * _MIX


def key_hashes(table: pa.Table | pa.RecordBatch, key: tuple[str, ...]) -> np.ndarray:
    """A stable hash of each row's key (all key columns), for routing every change of a key to one task."""
    combined = np.zeros(table.num_rows, dtype=np.uint64)
    with np.errstate(over="ignore"):
        for name in key:
            combined = combined * np.uint64(31) + _column_hashes(table.column(name))
    return combined >> np.uint64(1)


@dataclass(frozen=True)
class KeyRouter:
    """Bucket of each row: a stable hash of its key (every change of one key in one bucket, in order); an empty key
    (a table without a primary key) hashes every declared column: every change of one distinct row in one bucket."""

    key: tuple[str, ...]
    buckets: int

    def split(self, batch: pa.RecordBatch) -> Iterator[tuple[int, pa.Table]]:
        table = pa.Table.from_batches([batch])
        key = self.key or tuple(declared_columns(table))
        buckets = (key_hashes(table, key) % np.uint64(self.buckets)).astype(np.int64)
        for bucket in np.unique(buckets):
            yield int(bucket), table.filter(pa.array(buckets == bucket))


def run_units(spark: SparkSession, units: list[WorkUnit], reader: UnitReader,
              plan: WritePlan) -> tuple[list[TaskResult], UnitStats]:
    """Stage a trigger's units: keyed changes routed by key, appends written where they are read.

    Returns the tasks' results and what reading the units counted.
    """
    context = spark.sparkContext
    tasks = max(1, min(len(units), context.defaultParallelism))
    rdd = context.parallelize(units, tasks)
    if plan.key is not None:
        tasks = context.defaultParallelism  # every change of a key meets the others in one task
        keyed = rdd.mapPartitions(_route_function(reader, KeyRouter(plan.key, tasks))).partitionBy(
            tasks, lambda bucket: max(0, bucket))
        payloads = keyed.mapPartitions(_stage_changes_function(plan)).collect()
    else:
        payloads = rdd.mapPartitions(_stage_direct_function(plan, reader)).collect()
    results: list[TaskResult] = [pickle.loads(payload) for payload in payloads]
    stats = UnitStats()
    for result in results:
        stats.merge(result.unit_stats)
    return results, stats


def read_drift(spark: SparkSession, units: list[WorkUnit], reader: UnitReader) -> SchemaDrift:
    """Read a trigger's units for the schema drift of their records alone, writing nothing (a new table's
    columns, when spec.schema is empty, come from it)."""
    def probe(part: Iterable[WorkUnit]) -> Iterator[bytes]:
        stats = UnitStats()
        for _ in _read(part, reader, stats):
            pass
        yield pickle.dumps(stats.drift)

    context = spark.sparkContext
    drift = SchemaDrift()
    for payload in context.parallelize(units, max(1, min(len(units), context.defaultParallelism))).mapPartitions(
            probe).collect():
        drift.merge(pickle.loads(payload))
    return drift


def _stage_direct_function(plan: WritePlan, reader: UnitReader) -> Callable[[Iterable[WorkUnit]], Iterable[bytes]]:
    def stage(units: Iterable[WorkUnit]) -> Iterator[bytes]:
        stats = UnitStats()
        result = stage_partition(plan, _read(units, reader, stats), task_id())
        result.unit_stats = stats
        yield pickle.dumps(result)

    return stage


def _route_function(reader: UnitReader, router: KeyRouter) -> Callable[[Iterable[WorkUnit]], Iterable[tuple[int, bytes]]]:
    def route(units: Iterable[WorkUnit]) -> Iterator[tuple[int, bytes]]:
        stats = UnitStats()
        for batch in _read(units, reader, stats):
            for bucket, rows in router.split(batch):
                yield bucket, _ipc(rows)
        yield _STATS_BUCKET, pickle.dumps(stats)

    return route


def stage_changes(plan: WritePlan, tables: list[pa.Table], task_id: str) -> TaskResult:
    """Write one key bucket of a trigger's changes: dead letters, the winning upserts, and every key the bucket
    touches, so that each key's older row goes, wherever it lives: returned to the driver, which deletes
    those rows by position at commit time, or (``changes.deletes: equality``) as one equality delete file.
    Upserts still missing values Debezium did not send go to the driver too, which carries them from the
    live rows at commit time (:mod:`spark_app.commit.carry`); with equality deletes they are dead letters."""
    assert plan.key is not None
    changes = pa.concat_tables(tables, promote_options="permissive") if tables else None
    if changes is None or changes.num_rows == 0:
        return TaskResult()
    if not plan.key:
        return _stage_copies(plan, changes, task_id)
    if plan.deletes is not None:
        changes = _refuse_carry(changes)
    upserts, deleted, carried, moved = collapse(changes, plan.key)
    result = stage_partition(plan, iter(_dead_letters(changes).to_batches() + upserts.to_batches()), task_id)
    if result.rejection is not None:
        return result
    if plan.deletes is None:
        result.touched_keys = _ipc(deleted) if deleted.num_rows else None
        result.carried = _ipc(carried) if carried.num_rows else None
        result.moved = _ipc(moved) if moved.num_rows else None
        return result
    try:
        delete_file = write_equality_deletes(plan.deletes, deleted, f"{plan.file_prefix}-{task_id}")
    except BaseException:
        discard_staged(plan, result)
        raise
    if delete_file is not None:
        result.files.append(StagedFile("delete", delete_file))
    return result


def _stage_copies(plan: WritePlan, changes: pa.Table, task_id: str) -> TaskResult:
    """Write one row bucket of a trigger's changes to a table without a primary key: dead letters and the copies
    to append; the distinct rows whose live copies go (with how many) are returned to the driver, which deletes
    that many by position at commit time (:mod:`spark_app.keyless`)."""
    inserts, removed = collapse_copies(changes)
    result = stage_partition(plan, iter(_dead_letters(changes).to_batches() + inserts.to_batches()), task_id)
    if result.rejection is None and removed.num_rows:
        result.removed_copies = _ipc(removed)
    return result


def _dead_letters(changes: pa.Table) -> pa.Table:
    """The dead letters among decoded changes (rows with an ``_isync_error``), as the writer takes them."""
    return changes.filter(pc.is_valid(changes.column(ERROR_COLUMN))).drop_columns(list(CHANGE_COLUMNS))


def _refuse_carry(changes: pa.Table) -> pa.Table:
    """With equality deletes nothing locates a key's live row: an upsert missing values is a dead letter."""
    carry = changes.column(CARRY_COLUMN)
    if carry.null_count == changes.num_rows:
        return changes
    reason = pa.scalar(f"Debezium did not send a value ({UNAVAILABLE}: an unchanged TOASTed column), and with "
                       "changes.deletes: equality there is no live row to keep it from: set REPLICA IDENTITY FULL "
                       "on the source table, or use position deletes (docs/connectors.md)")
    errors = pc.if_else(pc.is_valid(carry), reason, changes.column(ERROR_COLUMN))
    return changes.set_column(changes.column_names.index(ERROR_COLUMN), ERROR_COLUMN, errors)


def _stage_changes_function(plan: WritePlan) -> Callable[[Iterable[tuple[int, bytes]]], Iterable[bytes]]:
    def stage(blocks: Iterable[tuple[int, bytes]]) -> Iterator[bytes]:
        stats = UnitStats()
        tables = []
        for bucket, data in blocks:
            if bucket == _STATS_BUCKET:
                stats.merge(pickle.loads(data))
            else:
                tables.append(pa.ipc.open_stream(data).read_all())
        result = stage_changes(plan, tables, task_id())
        result.unit_stats = stats
        yield pickle.dumps(result)

    return stage


class _PerUnitCounts(AccumulatorParam[dict[tuple[int, str], int]]):
    """Counters keyed by (unit index, name), merged by maximum: a unit read twice (by two branches of
    the transform, or by a retried task) is counted once."""

    def zero(self, value: dict[tuple[int, str], int]) -> dict[tuple[int, str], int]:
        return {}

    def addInPlace(self, value1: dict[tuple[int, str], int],
                   value2: dict[tuple[int, str], int]) -> dict[tuple[int, str], int]:
        for key, count in value2.items():
            value1[key] = max(value1.get(key, 0), count)
        return value1


def run_transform(spark: SparkSession, units: list[WorkUnit], reader: UnitReader, plan: WritePlan,
                  columns: list[SpecColumn], source_columns: list[SpecColumn], sql: str) -> tuple[list[TaskResult], UnitStats]:
    """Stage a trigger through ``spec.transform``: decoded units as a DataFrame (view ``source``), the SQL, the writer.

    The units are read once per branch of the transform (good and bad rows); both reads are of the
    same exact units, so the result is exact. What reading counted comes back per unit through an
    accumulator, so a unit read twice counts once.
    """
    schema = f"{spark_ddl(source_columns)}, " + ", ".join(f"{name} string" for name in CONTROL_COLUMNS)
    arrow_names = [c.name for c in source_columns] + list(CONTROL_COLUMNS)
    counts = spark.sparkContext.accumulator({}, _PerUnitCounts())

    def read(rows: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in rows:
            for payload in batch.column("unit").to_pylist():
                unit, stats = pickle.loads(payload), UnitStats()
                for decoded in reader(unit, stats):
                    yield with_control_columns_arrow(decoded).select(arrow_names)
                counts.add({(unit.index, name): count for name, count in stats.counters.items()})

    tasks = max(1, min(len(units), spark.sparkContext.defaultParallelism))
    listing = spark.createDataFrame([(pickle.dumps(unit),) for unit in units], "unit binary").repartition(tasks)
    frame = apply_transform(spark, listing.mapInArrow(read, schema), sql, columns)
    rows = frame.mapInArrow(make_stage_function(plan), RESULT_SCHEMA).collect()
    stats = UnitStats()
    for (_, name), count in counts.value.items():
        stats.add(name, count)
    return [pickle.loads(row["result"]) for row in rows], stats
