"""Where a trigger's keys live: the key index, derived from the table itself at commit time.

A keyed commit deletes the older row of every key it touches by position (docs/dataplane.md,
"Keyed tables"). Which rows those are is read from the snapshot the commit swaps against, never
from state kept elsewhere: so a foreign commit, expiry, compaction or a rollback can never leave it
stale, and a commit retried on a new head locates again on that head.

What is read is pruned with what Iceberg and Parquet already record: a data file whose key-column
bounds (manifest ``lower_bounds``/``upper_bounds``) hold none of the touched keys is skipped, and so
is a row group whose Parquet statistics hold none; of the rest only the key columns are read. Bounds
prune well where keys arrive roughly in order (database sequences, time-ordered ids) and little for
random keys (uuids), where every file's key column is read once per trigger.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
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
from spark_app.position_deletes.deletion_vector import DeletionVector

POSITION_COLUMN = "__isync_position"
_PRUNABLE = (IntegerType, LongType, StringType)  # bounds decode to the values Arrow's to_pylist gives


class _FirstKey:
    """The touched values of the first key column, sorted, to test a [lower, upper] range against."""

    def __init__(self, field_id: int, field_type: IcebergType, values: pa.ChunkedArray):
        self.field_id = field_id
        self.field_type: PrimitiveType | None = field_type if isinstance(field_type, _PRUNABLE) else None
        self.sorted: list[Any] = sorted(pc.unique(values).to_pylist()) if self.field_type else []

    def may_hold(self, lower: Any, upper: Any) -> bool:
        """Whether some touched value lies in ``[lower, upper]`` (None: unbounded)."""
        if self.field_type is None:
            return True
        start = 0 if lower is None else bisect.bisect_left(self.sorted, lower)
        return start < len(self.sorted) and (upper is None or self.sorted[start] <= upper)

    def file_may_hold(self, data_file: DataFile) -> bool:
        if self.field_type is None:
            return True
        lower = (data_file.lower_bounds or {}).get(self.field_id)
        upper = (data_file.upper_bounds or {}).get(self.field_id)
        return self.may_hold(None if lower is None else from_bytes(self.field_type, lower),
                             None if upper is None else from_bytes(self.field_type, upper))


def locate_rows(table: Table, snapshot: Snapshot, keys: pa.Table) -> dict[str, DeletionVector]:
    """Positions of the rows whose key is one of ``keys`` (the key columns, by name) in each live data file of
    ``snapshot``; files holding none are left out. Rows already deleted may be among them (deleting one again
    is harmless: a reader applies deletes as a set)."""
    if keys.num_rows == 0:
        return {}
    schema = table.schema()
    first = schema.find_field(keys.column_names[0])
    first_key = _FirstKey(first.field_id, first.field_type, keys.column(0))
    unique_keys = keys.group_by(keys.column_names).aggregate([])
    located: dict[str, DeletionVector] = {}
    for live in live_files(table, snapshot):
        data_file = live.data_file
        if data_file.content != DataFileContent.DATA or not first_key.file_may_hold(data_file):
            continue
        positions = _matching_positions(table.io, data_file.file_path, unique_keys, first_key)
        if positions.size:
            located[data_file.file_path] = DeletionVector(positions)
    return located


def _matching_positions(io: FileIO, path: str, keys: pa.Table, first_key: _FirstKey) -> np.ndarray:
    """Row positions in the Parquet file at ``path`` whose key columns equal a row of ``keys``."""
    names = keys.column_names
    matches: list[np.ndarray] = []
    with io.new_input(path).open() as stream:
        parquet = pq.ParquetFile(stream)
        first_column = parquet.schema_arrow.get_field_index(names[0])
        offset = 0
        for group in range(parquet.metadata.num_row_groups):
            rows = parquet.metadata.row_group(group).num_rows
            statistics = parquet.metadata.row_group(group).column(first_column).statistics
            if statistics is None or not statistics.has_min_max or first_key.may_hold(statistics.min, statistics.max):
                found = _positions_in(parquet.read_row_group(group, columns=list(names)), keys)
                if found.size:
                    matches.append(found + offset)
            offset += rows
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
