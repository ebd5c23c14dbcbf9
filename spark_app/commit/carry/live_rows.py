"""The live rows of located keys: positions the snapshot's deletes leave, and their values.

A key index locate (:func:`spark_app.commit.key_index.locate.locate_rows`) finds every row holding a touched
key, deleted or not. The rows still live are those no position delete or deletion vector of the
snapshot deletes; should a key have several (rows another writer deleted by equality delete), the
row of the newest data (the highest data sequence number) is the key's live row. Reading them costs
the rows the keys are in, not the files: only the row groups holding a live position are read, and
only the key and carried columns; with more than ``DRIVER_READ_ROWS`` positions the reads run as
Spark tasks (:func:`spark_app.commit.key_index.tasks.run_in_tasks`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyiceberg.conversions import from_bytes
from pyiceberg.io import FileIO, load_file_io
from pyiceberg.manifest import DataFileContent
from pyiceberg.table import Table
from pyiceberg.table.snapshots import Snapshot
from pyiceberg.types import StringType

from spark_app.commit.key_index.tasks import run_in_tasks
from spark_app.decoding.changes import first_of_each_key
from spark_app.iceberg.applied_deletes import deleted_positions
from spark_app.iceberg.internals import LiveFile, is_deletion_vector, live_files, referenced_data_file
from spark_app.iceberg.position_deletes.deletion_vector import DeletionVector

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

DRIVER_READ_ROWS = 100_000  # live rows read in the driver; more are read by Spark tasks
SEQUENCE_COLUMN = "__isync_sequence"
_FIELD_ID = b"PARQUET:field_id"
_FILE_PATH_FIELD_ID = 2147483546  # a position delete file's file_path column (Iceberg's reserved id)


@dataclass(frozen=True)
class LiveRows:
    """Positions in one data file of live rows holding touched keys (picklable, for tasks)."""

    path: str
    positions: tuple[int, ...]
    sequence_number: int

    @property
    def size(self) -> int:  # what spreading reads over tasks balances
        return len(self.positions)


def live_positions(table: Table, snapshot: Snapshot, located: Mapping[str, DeletionVector]) -> list[LiveRows]:
    """``located`` (data file path -> positions of touched keys' rows) without the rows ``snapshot``'s position
    deletes and deletion vectors delete."""
    if not located:
        return []
    live = live_files(table, snapshot)
    data = [f for f in live if f.data_file.content == DataFileContent.DATA and f.path in located]
    deletes = [f for f in live if f.data_file.content == DataFileContent.POSITION_DELETES and _may_name(f, located)]
    deleted = deleted_positions(table.io, deletes, data) if deletes else {}
    rows = []
    for data_file in data:
        positions = located[data_file.path].to_numpy()
        if data_file.path in deleted:
            positions = positions[~np.isin(positions, deleted[data_file.path])]
        if positions.size:
            rows.append(LiveRows(data_file.path, tuple(int(p) for p in positions), data_file.data_sequence_number))
    return rows


def _may_name(delete: LiveFile, paths: Mapping[str, DeletionVector]) -> bool:
    """Whether a position delete file or DV may delete rows of one of ``paths`` (by its named file or path bounds)."""
    named = referenced_data_file(delete.data_file)
    if named is not None or is_deletion_vector(delete.data_file):
        return named in paths
    lower = (delete.data_file.lower_bounds or {}).get(_FILE_PATH_FIELD_ID)
    upper = (delete.data_file.upper_bounds or {}).get(_FILE_PATH_FIELD_ID)
    low = None if lower is None else from_bytes(StringType(), lower)
    high = None if upper is None else from_bytes(StringType(), upper)
    return any((low is None or low <= path) and (high is None or path <= high) for path in paths)


def read_live_rows(table: Table, rows: Sequence[LiveRows], key: Sequence[str], carried: Sequence[str],
                   spark: Callable[[], SparkSession] | None = None) -> pa.Table:
    """The ``key`` and ``carried`` columns (table names) of each key's live row among ``rows``: one row per key."""
    schema = table.schema()
    columns = [*key, *carried]
    field_ids = tuple(schema.find_field(name).field_id for name in columns)
    target = pa.schema([pa.field(name, schema.as_arrow().field(name).type) for name in columns]
                       + [pa.field(SEQUENCE_COLUMN, pa.int64())])
    read = functools.partial(_read_files, dict(table.io.properties), table.metadata.location, field_ids, target)
    if spark is not None and sum(r.size for r in rows) > DRIVER_READ_ROWS:
        parts = run_in_tasks(spark(), rows, read)
    else:
        parts = read(list(rows))
    found = pa.concat_tables(parts) if parts else target.empty_table()
    return _newest_per_key(found, list(key))


def _read_files(io_properties: dict[str, str], location: str, field_ids: tuple[int, ...], target: pa.Schema,
                rows: list[LiveRows]) -> list[pa.Table]:
    io = load_file_io(io_properties, location)
    return [_read_file(io, live, field_ids, target) for live in rows]


def _read_file(io: FileIO, live: LiveRows, field_ids: tuple[int, ...], target: pa.Schema) -> pa.Table:
    """The columns of ``field_ids`` (as ``target`` names and types them) at ``live``'s positions: only the row
    groups holding one are read; a column the file does not have (added since) is null."""
    with io.new_input(live.path).open() as stream:
        parquet = pq.ParquetFile(stream)
        names = {int(f.metadata[_FIELD_ID]): f.name for f in parquet.schema_arrow
                 if f.metadata and _FIELD_ID in f.metadata}
        present = [names[i] for i in field_ids if i in names]
        positions = np.asarray(live.positions, dtype=np.int64)
        starts = np.cumsum([0] + [parquet.metadata.row_group(i).num_rows for i in range(parquet.num_row_groups)])
        groups = np.unique(np.searchsorted(starts, positions, side="right") - 1)
        read = pa.concat_tables([parquet.read_row_group(int(g), columns=present) for g in groups])
        offsets = np.concatenate([np.arange(starts[g], starts[g + 1]) for g in groups])
        picked = read.take(pa.array(np.searchsorted(offsets, positions)))
    arrays = [picked.column(names[i]).cast(target.field(n).type) if i in names else pa.nulls(len(positions),
              target.field(n).type) for i, n in zip(field_ids, target.names, strict=False)]
    arrays.append(pa.array(np.full(len(positions), live.sequence_number, dtype=np.int64)))
    return pa.Table.from_arrays(arrays, schema=target)


def _newest_per_key(found: pa.Table, key: list[str]) -> pa.Table:
    """One row per key: the one of the highest data sequence number."""
    if found.num_rows == 0:
        return found.drop_columns([SEQUENCE_COLUMN])
    ordered = found.take(pc.sort_indices(found, sort_keys=[(n, "ascending") for n in key]
                                         + [(SEQUENCE_COLUMN, "descending")]))
    return ordered.filter(pa.array(first_of_each_key(ordered, key))).drop_columns([SEQUENCE_COLUMN])
