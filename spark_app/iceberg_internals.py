"""The pyiceberg internals the sink relies on, all in one place (written against pyiceberg 0.12).

pyiceberg has no public API for these: committing a transaction with requirements of our own and
without its retry-and-rebase loop, the id of the snapshot a transaction will add, converting a
partition value to its stored form, column statistics from a Parquet footer, and data locations for
a partition path. The committer and the writer call only this module for them, and
tests/unit/test_iceberg_internals.py fails loudly, naming the call, when an upgrade changes one.
"""

from __future__ import annotations

from typing import Any

import pyarrow.parquet as pq
from pyiceberg.catalog import Catalog
from pyiceberg.io.pyarrow import (
    DataFileStatistics,
    compute_statistics_plan,
    data_file_statistics_from_parquet_metadata,
    parquet_path_to_id_mapping,
)
from pyiceberg.partitioning import _to_partition_representation
from pyiceberg.schema import Schema
from pyiceberg.table import CommitTableResponse, Table, Transaction
from pyiceberg.table.locations import LocationProvider
from pyiceberg.table.snapshots import Snapshot
from pyiceberg.table.update import AddSnapshotUpdate, TableRequirement
from pyiceberg.table.update.snapshot import _FastAppendFiles
from pyiceberg.types import IcebergType


def commit_transaction(catalog: Catalog, table: Table, transaction: Transaction,
                       *extra_requirements: TableRequirement) -> CommitTableResponse:
    """Send ``transaction``'s updates once, with its requirements plus ``extra_requirements``.

    Unlike ``Transaction.commit_transaction`` nothing is retried or rebased: a conflict raises
    ``CommitFailedException`` for the caller to re-check and rebuild.
    """
    requirements = (*transaction._requirements, *extra_requirements)
    return catalog.commit_table(table, requirements, transaction._updates)


def appended_snapshot_id(append: _FastAppendFiles) -> int:
    """The id of the snapshot a fast append will add (chosen by the client, before the commit)."""
    return append.snapshot_id


def added_snapshot(transaction: Transaction, snapshot_id: int) -> Snapshot:
    """The snapshot a transaction adds (with the sequence number and timestamp it will land with)."""
    return next(u.snapshot for u in transaction._updates
                if isinstance(u, AddSnapshotUpdate) and u.snapshot.snapshot_id == snapshot_id)


def partition_value(source_type: IcebergType, value: Any) -> Any:
    """A transformed partition value in the form a DataFile's partition record stores it."""
    return _to_partition_representation(source_type, value)


def footer_statistics(schema: Schema, table_properties: dict[str, str], metadata: pq.FileMetaData) -> DataFileStatistics:
    """Iceberg column statistics (counts, bounds, sizes) of a Parquet file, from its footer."""
    return data_file_statistics_from_parquet_metadata(
        parquet_metadata=metadata,
        stats_columns=compute_statistics_plan(schema, table_properties),
        parquet_column_mapping=parquet_path_to_id_mapping(schema),
    )


class _PartitionPath:
    """Duck-typed stand-in for pyiceberg's PartitionKey: location providers only call ``to_path``."""

    def __init__(self, path: str):
        self._path = path

    def to_path(self) -> str:
        return self._path


def new_data_location(provider: LocationProvider, file_name: str, partition_path: str | None) -> str:
    """Where ``provider`` puts a new data file of the partition at ``partition_path`` (None: unpartitioned)."""
    key = _PartitionPath(partition_path) if partition_path else None
    return provider.new_data_location(file_name, key)  # type: ignore[arg-type]
