"""The pyiceberg internals behind spark_app/iceberg_internals.py still exist and still behave as the
sink needs. A failure here after a pyiceberg upgrade names the call to adapt in that one module."""

from __future__ import annotations

import inspect
from datetime import date
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.exceptions import CommitFailedException
from pyiceberg.schema import Schema
from pyiceberg.table import Transaction
from pyiceberg.table.locations import load_location_provider
from pyiceberg.table.update import AssertRefSnapshotId, AssertTableUUID, SetPropertiesUpdate
from pyiceberg.types import DateType, LongType, NestedField, StringType

from spark_app import iceberg_internals

SCHEMA = Schema(NestedField(1, "id", LongType(), required=True), NestedField(2, "who", StringType()))


def catalog(directory: Path) -> SqlCatalog:
    result = SqlCatalog("t", uri=f"sqlite:///{directory}/c.db", warehouse=(directory / "w").as_uri())
    result.create_namespace("ns")
    return result


def test_transactions_expose_their_requirements_and_updates(tmp_path: Path) -> None:
    table = catalog(tmp_path).create_table("ns.t", SCHEMA)
    transaction = Transaction(table)
    transaction.set_properties({"k": "v"})
    assert isinstance(transaction._requirements, tuple) and isinstance(transaction._updates, tuple), \
        "Transaction._requirements/_updates changed: adapt iceberg_internals.commit_transaction"
    assert [type(u) for u in transaction._updates] == [SetPropertiesUpdate]
    assert all(isinstance(r, AssertTableUUID | AssertRefSnapshotId) for r in transaction._requirements)


def test_commit_transaction_commits_once_and_never_rebases(tmp_path: Path) -> None:
    owner = catalog(tmp_path)
    table = owner.create_table("ns.t", SCHEMA)
    table.append(pa.table({"id": [1], "who": ["a"]}, schema=SCHEMA.as_arrow()))
    stale = owner.load_table("ns.t")
    owner.load_table("ns.t").append(pa.table({"id": [2], "who": ["b"]}, schema=SCHEMA.as_arrow()))
    transaction = Transaction(stale)
    with transaction.update_snapshot().fast_append() as append:
        snapshot_id = iceberg_internals.appended_snapshot_id(append)
    assert isinstance(snapshot_id, int) and stale.metadata.snapshot_by_id(snapshot_id) is None
    head = stale.metadata.current_snapshot_id
    with pytest.raises(CommitFailedException):
        iceberg_internals.commit_transaction(owner, stale, transaction, AssertRefSnapshotId(ref="main", snapshot_id=head))
    fresh = owner.load_table("ns.t")
    transaction = Transaction(fresh)
    with transaction.update_snapshot(snapshot_properties={"p": "1"}).fast_append() as append:
        snapshot_id = iceberg_internals.appended_snapshot_id(append)
    added = iceberg_internals.added_snapshot(transaction, snapshot_id)
    response = iceberg_internals.commit_transaction(owner, fresh, transaction, AssertTableUUID(uuid=fresh.metadata.table_uuid))
    landed = response.metadata.snapshot_by_id(snapshot_id)
    assert landed is not None and landed.summary is not None and landed.summary["p"] == "1"
    assert (landed.sequence_number, landed.timestamp_ms) == (added.sequence_number, added.timestamp_ms) == (3, added.timestamp_ms)
    assert response.metadata.current_snapshot_id == snapshot_id


def test_catalog_commit_table_signature() -> None:
    parameters = list(inspect.signature(SqlCatalog.commit_table).parameters)
    assert parameters == ["self", "table", "requirements", "updates"], \
        f"Catalog.commit_table is now {parameters}: adapt iceberg_internals.commit_transaction"


def test_partition_values_are_stored_in_their_physical_form() -> None:
    assert iceberg_internals.partition_value(DateType(), date(1970, 1, 11)) == 10
    assert iceberg_internals.partition_value(LongType(), 7) == 7


def test_footer_statistics_map_parquet_columns_to_field_ids(tmp_path: Path) -> None:
    path = tmp_path / "f.parquet"
    pq.write_table(pa.table({"id": [3, 1, 2], "who": ["x", None, "y"]},
                            schema=pa.schema([pa.field("id", pa.int64(), False, {b"PARQUET:field_id": b"1"}),
                                              pa.field("who", pa.string(), True, {b"PARQUET:field_id": b"2"})])), path)
    statistics = iceberg_internals.footer_statistics(SCHEMA, {}, pq.ParquetFile(path).metadata)
    serialized = statistics.to_serialized_dict()
    assert serialized["record_count"] == 3
    assert serialized["null_value_counts"] == {1: 0, 2: 1}
    assert serialized["lower_bounds"][1] == (1).to_bytes(8, "little")
    assert serialized["upper_bounds"][1] == (3).to_bytes(8, "little")


def test_data_locations_take_a_partition_path(tmp_path: Path) -> None:
    provider = load_location_provider("file:///w/ns/t", {})
    assert iceberg_internals.new_data_location(provider, "a.parquet", "day=2025-01-01") == \
        "file:///w/ns/t/data/day=2025-01-01/a.parquet"
    assert iceberg_internals.new_data_location(provider, "a.parquet", None) == "file:///w/ns/t/data/a.parquet"
