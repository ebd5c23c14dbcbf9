"""Write the files of an upkeep plan: each group's data again, each merge's position deletes as one file.

A group no delete applies to whose files have the table's current columns is joined by copying
its files' row groups (:func:`spark_app.staging.packing.merge_group`, as the commit's merge of small staged
files does). Any other group is read file by file in the table's current schema (columns matched by
field id, :func:`spark_app.iceberg.internals.read_data_file`), without the rows its position and
equality deletes remove, and written by the rolling writer into its partition at the target size.
On format 3 the current columns include the row lineage columns, filled in as rows are read
(:mod:`spark_app.staging.lineage`): only files an earlier rewrite wrote have them, so files the sink
wrote are always read and written again, never copied (their rows' ids follow from their positions).
A merge writes the positions its deletes hold for the data files that stay as the table's format
takes them (:mod:`spark_app.iceberg.position_deletes`): one position delete file (format 2), one DV per data
file in one Puffin file (format 3).

Like the merge of staged files, the driver does the work itself while it is small
(:data:`spark_app.staging.packing.DRIVER_MERGE_BYTES` in all, :data:`spark_app.staging.packing.DRIVER_REWRITE_BYTES`
to decode and encode); more is dealt to Spark tasks, balanced by bytes, each group in one task.
Each piece of work reports its files or its error; the caller commits all or nothing.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import pickle
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.parquet as pq
from pyiceberg.io import FileIO
from pyiceberg.manifest import DataFile
from pyspark.sql import SparkSession

from spark_app.iceberg.applied_deletes import ApplicableKeys, deleted_positions, equality_keys, without_keys
from spark_app.iceberg.internals import LiveFile
from spark_app.iceberg.position_deletes.deletion_vector import DeletionVector
from spark_app.iceberg.position_deletes.dv_files import write_deletion_vectors
from spark_app.iceberg.position_deletes.plan import DeleteTarget, PositionDeletePlan
from spark_app.iceberg.position_deletes.position_files import write_position_delete_file
from spark_app.staging import packing
from spark_app.staging.rewrite_rows import RewriteContext, write_live_rows
from spark_app.staging.writer import (
    WRITER_MEMORY_BYTES,
    PartitionedWriter,
    RollingParquetWriter,
    compression_options,
    task_id,
)
from spark_app.upkeep.plan import PositionMerge, RewriteGroup, UpkeepPlan

log = logging.getLogger("icebergsync.maintenance")

_FIELD_ID = b"PARQUET:field_id"


@dataclass
class Outcome:
    """What one piece of work (a group or a merge, by its index in the plan's work) came to: its files or its
    error, and for a group the rows its files hold and the rows written (the deleted ones dropped)."""

    index: int
    files: list[DataFile] = field(default_factory=list)
    rows_read: int = 0
    rows_written: int = 0
    error: str | None = None


Work = RewriteGroup | PositionMerge


@dataclass(frozen=True)
class _Item:
    index: int
    work: Work

    @property
    def size(self) -> int:
        return self.work.size


def work_of(plan: UpkeepPlan) -> list[Work]:
    """The plan's pieces of work, in the order outcomes refer to them."""
    return [*plan.groups, *plan.merges]


def _columns(schema: pa.Schema) -> list[tuple[str, pa.DataType, bytes | None]]:
    return [(f.name, f.type, (f.metadata or {}).get(_FIELD_ID)) for f in schema]


def _has_current_columns(io: FileIO, files: Iterable[LiveFile], target: pa.Schema) -> bool:
    """Whether every file holds exactly the table's current columns (names, types, field ids) in order."""
    wanted = _columns(target)
    for live in files:
        with io.new_input(live.path).open() as stream:
            if _columns(pq.read_schema(stream)) != wanted:
                return False
    return True


def _rewrite_group(context: RewriteContext, group: RewriteGroup, name_prefix: str, index: int,
                   keys_read: dict[str, pa.Table]) -> Outcome:
    io = context.io()
    relayout = group.spec_id != context.default_spec_id  # an earlier spec's files: into the default spec's layout
    plan = context.table_plan(context.default_spec_id if relayout else group.spec_id)
    target = plan.arrow_schema()
    rows = sum(f.data_file.record_count for f in group.files)
    if not relayout and not group.equality_deletes and not group.position_deletes \
            and _has_current_columns(io, group.files, target):
        files = packing.merge_group(plan, packing.MergeGroup(tuple(f.data_file for f in group.files)), name_prefix,
                                  context.target_file_bytes)
        return Outcome(index, files, rows, rows)
    key = context.key
    keys = ApplicableKeys(equality_keys(io, group.equality_deletes, key, target, keys_read), key) \
        if group.equality_deletes else None
    positions = deleted_positions(io, group.position_deletes, group.files) if group.position_deletes else {}
    writer: RollingParquetWriter | PartitionedWriter = \
        PartitionedWriter(plan, name_prefix, context.target_file_bytes, WRITER_MEMORY_BYTES) if relayout else \
        RollingParquetWriter(plan, io, group.files[0].data_file.partition, name_prefix, context.target_file_bytes,
                             compression_options(plan.properties))
    written = 0
    try:
        for live in group.files:
            applicable = keys.above(live.data_sequence_number) if keys is not None else None
            keep = functools.partial(without_keys, keys=applicable, key=key) if applicable is not None else None
            written += write_live_rows(context, io, writer, target, live, group.spec_id, positions.get(live.path), keep)
        files = writer.finish()
    except BaseException:
        writer.abort()
        raise
    return Outcome(index, files, rows, written)


def _merge_positions(context: RewriteContext, work: PositionMerge, name_prefix: str, index: int) -> Outcome:
    io = context.io()
    positions = deleted_positions(io, work.deletes, work.targets)
    targets = [DeleteTarget(f.data_file, DeletionVector(positions[f.path])) for f in work.targets if f.path in positions]
    plan = PositionDeletePlan(context.location, context.properties, context.io_properties, context.format_version)
    if plan.format_version >= 3:
        return Outcome(index, write_deletion_vectors(plan, targets, name_prefix))
    return Outcome(index, [write_position_delete_file(plan, targets, name_prefix)])


def run_items(context: RewriteContext, items: Iterable[_Item], name_prefix: str) -> list[Outcome]:
    """Do each piece of work on its own; one that fails reports its error (having deleted what it wrote)."""
    outcomes = []
    keys_read: dict[str, pa.Table] = {}  # equality delete files' keys, read once for every group
    for item in items:
        try:
            if isinstance(item.work, RewriteGroup):
                outcomes.append(_rewrite_group(context, item.work, name_prefix, item.index, keys_read))
            else:
                outcomes.append(_merge_positions(context, item.work, name_prefix, item.index))
        except Exception as error:  # reported to the driver, which commits nothing of the run
            outcomes.append(Outcome(item.index, error=f"{type(error).__name__}: {error}"))
    return outcomes


def _task_function(context: RewriteContext, name_prefix: str) -> Callable[[Iterable[list[_Item]]], Iterator[bytes]]:
    def run(assignments: Iterable[list[_Item]]) -> Iterator[bytes]:
        for items in assignments:
            yield pickle.dumps(run_items(context, items, f"{name_prefix}-{task_id()}"))

    return run


def in_driver(plan: UpkeepPlan, context: RewriteContext) -> bool:
    """Whether the work is small enough for the driver (the bounds of the commit's merge of small files)."""
    total = sum(work.size for work in work_of(plan))
    decoded = sum(group.size if group.equality_deletes or group.position_deletes or context.keeps_lineage
                  else packing.rewritten_bytes(packing.MergeGroup(tuple(f.data_file for f in group.files)))
                  for group in plan.groups)
    return total <= packing.DRIVER_MERGE_BYTES and decoded <= packing.DRIVER_REWRITE_BYTES


def run_plan(spark: Callable[[], SparkSession] | None, context: RewriteContext, plan: UpkeepPlan,
             name_prefix: str) -> tuple[list[Outcome], bool]:
    """Every piece of work's outcome, in the driver (when small, or without Spark) or as Spark tasks; and
    whether Spark ran it."""
    items = [_Item(index, work) for index, work in enumerate(work_of(plan))]
    if spark is None or in_driver(plan, context):
        return run_items(context, items, f"{name_prefix}-{task_id()}"), False
    session = spark()
    assignments = packing.spread(items, session.sparkContext.defaultParallelism)
    payloads = session.sparkContext.parallelize(assignments, len(assignments)).mapPartitions(
        _task_function(context, name_prefix)).collect()
    return [outcome for payload in payloads for outcome in pickle.loads(payload)], True


def delete_written(io: FileIO, outcomes: Sequence[Outcome]) -> None:
    """Delete every file the outcomes wrote (a run that is not committed)."""
    for outcome in outcomes:
        for written in outcome.files:
            with contextlib.suppress(FileNotFoundError):  # the DVs of one Puffin file share its path
                io.delete(written.file_path)
