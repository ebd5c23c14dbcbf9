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
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyiceberg.conversions import from_bytes
from pyiceberg.io import FileIO
from pyiceberg.manifest import DataFile, DataFileContent
from pyiceberg.table import Table
from pyiceberg.table.snapshots import Snapshot
from pyiceberg.types import IcebergType, IntegerType, LongType, PrimitiveType, StringType

from spark_app.iceberg_internals import live_files
from spark_app.key_index.file_keys import FileKeys, FileKeysCache, RowGroupKeys, read_file_keys
from spark_app.key_index.key_hash import hashable, parquet_hashes
from spark_app.position_deletes.deletion_vector import DeletionVector

POSITION_COLUMN = "__isync_position"
_PRUNABLE = (IntegerType, LongType, StringType)  # bounds decode to the values Arrow's to_pylist gives


@dataclass
class LocateStats:
    """What one locate read and skipped: the figures that show its cost follows the changes."""

    files: int = 0
    files_skipped_by_bounds: int = 0
    row_groups: int = 0
    row_groups_skipped_by_statistics: int = 0
    row_groups_skipped_by_bloom: int = 0
    rows_read: int = 0


@dataclass
class _FirstKey:
    """The touched values of the first key column: sorted, to test ranges, and hashed, to probe filters."""

    field_id: int
    field_type: IcebergType
    values: pa.ChunkedArray
    sorted: list[Any] = field(init=False)
    _hashes: dict[pa.DataType, np.ndarray | None] = field(init=False, default_factory=dict)

    def __post_init__(self) -> None:
        self.sorted = sorted(pc.unique(self.values).to_pylist()) if self._prunable else []

    @property
    def _prunable(self) -> bool:
        return isinstance(self.field_type, _PRUNABLE)

    def may_hold(self, lower: Any, upper: Any) -> bool:
        """Whether some touched value lies in ``[lower, upper]`` (None: unbounded)."""
        if not self._prunable:
            return True
        start = 0 if lower is None else bisect.bisect_left(self.sorted, lower)
        return start < len(self.sorted) and (upper is None or self.sorted[start] <= upper)

    def file_may_hold(self, data_file: DataFile) -> bool:
        if not self._prunable:
            return True
        assert isinstance(self.field_type, PrimitiveType)
        lower = (data_file.lower_bounds or {}).get(self.field_id)
        upper = (data_file.upper_bounds or {}).get(self.field_id)
        return self.may_hold(None if lower is None else from_bytes(self.field_type, lower),
                             None if upper is None else from_bytes(self.field_type, upper))

    def bloom_may_hold(self, group: RowGroupKeys, file_type: pa.DataType | None) -> bool:
        """Whether ``group``'s Bloom filter may hold a touched value (True without a usable filter)."""
        if group.bloom is None or file_type is None:
            return True
        hashes = self._hashes_as(file_type)
        return hashes is None or bool(group.bloom.may_contain(hashes).any())

    def _hashes_as(self, file_type: pa.DataType) -> np.ndarray | None:
        """The touched values' Parquet hashes as a file of ``file_type`` stores them; None when they cannot
        all be written as that type (a key type promoted since the file was written)."""
        if file_type not in self._hashes:
            try:
                values = pc.unique(self.values).cast(file_type) if hashable(file_type) else None
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                values = None
            self._hashes[file_type] = None if values is None else parquet_hashes(values)
        return self._hashes[file_type]


def locate_rows(table: Table, snapshot: Snapshot, keys: pa.Table, cache: FileKeysCache | None = None,
                stats: LocateStats | None = None) -> dict[str, DeletionVector]:
    """Positions of the rows whose key is one of ``keys`` (the key columns, by name) in each live data file of
    ``snapshot``; files holding none are left out. Rows already deleted may be among them (deleting one again
    is harmless: a reader applies deletes as a set). ``cache`` keeps file summaries between calls."""
    if keys.num_rows == 0:
        return {}
    cache = cache if cache is not None else FileKeysCache()
    stats = stats if stats is not None else LocateStats()
    schema = table.schema()
    key_field_ids = tuple(schema.find_field(name).field_id for name in keys.column_names)
    first = schema.find_field(key_field_ids[0])
    first_key = _FirstKey(first.field_id, first.field_type, keys.column(0))
    unique_keys = keys.group_by(keys.column_names).aggregate([])
    located: dict[str, DeletionVector] = {}
    for live in live_files(table, snapshot):
        data_file = live.data_file
        if data_file.content != DataFileContent.DATA:
            continue
        stats.files += 1
        if not first_key.file_may_hold(data_file):
            stats.files_skipped_by_bounds += 1
            continue
        summary = cache.get(data_file.file_path, key_field_ids, functools.partial(_read_summary, table.io, data_file, key_field_ids))
        groups = _candidate_row_groups(summary, first_key, stats)
        positions = _matching_positions(table.io, data_file.file_path, summary, groups, unique_keys, stats)
        if positions.size:
            located[data_file.file_path] = DeletionVector(positions)
    return located


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


def _matching_positions(io: FileIO, path: str, summary: FileKeys, groups: list[tuple[int, int]], keys: pa.Table,
                        stats: LocateStats) -> np.ndarray:
    """Row positions, in the file at ``path``, of the candidate ``groups``' rows whose key is a row of ``keys``."""
    if not groups:
        return np.empty(0, dtype=np.int64)
    matches: list[np.ndarray] = []
    with io.new_input(path).open() as stream:
        parquet = pq.ParquetFile(stream)
        for index, offset in groups:
            rows = parquet.read_row_group(index, columns=list(summary.columns)).select(list(summary.columns))
            stats.rows_read += rows.num_rows
            found = _positions_in(rows.rename_columns(list(keys.column_names)), keys)
            if found.size:
                matches.append(found + offset)
    return np.concatenate(matches) if matches else np.empty(0, dtype=np.int64)


def _positions_in(rows: pa.Table, keys: pa.Table) -> np.ndarray:
    """Positions within ``rows`` of the rows whose key is in ``keys`` (both with the same key columns)."""
    conformed = _cast_like(keys, rows.schema)
    if keys.num_columns == 1:
        mask = pc.is_in(rows.column(0), value_set=conformed.column(0))
        return np.flatnonzero(mask.to_numpy(zero_copy_only=False)).astype(np.int64)
    numbered = rows.append_column(POSITION_COLUMN, pa.array(np.arange(rows.num_rows, dtype=np.int64)))
    joined = numbered.join(conformed, keys=list(keys.column_names), join_type="left semi")
    return np.sort(joined.column(POSITION_COLUMN).to_numpy())


def _cast_like(keys: pa.Table, schema: pa.Schema) -> pa.Table:
    columns: Sequence[pa.ChunkedArray] = [
        keys.column(name) if keys.column(name).type == schema.field(name).type
        else pc.cast(keys.column(name), schema.field(name).type) for name in keys.column_names
    ]
    return pa.Table.from_arrays(list(columns), names=keys.column_names)
