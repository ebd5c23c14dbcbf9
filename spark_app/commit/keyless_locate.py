"""Where a keyless trigger's removed rows live: exactly ``count`` live copies of each, located on the head.

A commit to a table without a primary key removes, per distinct row, as many live rows equal to it as the
trigger's changes net (:mod:`spark_app.staging.keyless_collapse`), by position, on the snapshot it swaps against (a retried commit locates
again on its new head). Rows are compared on every column, nulls equal to nulls: a digest of the row
(:func:`spark_app.staging.pipeline.key_hashes`) picks candidates, their exact values decide (:mod:`spark_app.decoding.row_identity`). What is read is
pruned by one integer or string column whose removed values are all non-null (file bounds, row-group statistics,
Bloom filters: :func:`spark_app.commit.key_index.locate.plan_reads`); without one every data file is read.

Rows the snapshot's position deletes or deletion vectors already delete are not live and never chosen (deleting a
deleted copy again would leave a live duplicate). Of a row's live copies the first ``count`` in (file path,
position) order go; when the table holds fewer than asked, the shortfall is returned for the caller to report.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from pyiceberg.io import load_file_io
from pyiceberg.io.pyarrow import schema_to_pyarrow
from pyiceberg.manifest import DataFileContent
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.table.snapshots import Snapshot

from spark_app.commit.carry.live_rows import live_positions
from spark_app.commit.key_index.file_keys import FileKeysCache
from spark_app.commit.key_index.locate import DRIVER_LOCATE_ROWS, PRUNABLE_TYPES, LocateStats, plan_reads
from spark_app.commit.key_index.tasks import run_in_tasks
from spark_app.decoding.row_identity import COUNT_COLUMN, row_identities
from spark_app.iceberg.internals import live_files
from spark_app.iceberg.position_deletes.deletion_vector import DeletionVector
from spark_app.staging.pipeline import key_hashes

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

_FIELD_ID = b"PARQUET:field_id"
Matches = tuple[str, np.ndarray, np.ndarray]  # (data file path, positions, the removed row each matches)


@dataclass(frozen=True)
class Scan:
    """A data file's row groups to read whole: ``(row group, its first row's position)``; None: every one."""

    path: str
    row_groups: tuple[tuple[int, int], ...] | None
    rows: int

    @property
    def size(self) -> int:  # what spreading scans over tasks balances
        return self.rows


@dataclass(frozen=True)
class LocatedCopies:
    """The positions to delete per data file, and the copies asked for that no live row matched."""

    positions: dict[str, DeletionVector]
    unmatched: int


def locate_copies(table: Table, snapshot: Snapshot, removed: pa.Table, cache: FileKeysCache | None = None,
                  stats: LocateStats | None = None,
                  spark: Callable[[], SparkSession] | None = None) -> LocatedCopies:
    """Positions of ``removed[COUNT_COLUMN]`` live rows equal to each row of ``removed`` (distinct rows of the
    table's columns) on ``snapshot``; see the module. With ``spark``, scans of more than ``DRIVER_LOCATE_ROWS``
    rows run as Spark tasks."""
    counts = removed.column(COUNT_COLUMN).to_pylist() if removed.num_rows else []
    if not counts:
        return LocatedCopies({}, 0)
    schema = table.schema()
    target = schema_to_pyarrow(schema, include_field_ids=False)
    wanted = _conform(removed, target)
    stats = stats if stats is not None else LocateStats()
    scans = _plan(table, snapshot, wanted, cache if cache is not None else FileKeysCache(), stats)
    read = functools.partial(_read_scans, dict(table.io.properties), table.metadata.location,
                             tuple(field.field_id for field in schema.fields), target, wanted)
    stats.rows_read = sum(scan.rows for scan in scans)
    if spark is not None and stats.rows_read > DRIVER_LOCATE_ROWS:
        stats.in_spark_tasks, stats.rows_read_in_tasks = True, stats.rows_read
        found = run_in_tasks(spark(), scans, read)
    else:
        found = read(scans)
    found = [match for match in found if match[1].size]
    live = {rows.path: set(rows.positions) for rows in live_positions(
        table, snapshot, {path: DeletionVector(positions) for path, positions, _ in found})}
    left = list(counts)
    chosen: dict[str, list[int]] = {}
    for path, positions, rows in sorted(found, key=lambda match: match[0]):
        alive = live.get(path, set())
        order = np.argsort(positions, kind="stable")
        for position, row in zip(positions[order].tolist(), rows[order].tolist(), strict=True):
            if left[row] and position in alive:
                chosen.setdefault(path, []).append(position)
                left[row] -= 1
    return LocatedCopies({path: DeletionVector(np.array(positions, dtype=np.int64))
                          for path, positions in chosen.items()}, sum(left))


def _conform(removed: pa.Table, target: pa.Schema) -> pa.Table:
    """The removed rows as the table's columns (its order and types; a column they lack is null)."""
    arrays = [removed.column(field.name).cast(field.type) if field.name in removed.column_names
              else pa.nulls(removed.num_rows, field.type) for field in target]
    return pa.Table.from_arrays(arrays, schema=target)


def _prune_column(schema: Schema, wanted: pa.Table) -> str | None:
    """An integer or string column whose wanted values are all non-null (a file without it, written before it was
    added, is read with nulls there: it holds none of them); None when there is none."""
    for field in schema.fields:
        if isinstance(field.field_type, PRUNABLE_TYPES) and wanted.column(field.name).null_count == 0:
            return field.name
    return None


def _plan(table: Table, snapshot: Snapshot, wanted: pa.Table, cache: FileKeysCache, stats: LocateStats) -> list[Scan]:
    """The row groups of ``snapshot``'s live data files that may hold a wanted row."""
    prune = _prune_column(table.schema(), wanted)
    if prune is not None:
        return [Scan(candidate.path, candidate.row_groups, candidate.rows)
                for candidate in plan_reads(table, snapshot, wanted.select([prune]), cache, stats)]
    data = [f.data_file for f in live_files(table, snapshot) if f.data_file.content == DataFileContent.DATA]
    stats.files += len(data)
    return [Scan(data_file.file_path, None, data_file.record_count) for data_file in data]


def _read_scans(io_properties: dict[str, str], location: str, field_ids: tuple[int, ...], target: pa.Schema,
                wanted: pa.Table, scans: Sequence[Scan]) -> list[Matches]:
    """Per scan, the positions of its rows equal to a wanted row, and which one each equals."""
    io = load_file_io(io_properties, location)
    names = list(target.names)
    digests = key_hashes(wanted, tuple(names))
    index = {identity: row for row, identity in enumerate(row_identities(wanted, names))}
    found = []
    for scan in scans:
        positions: list[int] = []
        rows: list[int] = []
        with io.new_input(scan.path).open() as stream:
            parquet = pq.ParquetFile(stream)
            by_id = {int(f.metadata[_FIELD_ID]): f.name for f in parquet.schema_arrow
                     if f.metadata and _FIELD_ID in f.metadata}
            present = [by_id[field_id] for field_id in field_ids if field_id in by_id]
            for group, offset in scan.row_groups if scan.row_groups is not None else _every_group(parquet):
                read = parquet.read_row_group(group, columns=present)
                table = pa.Table.from_arrays(
                    [read.column(by_id[field_id]).cast(field.type) if field_id in by_id
                     else pa.nulls(read.num_rows, field.type) for field_id, field in zip(field_ids, target, strict=True)],
                    schema=target)
                candidates = np.flatnonzero(np.isin(key_hashes(table, tuple(names)), digests))
                if not candidates.size:
                    continue
                for position, identity in zip(candidates.tolist(), row_identities(
                        table.take(pa.array(candidates)), names), strict=True):
                    if (row := index.get(identity)) is not None:
                        positions.append(offset + position)
                        rows.append(row)
        found.append((scan.path, np.array(positions, dtype=np.int64), np.array(rows, dtype=np.int64)))
    return found


def _every_group(parquet: pq.ParquetFile) -> list[tuple[int, int]]:
    """``(row group, its first row's position)`` of every row group of ``parquet``."""
    starts = np.cumsum([0] + [parquet.metadata.row_group(i).num_rows for i in range(parquet.num_row_groups)])
    return [(group, int(starts[group])) for group in range(parquet.num_row_groups)]
