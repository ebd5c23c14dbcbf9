"""Where a trigger's keys live: the rows a keyed commit deletes by position, located on its head.

A keyed commit deletes the older row of every key it touches by position (docs/dataplane.md,
"Keyed tables"). Which rows those are is read from the snapshot the commit swaps against, never
from state kept elsewhere: so a foreign commit, expiry, compaction or a rollback can never leave it
stale, and a commit retried on a new head locates again on that head.

What is read is pruned, cheapest first: a data file whose key bounds in the manifest
(``lower_bounds``/``upper_bounds`` of the first key column) hold none of the touched keys is
skipped; of the rest, a row group is skipped when its statistics or its Bloom filter on the first
key column hold none (the summaries are cached by file path, :mod:`.file_keys`); only the key
columns of the remaining row groups are read. Bounds prune keys that arrive roughly in order
(database sequences, time-ordered ids); Bloom filters prune random keys (uuids) that a file does not
hold, so a trigger reads the row groups its keys are in, not the whole table.
"""

from __future__ import annotations

import bisect
import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.conversions import from_bytes
from pyiceberg.io import FileIO
from pyiceberg.manifest import DataFile, DataFileContent
from pyiceberg.table import Table
from pyiceberg.table.snapshots import Snapshot
from pyiceberg.types import IcebergType, IntegerType, LongType, PrimitiveType, StringType

from spark_app.commit.key_index.file_keys import FileKeys, FileKeysCache, RowGroupKeys, read_file_keys
from spark_app.commit.key_index.key_columns import KeyColumnCache
from spark_app.commit.key_index.reads import Candidate, read_candidates
from spark_app.commit.key_index.tasks import read_in_tasks
from spark_app.iceberg.internals import live_files
from spark_app.iceberg.parquet_hash import hashable, parquet_hashes
from spark_app.iceberg.position_deletes.deletion_vector import DeletionVector

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

DRIVER_LOCATE_ROWS = 2_000_000  # key rows a locate reads in the driver; more are read by Spark tasks
PRUNABLE_TYPES = (IntegerType, LongType, StringType)  # bounds decode to the values Arrow's to_pylist gives


@dataclass
class LocateStats:
    """What one locate read and skipped: the figures that show its cost follows the changes."""

    files: int = 0
    files_skipped_by_bounds: int = 0
    row_groups: int = 0
    row_groups_skipped_by_statistics: int = 0
    row_groups_skipped_by_bloom: int = 0
    rows_read: int = 0  # key rows read from data files, by the driver or by Spark tasks
    rows_read_in_tasks: int = 0
    rows_in_memory: int = 0  # key rows matched from the driver's key columns (:mod:`.key_columns`)
    in_spark_tasks: bool = False


@dataclass
class _FirstKey:
    """The touched values of the first key column: sorted, to test ranges, and hashed, to probe filters.

    The hashes are in the order of ``sorted``, so a row group's filter is probed only with the hashes of
    the values its statistics bound (a few of a large trigger's keys, when its keys are spread out)."""

    field_id: int
    field_type: IcebergType
    values: pa.ChunkedArray
    sorted: list[Any] = field(init=False)
    _unique: pa.Array = field(init=False)
    _hashes: dict[pa.DataType, np.ndarray | None] = field(init=False, default_factory=dict)

    def __post_init__(self) -> None:
        unique = pc.drop_null(pc.unique(self.values))
        if isinstance(unique, pa.ChunkedArray):
            unique = unique.combine_chunks()
        if self._prunable:  # Arrow's order of ints and UTF-8 strings is Python's, which bisect uses
            unique = unique.take(pc.sort_indices(unique))
        self._unique = unique
        self.sorted = unique.to_pylist() if self._prunable else []

    @property
    def _prunable(self) -> bool:
        return isinstance(self.field_type, PRUNABLE_TYPES)

    def _span(self, lower: Any, upper: Any) -> tuple[int, int]:
        """The slice of ``sorted`` in ``[lower, upper]`` (None: unbounded)."""
        start = 0 if lower is None else bisect.bisect_left(self.sorted, lower)
        end = len(self.sorted) if upper is None else bisect.bisect_right(self.sorted, upper)
        return start, max(start, end)

    def may_hold(self, lower: Any, upper: Any) -> bool:
        """Whether some touched value lies in ``[lower, upper]`` (None: unbounded)."""
        if not self._prunable:
            return True
        start, end = self._span(lower, upper)
        return start < end

    def file_may_hold(self, data_file: DataFile) -> bool:
        if not self._prunable:
            return True
        assert isinstance(self.field_type, PrimitiveType)
        lower = (data_file.lower_bounds or {}).get(self.field_id)
        upper = (data_file.upper_bounds or {}).get(self.field_id)
        return self.may_hold(None if lower is None else from_bytes(self.field_type, lower),
                             None if upper is None else from_bytes(self.field_type, upper))

    def bloom_may_hold(self, group: RowGroupKeys, file_type: pa.DataType | None) -> bool:
        """Whether ``group``'s Bloom filter may hold a touched value its statistics admit (True without a
        usable filter)."""
        if group.bloom is None or file_type is None:
            return True
        hashes = self._hashes_as(file_type)
        if hashes is None:
            return True
        if self._prunable and group.lower is not None:
            start, end = self._span(group.lower, group.upper)
            hashes = hashes[start:end]
        return bool(group.bloom.may_contain(hashes).any())

    def _hashes_as(self, file_type: pa.DataType) -> np.ndarray | None:
        """The touched values' Parquet hashes (in the order of ``sorted``) as a file of ``file_type`` stores
        them; None when they cannot all be written as that type (a key type promoted since the file was written)."""
        if file_type not in self._hashes:
            try:
                values = self._unique.cast(file_type) if hashable(file_type) else None
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                values = None
            self._hashes[file_type] = None if values is None else parquet_hashes(values)
        return self._hashes[file_type]


def locate_rows(table: Table, snapshot: Snapshot, keys: pa.Table, cache: FileKeysCache | None = None,
                stats: LocateStats | None = None, spark: Callable[[], SparkSession] | None = None,
                key_columns: KeyColumnCache | None = None) -> dict[str, DeletionVector]:
    """Positions of the rows whose key is one of ``keys`` (the key columns, by name) in each live data file of
    ``snapshot``; files holding none are left out. Rows already deleted may be among them (deleting one again
    is harmless: a reader applies deletes as a set). ``cache`` keeps file summaries between calls;
    ``key_columns`` keeps the key columns of row groups read (a one-column key) between calls, which are then
    matched in memory; with ``spark``, reads of more than ``DRIVER_LOCATE_ROWS`` key rows run as Spark tasks
    (:mod:`.tasks`), but for those the driver reads to keep while ``key_columns`` has room."""
    if keys.num_rows == 0:
        return {}
    cache = cache if cache is not None else FileKeysCache()
    stats = stats if stats is not None else LocateStats()
    unique_keys = keys.group_by(keys.column_names).aggregate([])
    if key_columns is not None and keys.num_columns > 1:
        key_columns = None  # several key columns are matched by a join of what is read
    if key_columns is not None:
        key_columns.begin()
    candidates = plan_reads(table, snapshot, keys, cache, stats)
    in_memory, to_read = _split_cached(candidates, key_columns) if key_columns is not None else ([], candidates)
    stats.rows_in_memory = sum(c.rows for c in in_memory)
    stats.rows_read = sum(c.rows for c in to_read)
    in_driver, in_tasks = to_read, list[Candidate]()
    if spark is not None and stats.rows_read > DRIVER_LOCATE_ROWS:
        in_driver, in_tasks = [], []
        room = key_columns.room() if key_columns is not None else 0
        for candidate in to_read:  # the driver reads what it will keep; the executors read the rest
            size = candidate.rows * key_columns.bytes_per_row if key_columns is not None else room + 1
            (in_driver if size <= room else in_tasks).append(candidate)
            room -= int(size) if size <= room else 0
    found = read_candidates(table.io, in_memory + in_driver, unique_keys, key_columns)
    if in_tasks:
        assert spark is not None
        stats.in_spark_tasks = True
        stats.rows_read_in_tasks = sum(c.rows for c in in_tasks)
        found += read_in_tasks(spark(), dict(table.io.properties), table.metadata.location, in_tasks, unique_keys)
    by_path: dict[str, list[np.ndarray]] = {}
    for path, positions in found:
        if positions.size:
            by_path.setdefault(path, []).append(positions)
    return {path: DeletionVector(np.sort(np.concatenate(parts)) if len(parts) > 1 else parts[0])
            for path, parts in by_path.items()}


def _split_cached(candidates: list[Candidate], key_columns: KeyColumnCache) -> tuple[list[Candidate], list[Candidate]]:
    """``candidates`` as the row groups ``key_columns`` holds and those to read."""
    in_memory: list[Candidate] = []
    to_read: list[Candidate] = []
    for candidate in candidates:
        held = [key_columns.claim((candidate.path, candidate.columns, index)) for index, _ in candidate.row_groups]
        for wanted, part in ((True, in_memory), (False, to_read)):
            groups = [(group, rows) for group, rows, h in zip(candidate.row_groups, candidate.group_rows, held, strict=True)
                      if h == wanted]
            if groups:
                part.append(Candidate(candidate.path, candidate.columns, tuple(g for g, _ in groups),
                                      sum(rows for _, rows in groups), tuple(rows for _, rows in groups)))
    return in_memory, to_read


def plan_reads(table: Table, snapshot: Snapshot, keys: pa.Table, cache: FileKeysCache,
               stats: LocateStats) -> list[Candidate]:
    """The row groups of ``snapshot``'s live data files that bounds, statistics and Bloom filters leave."""
    schema = table.schema()
    key_field_ids = tuple(schema.find_field(name).field_id for name in keys.column_names)
    first = schema.find_field(key_field_ids[0])
    first_key = _FirstKey(first.field_id, first.field_type, keys.column(0))
    candidates = []
    for live in live_files(table, snapshot):
        data_file = live.data_file
        if data_file.content != DataFileContent.DATA:
            continue
        stats.files += 1
        if not first_key.file_may_hold(data_file):
            stats.files_skipped_by_bounds += 1
            continue
        summary = cache.get(data_file.file_path, key_field_ids,
                            functools.partial(_read_summary, table.io, data_file, key_field_ids))
        groups = _candidate_row_groups(summary, first_key, stats)
        if groups:
            group_rows = tuple(summary.row_groups[index].rows for index, _ in groups)
            candidates.append(Candidate(data_file.file_path, summary.columns, tuple(groups), sum(group_rows), group_rows))
    return candidates


def _read_summary(io: FileIO, data_file: DataFile, key_field_ids: tuple[int, ...]) -> FileKeys:
    with io.new_input(data_file.file_path).open() as stream:
        return read_file_keys(stream, key_field_ids)


def _candidate_row_groups(summary: FileKeys, first_key: _FirstKey, stats: LocateStats) -> list[tuple[int, int]]:
    """``(row group, its first row's position)`` of the row groups that may hold a touched key."""
    candidates = []
    offset = 0
    for index, group in enumerate(summary.row_groups):
        stats.row_groups += 1
        if group.lower is not None and not first_key.may_hold(group.lower, group.upper):
            stats.row_groups_skipped_by_statistics += 1
        elif not first_key.bloom_may_hold(group, summary.first_type):
            stats.row_groups_skipped_by_bloom += 1
        else:
            candidates.append((index, offset))
        offset += group.rows
    return candidates
