"""Merge a trigger's small staged files of one partition before the commit (docs/dataplane.md).

Each task writes the rows of its own units, so a partition value that several tasks saw is staged
as several small files (one remainder per task and value). Before the commit, the driver bin-packs
each partition's files below the target size into groups of at most the target, and each group
becomes one file: its files' row groups are copied as they are into one file with a new footer
(:mod:`spark_app.iceberg.parquet_stitch`, no value decoded or encoded), except that files whose row groups
are tiny are first written again together as one row group, so a merged file never collects many
tiny row groups. The driver merges by itself unless that is a lot of work
(:data:`DRIVER_MERGE_BYTES`, :data:`DRIVER_REWRITE_BYTES`); then a second Spark job does. The
commit references the merged files and the originals are deleted. Per commit and partition this
leaves about as many files as a write that routed every row of a partition to one writer (Spark's
hash-distributed Iceberg write), without moving every row through a shuffle. The rows are the same
rows, so exactly-once is unaffected; a failed merge leaves the originals to be committed as they are.
"""

from __future__ import annotations

import logging
import pickle
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, replace
from typing import Protocol, TypeVar

import pyarrow as pa
import pyarrow.parquet as pq
from pyiceberg.io import FileIO, load_file_io
from pyiceberg.manifest import DataFile
from pyiceberg.table.locations import load_location_provider
from pyiceberg.typedef import Record
from pyspark.sql import SparkSession

from spark_app.iceberg.parquet_stitch import Piece, StitchRefused, plan_stitch
from spark_app.iceberg.position_deletes.plan import write_new_file
from spark_app.staging.writer import (
    RollingParquetWriter,
    StagedFile,
    TablePlan,
    TaskResult,
    WritePlan,
    compression_options,
    data_file_from_footer,
    new_file_path,
    parquet_writer,
    partition_path,
    task_id,
)

log = logging.getLogger("icebergsync.merge")

# A staged file at least this share of the target is full (the writer closes files at ~97% of it).
FULL_FILE_SHARE = 0.9
# Up to this many bytes of small files in all, of which at most DRIVER_REWRITE_BYTES are written
# again (the rest is copied), the driver merges them itself: no Spark job to schedule, and no wait
# for a task slot that the next trigger's tasks hold.
DRIVER_MERGE_BYTES = 64 * 1024 * 1024
DRIVER_REWRITE_BYTES = 8 * 1024 * 1024
# A file whose row groups average fewer bytes is written again (with the group's other such files,
# as one row group) rather than copied: copying would leave a merged file of many tiny row groups.
MIN_COPIED_ROW_GROUP_BYTES = 1024 * 1024
# That one row group is built in memory; a group whose small files hold more is written again whole,
# through the rolling writer, whose memory is bounded by its row-group budget.
MAX_REWRITTEN_PIECE_BYTES = 8 * 1024 * 1024
_READ_BATCH_ROWS = 65_536


@dataclass(frozen=True)
class MergeGroup:
    """Staged data files of one partition, together at most the target size, to be written as one."""

    files: tuple[DataFile, ...]

    @property
    def size(self) -> int:
        return sum(f.file_size_in_bytes for f in self.files)


class Sized(Protocol):
    @property
    def size(self) -> int: ...


T = TypeVar("T")
S = TypeVar("S", bound=Sized)


def first_fit_decreasing(items: Iterable[T], size: Callable[[T], int], capacity: int,
                         name: Callable[[T], str]) -> list[list[T]]:
    """``items`` packed into bins of at most ``capacity`` (an item larger than it gets a bin of its own): the
    largest first (ties by ``name``), each into the first bin it fits."""
    bins: list[list[T]] = []
    loads: list[int] = []
    for item in sorted(items, key=lambda i: (-size(i), name(i))):
        fitting = next((index for index, load in enumerate(loads) if load + size(item) <= capacity), None)
        if fitting is None:
            bins.append([item])
            loads.append(size(item))
        else:
            bins[fitting].append(item)
            loads[fitting] += size(item)
    return bins


def plan_merges(files: Iterable[DataFile], target_file_bytes: int) -> list[MergeGroup]:
    """Groups of two or more small files of one partition, each group at most ``target_file_bytes``.

    Per partition, the files below :data:`FULL_FILE_SHARE` of the target are packed first-fit
    decreasing; a group of one file is left as it is, and so is every full file.
    """
    by_partition: dict[Record, list[DataFile]] = {}  # a trigger's data files share the table's spec
    for data_file in files:
        if data_file.file_size_in_bytes < FULL_FILE_SHARE * target_file_bytes:
            by_partition.setdefault(data_file.partition, []).append(data_file)
    groups: list[MergeGroup] = []
    for small in by_partition.values():
        bins = first_fit_decreasing(small, lambda f: f.file_size_in_bytes, target_file_bytes, lambda f: f.file_path)
        groups.extend(MergeGroup(tuple(b)) for b in bins if len(b) > 1)
    return groups


def spread(groups: list[S], tasks: int) -> list[list[S]]:
    """The groups dealt to at most ``tasks`` tasks, largest first to the least loaded (balanced bytes)."""
    assigned: list[list[S]] = [[] for _ in range(min(tasks, len(groups)))]
    loads = [0] * len(assigned)
    for group in sorted(groups, key=lambda g: -g.size):
        least = loads.index(min(loads))
        assigned[least].append(group)
        loads[least] += group.size
    return assigned


def _copied(data_file: DataFile) -> bool:
    """Whether a merge copies this file's row groups as they are (else it writes its rows again)."""
    row_groups = max(1, len(data_file.split_offsets or ()))
    return data_file.file_size_in_bytes / row_groups >= MIN_COPIED_ROW_GROUP_BYTES


def rewritten_bytes(group: MergeGroup) -> int:
    """The bytes of ``group``'s files that a merge writes again rather than copies."""
    return sum(f.file_size_in_bytes for f in group.files if not _copied(f))


def _read_rows(io: FileIO, files: Iterable[DataFile], schema: pa.Schema) -> Iterator[pa.RecordBatch]:
    for data_file in files:
        with io.new_input(data_file.file_path).open() as stream:
            for batch in pq.ParquetFile(stream).iter_batches(batch_size=_READ_BATCH_ROWS):
                yield pa.RecordBatch.from_arrays(batch.columns, schema=schema)


def _file_piece(io: FileIO, data_file: DataFile) -> Piece:
    return Piece(lambda: io.new_input(data_file.file_path).open(), data_file.file_size_in_bytes)


def _rewritten_piece(plan: TablePlan, io: FileIO, files: list[DataFile]) -> Piece:
    """The rows of ``files`` written again as one row group of an in-memory Parquet file."""
    rows = pa.Table.from_batches(list(_read_rows(io, files, plan.arrow_schema())), schema=plan.arrow_schema())
    sink = pa.BufferOutputStream()
    writer = parquet_writer(sink, plan, rows, compression_options(plan.properties))
    writer.write_table(rows, row_group_size=max(1, rows.num_rows))
    writer.close()
    content = sink.getvalue()
    return Piece(lambda: pa.BufferReader(content), content.size)


def _stitch_group(plan: TablePlan, io: FileIO, group: MergeGroup, name_prefix: str) -> DataFile:
    """Join ``group``'s files into one, copying the row groups of all but the tiny ones."""
    copied = [f for f in group.files if _copied(f)]
    tiny = [f for f in group.files if not _copied(f)]
    if len(tiny) > 1 and rewritten_bytes(group) > MAX_REWRITTEN_PIECE_BYTES:
        raise StitchRefused(f"{len(tiny)} small files hold more than {MAX_REWRITTEN_PIECE_BYTES} bytes to join in memory")
    pieces = [_file_piece(io, f) for f in copied]
    if len(tiny) == 1:
        pieces.append(_file_piece(io, tiny[0]))
    elif tiny:
        pieces.append(_rewritten_piece(plan, io, tiny))
    partition = group.files[0].partition
    stitched = plan_stitch(pieces)
    path = new_file_path(load_location_provider(plan.location, plan.properties), partition_path(plan, partition),
                         name_prefix, 1)
    try:
        write_new_file(io, path, stitched.write_to)
    except BaseException:
        _delete_quietly(io, path)
        raise
    return data_file_from_footer(plan, path, stitched.size, partition, stitched.metadata)


def _rewrite_group(plan: TablePlan, io: FileIO, group: MergeGroup, name_prefix: str,
                   target_file_bytes: int) -> list[DataFile]:
    """Write the rows of ``group`` again into new files; on failure delete what it wrote."""
    writer = RollingParquetWriter(plan, io, group.files[0].partition, name_prefix, target_file_bytes,
                                  compression_options(plan.properties))
    try:
        for batch in _read_rows(io, group.files, plan.arrow_schema()):
            writer.write(batch)
        return writer.finish()
    except BaseException:
        writer.abort()
        raise


def merge_group(plan: TablePlan, group: MergeGroup, name_prefix: str, target_file_bytes: int) -> list[DataFile]:
    """The files that replace ``group`` (one partition): stitched, or, where stitching is refused,
    written again. On failure nothing it wrote is left behind."""
    io = load_file_io(plan.io_properties, plan.location)
    try:
        return [_stitch_group(plan, io, group, name_prefix)]
    except StitchRefused as refused:
        log.info("writing the rows of %d staged files again instead of copying them: %s", len(group.files), refused)
    return _rewrite_group(plan, io, group, name_prefix, target_file_bytes)


def _delete_quietly(io: FileIO, path: str) -> None:
    try:
        io.delete(path)
    except Exception:  # never referenced: a leftover file for orphan cleanup, not a wrong table
        log.warning("could not delete staged file %s", path, exc_info=True)


@dataclass
class MergeOutcome:
    """What became of one group: the files written in its place, or why it stays unmerged."""

    originals: tuple[str, ...]
    files: list[DataFile]
    error: str | None = None


def merge_groups(plan: WritePlan, groups: Iterable[MergeGroup], name_prefix: str) -> list[MergeOutcome]:
    """Merge each group on its own: a group that fails keeps its originals, the others still merge."""
    outcomes = []
    for group in groups:
        originals = tuple(f.file_path for f in group.files)
        try:
            outcomes.append(MergeOutcome(originals, merge_group(plan.table, group, name_prefix, plan.target_file_bytes)))
        except Exception as error:  # reported to the driver, which keeps the originals
            outcomes.append(MergeOutcome(originals, [], f"{type(error).__name__}: {error}"))
    return outcomes


def _merge_function(plan: WritePlan) -> Callable[[Iterable[list[MergeGroup]]], Iterator[bytes]]:
    def merge(assignments: Iterable[list[MergeGroup]]) -> Iterator[bytes]:
        for groups in assignments:
            yield pickle.dumps(merge_groups(plan, groups, f"{plan.file_prefix}-m{task_id()}"))

    return merge


def merge_small_files(spark: SparkSession, plan: WritePlan, results: list[TaskResult]) -> list[TaskResult]:
    """``results`` with each partition's small staged data files merged (see the module docstring).

    The merged files come as one more result (no records of its own: the originals' results count
    them); the originals are deleted once the merged files are written. A group whose merge fails
    keeps its originals, which are committed as they are. A refused trigger (:attr:`Written.rejected`
    in spark_app/job/loop.py) is not merged: its files are discarded.
    """
    groups = plan_merges([s.data_file for r in results for s in r.files if s.table == "data"], plan.target_file_bytes)
    if not groups:
        return results
    if sum(g.size for g in groups) <= DRIVER_MERGE_BYTES and sum(map(rewritten_bytes, groups)) <= DRIVER_REWRITE_BYTES:
        outcomes = merge_groups(plan, groups, f"{plan.file_prefix}-mdriver-0")  # named as a task's: <task>-<attempt>
    else:
        assignments = spread(groups, spark.sparkContext.defaultParallelism)
        try:
            payloads = spark.sparkContext.parallelize(assignments, len(assignments)).mapPartitions(
                _merge_function(plan)).collect()
        except Exception:
            log.warning("merging %d group(s) of small staged files failed; committing them unmerged",
                        len(groups), exc_info=True)
            return results
        outcomes = [outcome for payload in payloads for outcome in pickle.loads(payload)]
    merged: set[str] = set()
    written: list[StagedFile] = []
    for outcome in outcomes:
        if outcome.error is not None:
            log.warning("could not merge staged files %s (committing them unmerged): %s",
                        ", ".join(outcome.originals), outcome.error)
            continue
        merged.update(outcome.originals)
        written += [StagedFile("data", f) for f in outcome.files]
    if not merged:
        return results
    kept = [replace(r, files=[s for s in r.files if s.data_file.file_path not in merged]) for r in results]
    io = load_file_io(plan.table.io_properties, plan.table.location)
    for path in merged:
        _delete_quietly(io, path)
    log.debug("merged %d small staged file(s) into %d", len(merged), len(written))
    return [*kept, TaskResult(files=written)]
