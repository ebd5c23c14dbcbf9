"""The pyiceberg internals behind spark_app/iceberg/internals.py still exist and still behave as the
sink needs. A failure here after a pyiceberg upgrade names the call to adapt in that one module."""

from __future__ import annotations

import inspect
import json
from datetime import date
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.exceptions import CommitFailedException
from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
from pyiceberg.schema import Schema
from pyiceberg.table import Table, Transaction
from pyiceberg.table.locations import load_location_provider
from pyiceberg.table.update import AssertRefSnapshotId, AssertTableUUID, SetPropertiesUpdate
from pyiceberg.types import DateType, LongType, NestedField, StringType

from spark_app.iceberg import internals

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
        "Transaction._requirements/_updates changed: adapt internals.commit_transaction"
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
        snapshot_id = internals.appended_snapshot_id(append)
    assert isinstance(snapshot_id, int) and stale.metadata.snapshot_by_id(snapshot_id) is None
    head = stale.metadata.current_snapshot_id
    with pytest.raises(CommitFailedException):
        internals.commit_transaction(owner, stale, transaction, AssertRefSnapshotId(ref="main", snapshot_id=head))
    fresh = owner.load_table("ns.t")
    transaction = Transaction(fresh)
    with transaction.update_snapshot(snapshot_properties={"p": "1"}).fast_append() as append:
        snapshot_id = internals.appended_snapshot_id(append)
    added = internals.added_snapshot(transaction, snapshot_id)
    response = internals.commit_transaction(owner, fresh, transaction, AssertTableUUID(uuid=fresh.metadata.table_uuid))
    landed = response.metadata.snapshot_by_id(snapshot_id)
    assert landed is not None and landed.summary is not None and landed.summary["p"] == "1"
    assert (landed.sequence_number, landed.timestamp_ms) == (added.sequence_number, added.timestamp_ms) == (3, added.timestamp_ms)
    assert response.metadata.current_snapshot_id == snapshot_id


def test_catalog_commit_table_signature() -> None:
    parameters = list(inspect.signature(SqlCatalog.commit_table).parameters)
    assert parameters == ["self", "table", "requirements", "updates"], \
        f"Catalog.commit_table is now {parameters}: adapt internals.commit_transaction"


def test_partition_values_are_stored_in_their_physical_form() -> None:
    assert internals.partition_value(DateType(), date(1970, 1, 11)) == 10
    assert internals.partition_value(LongType(), 7) == 7


def test_footer_statistics_map_parquet_columns_to_field_ids(tmp_path: Path) -> None:
    path = tmp_path / "f.parquet"
    pq.write_table(pa.table({"id": [3, 1, 2], "who": ["x", None, "y"]},
                            schema=pa.schema([pa.field("id", pa.int64(), False, {b"PARQUET:field_id": b"1"}),
                                              pa.field("who", pa.string(), True, {b"PARQUET:field_id": b"2"})])), path)
    statistics = internals.footer_statistics(SCHEMA, {}, pq.ParquetFile(path).metadata)
    serialized = statistics.to_serialized_dict()
    assert serialized["record_count"] == 3
    assert serialized["null_value_counts"] == {1: 0, 2: 1}
    assert serialized["lower_bounds"][1] == (1).to_bytes(8, "little")
    assert serialized["upper_bounds"][1] == (3).to_bytes(8, "little")


def test_data_locations_take_a_partition_path(tmp_path: Path) -> None:
    provider = load_location_provider("file:///w/ns/t", {})
    assert internals.new_data_location(provider, "a.parquet", "day=2025-01-01") == \
        "file:///w/ns/t/data/day=2025-01-01/a.parquet"
    assert internals.new_data_location(provider, "a.parquet", None) == "file:///w/ns/t/data/a.parquet"


# -- keyed tables: an unpartitioned spec beside the default, and delete files in one snapshot ---------

KEYED = Schema(NestedField(1, "id", LongType(), required=True), NestedField(2, "day", DateType()),
               identifier_field_ids=[1])


def keyed_table(directory: Path, partitioned: bool) -> Table:
    from pyiceberg.partitioning import PartitionField, PartitionSpec
    from pyiceberg.transforms import IdentityTransform

    spec = PartitionSpec(PartitionField(2, 1000, IdentityTransform(), "day")) if partitioned else PartitionSpec()
    return catalog(directory).create_table("ns.k", KEYED, partition_spec=spec, properties={"format-version": "2"})


def test_an_unpartitioned_spec_is_added_once_without_becoming_the_default(tmp_path: Path) -> None:
    table = keyed_table(tmp_path, partitioned=True)
    assert internals.unpartitioned_spec_id(table.metadata) is None
    transaction = Transaction(table)
    assert internals.add_unpartitioned_spec(transaction) == 1
    internals.commit_transaction(table.catalog, table, transaction)
    reloaded = table.catalog.load_table("ns.k")
    assert reloaded.metadata.default_spec_id == 0 and reloaded.spec().fields
    assert internals.unpartitioned_spec_id(reloaded.metadata) == 1
    again = Transaction(reloaded)
    assert internals.add_unpartitioned_spec(again) == 1 and again._updates == ()
    (tmp_path / "u").mkdir()
    unpartitioned = keyed_table(tmp_path / "u", partitioned=False)
    assert internals.unpartitioned_spec_id(unpartitioned.metadata) == 0


def test_row_delta_commits_data_and_equality_delete_files_in_one_snapshot(tmp_path: Path) -> None:
    from pyiceberg.manifest import DataFileContent, ManifestContent

    from spark_app.staging.equality_deletes import delete_plan, write_equality_deletes
    from spark_app.staging.writer import PartitionedWriter, TablePlan, conform

    table = keyed_table(tmp_path, partitioned=True)
    transaction = Transaction(table)
    internals.add_unpartitioned_spec(transaction)
    internals.commit_transaction(table.catalog, table, transaction)
    table = table.catalog.load_table("ns.k")
    plan = TablePlan(table.metadata.location, dict(table.properties), table.schema(), table.spec(), dict(table.io.properties))
    writer = PartitionedWriter(plan, "isync-test", 1 << 30, 1 << 26)
    writer.write(conform(pa.RecordBatch.from_pydict({"id": pa.array([1, 2], pa.int64()),
                                                     "day": [date(2025, 1, 1), date(2025, 1, 2)]}), plan.arrow_schema()))
    data_files = writer.finish()
    delete_file = write_equality_deletes(delete_plan(table), pa.table({"id": pa.array([1, 2, 3], pa.int64())}), "isync-test")
    assert delete_file is not None
    transaction = Transaction(table)
    snapshot_id = internals.row_delta(transaction, {"p": "1"}, data_files, [delete_file])
    internals.commit_transaction(table.catalog, table, transaction)
    snapshot = table.catalog.load_table("ns.k").metadata.snapshot_by_id(snapshot_id)
    assert snapshot is not None and snapshot.summary is not None
    assert snapshot.summary.operation.value == "overwrite"
    assert snapshot.summary["p"] == "1"
    assert (snapshot.summary["added-data-files"], snapshot.summary["added-equality-delete-files"],
            snapshot.summary["added-equality-deletes"], snapshot.summary["added-records"]) == ("2", "1", "3", "2")
    manifests = snapshot.manifests(table.io)
    assert sorted((m.content, m.partition_spec_id, m.sequence_number) for m in manifests) == [
        (ManifestContent.DATA, 0, 1), (ManifestContent.DELETES, 1, 1)]
    deletes = next(m for m in manifests if m.content == ManifestContent.DELETES).fetch_manifest_entry(table.io)
    assert len(deletes) == 1
    entry = deletes[0]
    assert (entry.data_file.content, entry.data_file.equality_ids, entry.data_file.spec_id, entry.sequence_number) == (
        DataFileContent.EQUALITY_DELETES, [1], 1, 1)
    assert entry.data_file.record_count == 3 and entry.data_file.lower_bounds[1] == (1).to_bytes(8, "little")
    # The delete manifest declares equality_ids list<int> as the Iceberg spec does (pyiceberg's list<long>
    # makes Iceberg's Java reader fail: tests/integration/test_keyed_commit.py reads these tables with it).
    from pyiceberg.avro.file import AvroFile

    manifest = next(m for m in manifests if m.content == ManifestContent.DELETES)
    with AvroFile[Any](table.io.new_input(manifest.manifest_path)) as avro:
        header = json.loads(avro.header.meta["avro.schema"])
        assert avro.header.meta["content"] == "deletes"
    data_file_fields = next(f for f in header["fields"] if f["name"] == "data_file")["type"]["fields"]
    equality_ids = next(f for f in data_file_fields if f["name"] == "equality_ids")
    assert equality_ids["type"][-1]["items"] == "int", equality_ids
    # Delete files alone make a "delete" snapshot.
    table = table.catalog.load_table("ns.k")
    transaction = Transaction(table)
    only_deletes = internals.row_delta(transaction, {}, [], [delete_file])
    internals.commit_transaction(table.catalog, table, transaction)
    landed = table.catalog.load_table("ns.k").metadata.snapshot_by_id(only_deletes)
    assert landed is not None and landed.summary is not None and landed.summary.operation.value == "delete"


def test_row_delta_refuses_a_format_v1_table_and_data_files_as_deletes(tmp_path: Path) -> None:
    from spark_app.staging.equality_deletes import DeletePlan, write_equality_deletes

    table = catalog(tmp_path).create_table("ns.v1", KEYED, properties={"format-version": "1"})
    plan = DeletePlan(table.metadata.location, {}, table.schema(), ("id",), 0, {})
    delete_file = write_equality_deletes(plan, pa.table({"id": pa.array([1], pa.int64())}), "isync-test")
    assert delete_file is not None
    with pytest.raises(ValueError, match="format-version 2"):
        internals.row_delta(Transaction(table), {}, [], [delete_file])
    with pytest.raises(ValueError, match="not a delete file"):
        internals.RowDelta(Transaction(table), {}).add_delete_file(_data_file(delete_file))


def _data_file(delete_file: DataFile) -> DataFile:
    from pyiceberg.manifest import DataFileContent

    return DataFile.from_args(content=DataFileContent.DATA, file_path=delete_file.file_path, file_format=delete_file.file_format,
                              partition=delete_file.partition, record_count=1, file_size_in_bytes=1)


def test_pyiceberg_still_refuses_to_read_equality_deletes(tmp_path: Path) -> None:
    """docs/connectors.md says pyiceberg cannot read a keyed table with deletes; when this fails, update it."""
    from spark_app.staging.equality_deletes import delete_plan, write_equality_deletes

    table = keyed_table(tmp_path, partitioned=False)
    table.append(pa.table({"id": pa.array([1], pa.int64()), "day": [date(2025, 1, 1)]}, schema=KEYED.as_arrow()))
    table = table.catalog.load_table("ns.k")
    delete_file = write_equality_deletes(delete_plan(table), pa.table({"id": pa.array([1], pa.int64())}), "isync-test")
    assert delete_file is not None
    transaction = Transaction(table)
    internals.row_delta(transaction, {}, [], [delete_file])
    internals.commit_transaction(table.catalog, table, transaction)
    with pytest.raises(ValueError, match="does not yet support equality deletes"):
        table.catalog.load_table("ns.k").scan().to_arrow()


# -- rewrites (maintenance): one replace snapshot with an explicit data sequence number ---------------


def _keyed_with_rows(tmp_path: Path) -> tuple[Table, list[DataFile], DataFile]:
    """A keyed table partitioned by day: one snapshot with two data files and one equality delete (key 1)."""
    from spark_app.staging.equality_deletes import delete_plan, write_equality_deletes
    from spark_app.staging.writer import PartitionedWriter, TablePlan, conform

    table = keyed_table(tmp_path, partitioned=True)
    transaction = Transaction(table)
    internals.add_unpartitioned_spec(transaction)
    internals.commit_transaction(table.catalog, table, transaction)
    table = table.catalog.load_table("ns.k")
    plan = TablePlan(table.metadata.location, dict(table.properties), table.schema(), table.spec(), dict(table.io.properties))
    writer = PartitionedWriter(plan, "isync-test", 1 << 30, 1 << 26)
    writer.write(conform(pa.RecordBatch.from_pydict({"id": pa.array([1, 2], pa.int64()),
                                                     "day": [date(2025, 1, 1), date(2025, 1, 2)]}), plan.arrow_schema()))
    data_files = writer.finish()
    transaction = Transaction(table)
    with transaction.update_snapshot().fast_append() as append:
        for data_file in data_files:
            append.append_data_file(data_file)
    internals.commit_transaction(table.catalog, table, transaction)
    table = table.catalog.load_table("ns.k")
    delete_file = write_equality_deletes(delete_plan(table), pa.table({"id": pa.array([1], pa.int64())}), "isync-test")
    assert delete_file is not None
    transaction = Transaction(table)
    internals.row_delta(transaction, {}, [], [delete_file])
    internals.commit_transaction(table.catalog, table, transaction)
    return table.catalog.load_table("ns.k"), data_files, delete_file


def test_rewrite_files_replaces_files_keeping_an_explicit_data_sequence_number(tmp_path: Path) -> None:
    from pyiceberg.manifest import DataFileContent, ManifestEntryStatus

    from spark_app.staging.writer import PartitionedWriter, TablePlan, conform

    table, data_files, delete_file = _keyed_with_rows(tmp_path)
    head = table.current_snapshot()
    assert head is not None and head.sequence_number == 2
    live = internals.live_files(table, head)
    assert sorted((f.data_file.content, f.data_sequence_number) for f in live) == [
        (DataFileContent.DATA, 1), (DataFileContent.DATA, 1), (DataFileContent.EQUALITY_DELETES, 2)]
    # The replacement of the day-1 file holds no rows; of the day-2 file, its row (written again).
    plan = TablePlan(table.metadata.location, dict(table.properties), table.schema(), table.spec(), dict(table.io.properties))
    writer = PartitionedWriter(plan, "isync-test-rewrite", 1 << 30, 1 << 26)
    writer.write(conform(pa.RecordBatch.from_pydict({"id": pa.array([2], pa.int64()), "day": [date(2025, 1, 2)]}),
                         plan.arrow_schema()))
    replacement = writer.finish()
    replacement[0].spec_id = 0
    transaction = Transaction(table)
    removed = [*data_files, delete_file]
    snapshot_id = internals.rewrite_files(transaction, {"p": "m"}, removed, replacement, head.sequence_number)
    internals.commit_transaction(table.catalog, table, transaction)
    table = table.catalog.load_table("ns.k")
    snapshot = table.metadata.snapshot_by_id(snapshot_id)
    assert snapshot is not None and snapshot.summary is not None and snapshot.sequence_number == 3
    assert snapshot.summary.operation.value == "replace" and snapshot.summary["p"] == "m"
    assert (snapshot.summary["deleted-data-files"], snapshot.summary["added-data-files"],
            snapshot.summary["removed-equality-delete-files"], snapshot.summary["total-delete-files"],
            snapshot.summary["total-records"]) == ("2", "1", "1", "0", "1")
    live = internals.live_files(table, snapshot)
    assert [(f.path, f.data_sequence_number) for f in live] == [(replacement[0].file_path, 2)]
    entries = [(e.data_file.file_path, e.status, e.sequence_number, e.file_sequence_number)
               for m in snapshot.manifests(table.io) for e in m.fetch_manifest_entry(table.io, discard_deleted=False)]
    assert (replacement[0].file_path, ManifestEntryStatus.ADDED, 2, 3) in entries
    assert {(path, status) for path, status, _, _ in entries if status == ManifestEntryStatus.DELETED} == {
        (f.file_path, ManifestEntryStatus.DELETED) for f in removed}
    assert table.scan().to_arrow().column("id").to_pylist() == [2]  # no delete file left: pyiceberg reads it
    # Files that are not live are refused before anything is written.
    with pytest.raises(ValueError, match="not live"):
        internals.rewrite_files(Transaction(table), {}, removed, [], 2)


def test_read_data_file_projects_by_field_id_and_skips_deleted_positions(tmp_path: Path) -> None:
    """pyiceberg's per-file reader: a file of an older schema reads in the current one (a renamed column by its
    field id, an added one null), without the deleted positions, batch by batch."""
    from pyiceberg.manifest import DataFileContent

    from spark_app.staging.writer import PartitionedWriter, TablePlan, conform

    table = catalog(tmp_path).create_table("ns.t", SCHEMA)
    plan = TablePlan(table.metadata.location, dict(table.properties), table.schema(), table.spec(), dict(table.io.properties))
    writer = PartitionedWriter(plan, "isync-test", 1 << 30, 1 << 26)
    writer.write(conform(pa.RecordBatch.from_pydict({"id": pa.array(range(5), pa.int64()), "who": list("abcde")}),
                         plan.arrow_schema()))
    (data_file,) = writer.finish()
    with table.update_schema() as update:
        update.rename_column("who", "name")
        update.add_column("note", StringType())
    table = table.catalog.load_table("ns.t")
    assert data_file.content == DataFileContent.DATA
    batches = internals.read_data_file(table.io, data_file, table.schema(), table.spec(),
                                               table.metadata.format_version, table.metadata.name_mapping(),
                                               pa.array([0, 3], pa.int64()))
    rows = pa.Table.from_batches(list(batches))
    assert rows.column_names == ["id", "name", "note"]
    assert rows.to_pydict() == {"id": [1, 2, 4], "name": ["b", "c", "e"], "note": [None, None, None]}


def test_live_files_reads_a_cached_manifest_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    table = catalog(tmp_path).create_table("ns.t", SCHEMA)
    for ids in ([1], [2]):
        table.append(pa.table({"id": ids, "who": ["a"]}, schema=SCHEMA.as_arrow()))
    table = table.catalog.load_table("ns.t")
    snapshot = table.current_snapshot()
    assert snapshot is not None
    cache: dict[str, list[internals.LiveFile]] = {}
    first = internals.live_files(table, snapshot, cache)
    assert len(first) == 2 and len(cache) == 2
    monkeypatch.setattr(internals, "manifest_entries", lambda *_: pytest.fail("a cached manifest was read"))
    assert internals.live_files(table, snapshot, cache) == first


def test_live_files_keeps_in_its_cache_the_manifests_of_the_snapshot_read_only(tmp_path: Path) -> None:
    """The cache of a long-running sync stays bounded: manifests an overwrite dropped from the head are forgotten."""
    table = catalog(tmp_path).create_table("ns.t", SCHEMA)
    for ids in ([1], [2]):
        table.append(pa.table({"id": ids, "who": ["a"]}, schema=SCHEMA.as_arrow()))
    cache: dict[str, list[internals.LiveFile]] = {}
    before = table.catalog.load_table("ns.t").current_snapshot()
    assert before is not None
    internals.live_files(table, before, cache)
    old = set(cache)
    table = table.catalog.load_table("ns.t")
    table.overwrite(pa.table({"id": [3], "who": ["b"]}, schema=SCHEMA.as_arrow()))
    after = table.catalog.load_table("ns.t").current_snapshot()
    assert after is not None
    live = internals.live_files(table, after, cache)
    assert [f.data_file.record_count for f in live] == [1]
    assert set(cache) == {m.manifest_path for m in internals.manifest_files(table.io, after)}
    assert not old & set(cache), "manifests the head no longer holds stayed in the cache"


def test_expire_snapshots_stages_a_removal_that_asserts_the_head(tmp_path: Path) -> None:
    table, _, _ = _keyed_with_rows(tmp_path)
    oldest = table.metadata.snapshots[0].snapshot_id
    stale = table.catalog.load_table("ns.k")
    transaction = Transaction(table)
    internals.expire_snapshots(transaction, [oldest])
    table.append(pa.table({"id": pa.array([9], pa.int64()), "day": [date(2025, 1, 3)]}, schema=KEYED.as_arrow()))
    with pytest.raises(CommitFailedException):
        internals.commit_transaction(table.catalog, stale, transaction, internals.main_head_requirement(stale.metadata))
    fresh = table.catalog.load_table("ns.k")
    transaction = Transaction(fresh)
    with pytest.raises(ValueError, match="protected"):  # a branch head is never expired
        internals.expire_snapshots(Transaction(fresh), [fresh.metadata.current_snapshot_id])
    internals.expire_snapshots(transaction, [oldest])
    internals.commit_transaction(fresh.catalog, fresh, transaction, internals.main_head_requirement(fresh.metadata))
    ids = [s.snapshot_id for s in fresh.catalog.load_table("ns.k").metadata.snapshots]
    assert oldest not in ids and fresh.metadata.current_snapshot_id in ids


# -- format version 3 and position deletes: what pyiceberg 0.12 lacks, worked around in iceberg_internals -----


def test_pyiceberg_still_cannot_write_v3_metadata_so_the_workaround_is_needed(tmp_path: Path) -> None:
    """When this fails, pyiceberg writes v3 metadata itself: drop ``_v3_metadata_json`` from internals."""
    table = catalog(tmp_path).create_table("ns.v3", KEYED, properties={"format-version": "3"})
    with pytest.raises(NotImplementedError, match="Writing V3 is not yet supported"):
        internals._pyiceberg_v3_metadata_json(table.metadata)
    written = json.loads(table.metadata.model_dump_json())
    assert written["format-version"] == 3 and written["next-row-id"] == 0


def test_a_v2_datafile_is_a_prefix_of_a_v3_one() -> None:
    """iceberg_internals pads v2 records with the v3 fields, which must follow the v2 ones."""
    from pyiceberg.manifest import DATA_FILE_TYPE, MANIFEST_LIST_FILE_SCHEMAS

    v2, v3 = DATA_FILE_TYPE[2].fields, DATA_FILE_TYPE[3].fields
    assert v3[:len(v2)] == v2
    assert [f.name for f in v3[len(v2):]] == ["first_row_id", "referenced_data_file", "content_offset",
                                              "content_size_in_bytes"]
    lists = MANIFEST_LIST_FILE_SCHEMAS
    assert lists[3].fields[:len(lists[2].fields)] == lists[2].fields and lists[3].fields[-1].name == "first_row_id"


def _v3_table_with_rows(directory: Path) -> tuple[Table, list[DataFile]]:
    """A v3 table partitioned by day with two committed data files (3 rows, then 2), through row_delta."""
    from pyiceberg.partitioning import PartitionField, PartitionSpec
    from pyiceberg.transforms import IdentityTransform

    from spark_app.staging.writer import PartitionedWriter, TablePlan, conform

    spec = PartitionSpec(PartitionField(2, 1000, IdentityTransform(), "day"))
    table = catalog(directory).create_table("ns.v3", KEYED, partition_spec=spec, properties={"format-version": "3"})
    for ids, day in (([1, 2, 3], date(2025, 1, 1)), ([4, 5], date(2025, 1, 2))):
        plan = TablePlan(table.metadata.location, dict(table.properties), table.schema(), table.spec(),
                         dict(table.io.properties))
        writer = PartitionedWriter(plan, "isync-test", 1 << 30, 1 << 26)
        writer.write(conform(pa.RecordBatch.from_pydict({"id": pa.array(ids, pa.int64()), "day": [day] * len(ids)}),
                             plan.arrow_schema()))
        written = writer.finish()
        transaction = Transaction(table)
        internals.row_delta(transaction, {}, written, [])
        internals.commit_transaction(table.catalog, table, transaction)
        table = table.catalog.load_table("ns.v3")
    snapshot = table.current_snapshot()
    assert snapshot is not None
    live = sorted(internals.live_files(table, snapshot), key=lambda f: -f.data_file.record_count)
    return table, [f.data_file for f in live]


def test_row_delta_commits_v3_snapshots_with_row_lineage(tmp_path: Path) -> None:
    from pyiceberg.avro.file import AvroFile
    from pyiceberg.manifest import ManifestContent

    table, _ = _v3_table_with_rows(tmp_path)
    first, second = table.metadata.snapshots
    assert (first.first_row_id, first.added_rows, second.first_row_id, second.added_rows) == (0, 3, 3, 2)
    assert internals.next_row_id(table.metadata) == 5 and table.metadata.format_version == 3
    manifests = internals.manifest_files(table.io, second)
    assert sorted(internals.manifest_first_row_id(m) for m in manifests) == [0, 3]  # the first one is kept
    with AvroFile[Any](table.io.new_input(manifests[0].manifest_path)) as avro:
        assert avro.header.meta["format-version"] == "3" and avro.header.meta["content"] == "data"
    live = internals.live_files(table, second)
    assert sorted((internals.first_row_id(f.data_file), f.data_file.record_count) for f in live) == [(0, 3), (3, 2)]
    assert {m.content for m in manifests} == {ManifestContent.DATA}
    # pyiceberg's own writers still refuse v3 manifests: the sink's commits go through row_delta.
    with pytest.raises(ValueError, match="Cannot write manifest for table version: 3"):
        table.append(pa.table({"id": pa.array([9], pa.int64()), "day": [date(2025, 1, 3)]}, schema=KEYED.as_arrow()))


def _dv(data_file: DataFile, puffin: str, offset: int, file_format: str = "PUFFIN") -> DataFile:
    from pyiceberg.manifest import DataFileContent, FileFormat

    dv = internals.full_data_file(
        content=DataFileContent.POSITION_DELETES, file_path=puffin, file_format=FileFormat(file_format),
        partition=data_file.partition, record_count=1, file_size_in_bytes=100,
        referenced_data_file=data_file.file_path, content_offset=offset, content_size_in_bytes=30)
    dv.spec_id = data_file.spec_id
    return dv


def test_row_delta_keeps_one_deletion_vector_per_data_file(tmp_path: Path) -> None:
    """Checked against the metadata alone (the blobs are not read: tests/unit/test_position_deletes.py writes real ones)."""
    table, (a, b) = _v3_table_with_rows(tmp_path)
    puffin = f"{table.metadata.location}/data/isync-test-dv.puffin"
    dv_a, dv_b = _dv(a, puffin, 4), _dv(b, puffin, 34)  # two DVs in one Puffin file: same path, other offsets
    transaction = Transaction(table)
    snapshot_id = internals.row_delta(transaction, {}, [], [dv_a, dv_b])
    internals.commit_transaction(table.catalog, table, transaction)
    table = table.catalog.load_table("ns.v3")
    snapshot = table.metadata.snapshot_by_id(snapshot_id)
    assert snapshot is not None and snapshot.summary is not None
    assert (snapshot.summary.operation.value, snapshot.summary["added-dvs"], snapshot.summary["added-delete-files"],
            snapshot.summary["added-position-deletes"]) == ("delete", "2", "2", "2")
    assert "added-position-delete-files" not in snapshot.summary.additional_properties
    assert (snapshot.first_row_id, snapshot.added_rows) == (5, 0)
    dvs = [f.data_file for f in internals.live_files(table, snapshot) if internals.is_deletion_vector(f.data_file)]
    assert sorted((internals.referenced_data_file(f), internals.content_offset(f),
                   internals.content_size_in_bytes(f), internals.first_row_id(f)) for f in dvs) == [
        (a.file_path, 4, 30, None), (b.file_path, 34, 30, None)]
    # A second DV for a's file is refused unless its live one is removed in the same commit.
    replacement = _dv(a, f"{table.metadata.location}/data/isync-test-dv2.puffin", 4)
    with pytest.raises(ValueError, match="two deletion vectors"):
        internals.row_delta(Transaction(table), {}, [], [replacement])
    with pytest.raises(ValueError, match="two deletion vectors"):
        internals.row_delta(Transaction(table), {}, [], [replacement, replacement])
    with pytest.raises(ValueError, match="not live"):
        internals.row_delta(Transaction(table), {}, [], [replacement], [_dv(a, puffin, 999)])
    transaction = Transaction(table)
    replaced = internals.row_delta(transaction, {}, [], [replacement], [dv_a])
    internals.commit_transaction(table.catalog, table, transaction)
    table = table.catalog.load_table("ns.v3")
    snapshot = table.metadata.snapshot_by_id(replaced)
    assert snapshot is not None and snapshot.summary is not None
    assert (snapshot.summary["added-dvs"], snapshot.summary["removed-dvs"], snapshot.summary["total-delete-files"]) == (
        "1", "1", "2")
    live = [f.data_file for f in internals.live_files(table, snapshot)]
    assert sorted((f.file_path, internals.content_offset(f)) for f in live
                  if internals.is_deletion_vector(f)) == sorted([(puffin, 34), (replacement.file_path, 4)])
    # Position delete files are for v2 tables, DVs for v3 ones.
    parquet = _dv(a, f"{table.metadata.location}/data/isync-test-posdel.parquet", 0, "PARQUET")
    with pytest.raises(ValueError, match="takes deletion vectors, not position delete files"):
        internals.RowDelta(Transaction(table), {}).add_delete_file(parquet)
    (tmp_path / "v2").mkdir()
    v2 = keyed_table(tmp_path / "v2", partitioned=False)
    with pytest.raises(ValueError, match="deletion vectors need a format-version 3 table"):
        internals.RowDelta(Transaction(v2), {}).add_delete_file(replacement)


def test_rewrite_files_of_a_v3_table_removes_a_rewritten_files_dv_and_keeps_the_others_of_its_puffin_file(
        tmp_path: Path) -> None:
    """Checked against the metadata alone: a's file is rewritten, its DV goes; b's DV, in the same Puffin file,
    stays live as it was; the added data file gets new row ids (a's EXISTING neighbours keep theirs)."""
    table, (a, b) = _v3_table_with_rows(tmp_path)
    puffin = f"{table.metadata.location}/data/isync-test-dv.puffin"
    dv_a, dv_b = _dv(a, puffin, 4), _dv(b, puffin, 34)
    transaction = Transaction(table)
    internals.row_delta(transaction, {}, [], [dv_a, dv_b])
    internals.commit_transaction(table.catalog, table, transaction)
    table = table.catalog.load_table("ns.v3")
    head = table.current_snapshot()
    assert head is not None and head.sequence_number is not None
    replacement = internals.full_data_file(
        content=DataFileContent.DATA, file_path=f"{table.metadata.location}/data/isync-test-a2.parquet",
        file_format=FileFormat.PARQUET, partition=a.partition, record_count=2, file_size_in_bytes=10)
    replacement.spec_id = a.spec_id
    # The DV of a removed data file must go in the same commit; a kept data file takes no second DV.
    with pytest.raises(ValueError, match="deletion vectors of removed data files"):
        internals.rewrite_files(Transaction(table), {}, [a], [replacement], head.sequence_number)
    with pytest.raises(ValueError, match="two deletion vectors"):
        internals.rewrite_files(Transaction(table), {}, [a, dv_a], [replacement, _dv(b, puffin, 64)],
                                        head.sequence_number)
    with pytest.raises(ValueError, match="not live"):
        internals.rewrite_files(Transaction(table), {}, [a, _dv(a, puffin, 999)], [replacement],
                                        head.sequence_number)
    transaction = Transaction(table)
    snapshot_id = internals.rewrite_files(transaction, {}, [a, dv_a], [replacement], head.sequence_number)
    internals.commit_transaction(table.catalog, table, transaction)
    table = table.catalog.load_table("ns.v3")
    snapshot = table.metadata.snapshot_by_id(snapshot_id)
    assert snapshot is not None and snapshot.summary is not None
    assert (snapshot.summary.operation.value, snapshot.summary["deleted-data-files"], snapshot.summary["removed-dvs"],
            snapshot.summary["total-delete-files"]) == ("replace", "1", "1", "1")
    live = internals.live_files(table, snapshot)
    assert sorted((f.path, internals.content_offset(f.data_file), f.data_sequence_number) for f in live) == sorted(
        [(b.file_path, None, 2), (puffin, 34, 3), (replacement.file_path, None, head.sequence_number)])
    row_ids = {f.path: internals.first_row_id(f.data_file) for f in live if f.data_file.content == DataFileContent.DATA}
    assert row_ids[b.file_path] == 3 and row_ids[replacement.file_path] >= 5  # b keeps its ids, the new file gets new ones
    assert internals.next_row_id(table.metadata) == (snapshot.first_row_id or 0) + (snapshot.added_rows or 0)
