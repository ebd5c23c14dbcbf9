"""Equality delete files and keyed tables, without Spark: the file, its DataFile, and ensure_table's key rules."""

from __future__ import annotations

import pickle
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.manifest import DataFileContent
from pyiceberg.table import Transaction

from icebergsync.catalog import ensure_table
from icebergsync.errors import IncompatibleSchemaError
from icebergsync.schema import iceberg_schema
from icebergsync.spec import Column
from spark_app.iceberg import internals
from spark_app.staging.equality_deletes import delete_plan, write_equality_deletes

COLUMNS = [Column(name="tenant", type="string", required=True), Column(name="id", type="long", required=True),
           Column(name="name", type="string"), Column(name="updated_at", type="timestamptz")]


def catalog(directory: Path) -> SqlCatalog:
    return SqlCatalog("t", uri=f"sqlite:///{directory}/c.db", warehouse=(directory / "w").as_uri())


def test_a_keyed_table_is_created_v2_with_the_key_as_identifier_fields(tmp_path: Path) -> None:
    table = ensure_table(catalog(tmp_path), "shop.customers", iceberg_schema(COLUMNS), ["day(updated_at)"], {},
                         key=["id", "tenant"])
    assert table.metadata.format_version == 2
    assert table.schema().identifier_field_names() == {"id", "tenant"}
    assert table.spec().fields and internals.unpartitioned_spec_id(table.metadata) is None
    # Loading it again with the same key is fine; the fence adds the unpartitioned spec.
    again = ensure_table(catalog(tmp_path), "shop.customers", iceberg_schema(COLUMNS), ["day(updated_at)"], {},
                         key=["tenant", "id"])
    assert again.metadata.table_uuid == table.metadata.table_uuid


def test_an_existing_table_of_format_1_or_with_another_key_is_refused(tmp_path: Path) -> None:
    owner = catalog(tmp_path)
    ensure_table(owner, "shop.v1", iceberg_schema(COLUMNS), [], {"format-version": "1"})
    with pytest.raises(IncompatibleSchemaError, match="format-version 1; a keyed table"):
        ensure_table(owner, "shop.v1", iceberg_schema(COLUMNS), [], {}, key=["id"])
    ensure_table(owner, "shop.plain", iceberg_schema(COLUMNS), [], {})
    with pytest.raises(IncompatibleSchemaError, match=r"has identifier fields none, but spec.table.key is \['id'\]"):
        ensure_table(owner, "shop.plain", iceberg_schema(COLUMNS), [], {}, key=["id"])
    ensure_table(owner, "shop.keyed", iceberg_schema(COLUMNS), [], {}, key=["id", "tenant"])
    with pytest.raises(IncompatibleSchemaError, match=r"identifier fields \['id', 'tenant'\], but spec.table.key is \['id'\]"):
        ensure_table(owner, "shop.keyed", iceberg_schema(COLUMNS), [], {}, key=["id"])
    with pytest.raises(IncompatibleSchemaError, match="sets format-version 1, but a keyed table"):
        ensure_table(owner, "shop.new", iceberg_schema(COLUMNS), [], {"format-version": "1"}, key=["id"])


def test_the_equality_delete_file_carries_field_ids_and_its_datafile_the_key(tmp_path: Path) -> None:
    table = ensure_table(catalog(tmp_path), "shop.customers", iceberg_schema(COLUMNS), ["day(updated_at)"], {},
                         key=["id", "tenant"])
    with pytest.raises(ValueError, match="no unpartitioned spec"):
        delete_plan(table)
    transaction = Transaction(table)
    internals.add_unpartitioned_spec(transaction)
    internals.commit_transaction(table.catalog, table, transaction)
    plan = delete_plan(table.catalog.load_table("shop.customers"))
    assert plan.key == ("tenant", "id") and plan.spec_id == 1
    keys = pa.table({"id": pa.array([1, 2], pa.int64()), "tenant": ["a", "b"]})
    delete_file = write_equality_deletes(plan, keys, "isync-0123456789-v1-abc-00000-0")
    assert delete_file is not None
    assert delete_file.file_path.rsplit("/", 1)[-1].startswith("isync-0123456789-v1-abc-00000-0-eqdel-")
    assert delete_file.file_path.startswith(table.metadata.location + "/data/")
    stored = pq.read_schema(delete_file.file_path.removeprefix("file://"))
    assert [(f.name, f.metadata[b"PARQUET:field_id"], f.nullable) for f in stored] == [
        ("tenant", b"1", False), ("id", b"2", False)]
    assert pq.read_table(delete_file.file_path.removeprefix("file://")).to_pylist() == [
        {"tenant": "a", "id": 1}, {"tenant": "b", "id": 2}]
    shipped = pickle.loads(pickle.dumps(delete_file))  # tasks send their files to the driver pickled
    assert (shipped.content, shipped.equality_ids, shipped.spec_id, shipped.record_count, len(shipped.partition)) == (
        DataFileContent.EQUALITY_DELETES, [1, 2], 1, 2, 0)
    assert shipped.lower_bounds[2] == (1).to_bytes(8, "little") and shipped.upper_bounds[1] == b"b"
    assert write_equality_deletes(plan, keys.slice(0, 0), "isync-x") is None
    with pytest.raises(ValueError, match="key column id has nulls"):
        write_equality_deletes(plan, pa.table({"id": pa.array([None], pa.int64()), "tenant": ["a"]}), "isync-x")
