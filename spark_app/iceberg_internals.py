"""The pyiceberg internals the sink relies on, all in one place (written against pyiceberg 0.12).

pyiceberg has no public API for these: committing a transaction with requirements of our own and
without its retry-and-rebase loop, the id of the snapshot a transaction will add, converting a
partition value to its stored form, column statistics from a Parquet footer, data locations for
a partition path, adding a partition spec without making it the default, and committing delete
files (pyiceberg 0.12 writes no delete manifests: :class:`RowDelta` adds data files and equality
delete files in one snapshot, as Iceberg's ``RowDelta`` does). The committer and the writer call only this module for them, and
tests/unit/test_iceberg_internals.py fails loudly, naming the call, when an upgrade changes one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow.parquet as pq
from pyiceberg.catalog import Catalog
from pyiceberg.io.pyarrow import (
    DataFileStatistics,
    compute_statistics_plan,
    data_file_statistics_from_parquet_metadata,
    parquet_path_to_id_mapping,
)
from pyiceberg.manifest import (
    DataFile,
    DataFileContent,
    ManifestContent,
    ManifestEntry,
    ManifestEntryStatus,
    ManifestFile,
    ManifestWriterV2,
)
from pyiceberg.partitioning import PartitionSpec, _to_partition_representation
from pyiceberg.schema import Schema
from pyiceberg.table import CommitTableResponse, Table, Transaction
from pyiceberg.table.locations import LocationProvider
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.refs import MAIN_BRANCH
from pyiceberg.table.snapshots import Operation, Snapshot, Summary
from pyiceberg.table.update import (
    AddPartitionSpecUpdate,
    AddSnapshotUpdate,
    AssertLastAssignedPartitionId,
    AssertRefSnapshotId,
    TableRequirement,
)
from pyiceberg.table.update.snapshot import ExpireSnapshots, _FastAppendFiles, _SnapshotProducer
from pyiceberg.types import IcebergType, IntegerType, ListType, NestedField, StructType


def commit_transaction(catalog: Catalog, table: Table, transaction: Transaction,
                       *extra_requirements: TableRequirement) -> CommitTableResponse:
    """Send ``transaction``'s updates once, with its requirements plus ``extra_requirements``.

    Unlike ``Transaction.commit_transaction`` nothing is retried or rebased: a conflict raises
    ``CommitFailedException`` for the caller to re-check and rebuild.
    """
    requirements = (*transaction._requirements, *extra_requirements)
    return catalog.commit_table(table, requirements, transaction._updates)


def appended_snapshot_id(append: _FastAppendFiles | RowDelta) -> int:
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


# -- partition specs --------------------------------------------------------------------------------


def unpartitioned_spec_id(metadata: TableMetadata) -> int | None:
    """The id of a partition spec without fields (the spec of global equality deletes), if the table has one."""
    return next((spec.spec_id for spec in metadata.partition_specs if not spec.fields), None)


def add_unpartitioned_spec(transaction: Transaction) -> int:
    """Make sure the table has an unpartitioned spec, without making it the default; return its id.

    An equality delete applies to data files of every partition only when its own spec is
    unpartitioned (Iceberg spec, scan planning), so a keyed table needs one whatever its default
    spec is. pyiceberg's ``update_spec`` always makes the new spec the default, so the update is
    staged here directly, guarded by the table's last assigned partition field id.
    """
    metadata = transaction.table_metadata
    existing = unpartitioned_spec_id(metadata)
    if existing is not None:
        return existing
    spec_id = max(spec.spec_id for spec in metadata.partition_specs) + 1
    transaction._apply(
        (AddPartitionSpecUpdate(spec=PartitionSpec(spec_id=spec_id)),),
        (AssertLastAssignedPartitionId(last_assigned_partition_id=metadata.last_partition_id),),  # type: ignore[call-arg]
    )
    return spec_id


# -- delete files -----------------------------------------------------------------------------------


EQUALITY_IDS_FIELD_ID = 135


def _equality_ids_as_int(schema: Schema) -> Schema:
    """The manifest entry schema with ``data_file.equality_ids`` as ``list<int>``, as the Iceberg spec has it.

    pyiceberg 0.12 declares it ``list<long>``; Iceberg's Java reader then fails on the manifest
    (``ClassCastException: Long cannot be cast to Integer`` in ``BaseFile``). Avro encodes int and
    long alike, so only the declared type changes.
    """
    fields = []
    for entry_field in schema.fields:
        if entry_field.name == "data_file" and isinstance(entry_field.field_type, StructType):
            inner = [
                NestedField(f.field_id, f.name, ListType(f.field_type.element_id, IntegerType(), element_required=True),
                            required=f.required, doc=f.doc)
                if f.field_id == EQUALITY_IDS_FIELD_ID and isinstance(f.field_type, ListType) else f
                for f in entry_field.field_type.fields
            ]
            entry_field = NestedField(entry_field.field_id, entry_field.name, StructType(*inner),
                                      required=entry_field.required, doc=entry_field.doc)
        fields.append(entry_field)
    return Schema(*fields)


class _DeleteManifestWriter(ManifestWriterV2):
    """A format-v2 manifest of delete files (pyiceberg 0.12 writes data manifests only)."""

    def content(self) -> ManifestContent:
        return ManifestContent.DELETES

    def _with_partition(self, format_version: Any) -> Schema:
        return _equality_ids_as_int(super()._with_partition(format_version))

    @property
    def _meta(self) -> dict[str, str]:
        return {**super()._meta, "content": "deletes"}


class RowDelta(_FastAppendFiles):
    """One snapshot adding data files and delete files, like Iceberg's ``RowDelta``.

    Data files go into one data manifest under the default spec, delete files into one delete
    manifest under their (unpartitioned) spec; the snapshot's operation is Iceberg's for a row
    delta: ``append`` for data files alone, ``delete`` for delete files alone, ``overwrite`` for
    both. Use it as a context manager, like pyiceberg's snapshot producers.
    """

    def __init__(self, transaction: Transaction, snapshot_properties: dict[str, str]):
        super().__init__(operation=Operation.APPEND, transaction=transaction, io=transaction._table.io,
                         branch=MAIN_BRANCH, snapshot_properties=snapshot_properties)
        self._added_delete_files: list[DataFile] = []

    def add_delete_file(self, delete_file: DataFile) -> RowDelta:
        if delete_file.content != DataFileContent.EQUALITY_DELETES:
            raise ValueError(f"not an equality delete file: {delete_file.file_path} ({delete_file.content})")
        self._added_delete_files.append(delete_file)
        return self

    def _commit(self) -> Any:
        if self._added_delete_files:
            metadata = self._transaction.table_metadata
            if metadata.format_version != 2:
                raise ValueError(f"delete files need an Iceberg format-version 2 table (this one is {metadata.format_version})")
            self._operation = Operation.OVERWRITE if self._added_data_files else Operation.DELETE
        return super()._commit()

    def _manifests(self) -> list[ManifestFile]:
        manifests = super()._manifests()
        if not self._added_delete_files:
            return manifests
        by_spec: dict[int, list[DataFile]] = {}
        for delete_file in self._added_delete_files:
            by_spec.setdefault(delete_file.spec_id, []).append(delete_file)
        delete_manifests = []
        for spec_id, files in sorted(by_spec.items()):
            writer = _DeleteManifestWriter(self.spec(spec_id), self.schema(), self.new_manifest_output(),
                                           self._snapshot_id, self._compression)
            with writer:
                for delete_file in files:
                    writer.add(ManifestEntry.from_args(
                        status=ManifestEntryStatus.ADDED, snapshot_id=self._snapshot_id, sequence_number=None,
                        file_sequence_number=None, data_file=delete_file,
                    ))
            delete_manifests.append(writer.to_manifest_file())
        return [*manifests, *delete_manifests]

    def _summary(self, snapshot_properties: dict[str, str] = {}) -> Summary:  # noqa: B006 (pyiceberg's signature)
        # pyiceberg's summary counts delete files by their content (added-equality-deletes, …).
        data_files = self._added_data_files
        self._added_data_files = [*data_files, *self._added_delete_files]
        try:
            return super()._summary(snapshot_properties)
        finally:
            self._added_data_files = data_files


def row_delta(transaction: Transaction, snapshot_properties: dict[str, str],
              data_files: Sequence[DataFile], delete_files: Sequence[DataFile]) -> int:
    """Stage one snapshot with ``data_files`` and ``delete_files`` on ``transaction``; return its id."""
    delta = RowDelta(transaction, snapshot_properties)
    with delta:
        for data_file in data_files:
            delta.append_data_file(data_file)
        for delete_file in delete_files:
            delta.add_delete_file(delete_file)
        snapshot_id = delta.snapshot_id
    return snapshot_id


# -- rewrites (maintenance) -------------------------------------------------------------------------


@dataclass(frozen=True)
class LiveFile:
    """A data or delete file live in a snapshot, with the sequence numbers its manifest entry holds.

    ``data_sequence_number`` is the entry's (inherited) data sequence number: an equality delete
    applies to a data file iff the delete's is strictly greater than the data file's.
    """

    data_file: DataFile
    data_sequence_number: int
    manifest_path: str

    @property
    def path(self) -> str:
        return self.data_file.file_path


def live_files(table: Table, snapshot: Snapshot) -> list[LiveFile]:
    """Every data and delete file live in ``snapshot`` (entries ADDED or EXISTING), with their sequence numbers."""
    files = []
    for manifest in snapshot.manifests(table.io):
        for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=True):
            sequence_number = entry.sequence_number
            if sequence_number is None:  # inherited by fetch_manifest_entry; never None on a committed snapshot
                raise ValueError(f"manifest entry of {entry.data_file.file_path} has no sequence number")
            files.append(LiveFile(entry.data_file, sequence_number, manifest.manifest_path))
    return files


class RewriteFiles(_SnapshotProducer["RewriteFiles"]):
    """One ``replace`` snapshot removing data and delete files and adding data files, like Iceberg's ``RewriteFiles``.

    The added data files get the explicit data sequence number ``data_sequence_number`` (Iceberg's
    ``RewriteFiles.dataSequenceNumber``: the sequence number of the snapshot the rewrite planned
    from), so every equality delete committed after that snapshot still applies to them; their file
    sequence number is the new snapshot's. Manifests holding a removed file are rewritten with that
    entry ``DELETED`` and the others ``EXISTING`` (sequence numbers kept); other manifests are kept
    as they are. Raises ``ValueError`` when a file to remove is not live in the parent snapshot.
    """

    def __init__(self, transaction: Transaction, snapshot_properties: dict[str, str], removed: Sequence[str],
                 added: Sequence[DataFile], data_sequence_number: int):
        super().__init__(operation=Operation.REPLACE, transaction=transaction, io=transaction._table.io,
                         branch=MAIN_BRANCH, snapshot_properties=snapshot_properties)
        self._removed_paths = set(removed)
        self._data_sequence_number = data_sequence_number
        for data_file in added:
            if data_file.content != DataFileContent.DATA:
                raise ValueError(f"only data files can be added by a rewrite: {data_file.file_path}")
            self._added_data_files.append(data_file)

    def _deleted_entries(self) -> list[ManifestEntry]:
        return []  # removed entries are written DELETED inside the rewritten manifests

    def _existing_manifests(self) -> list[ManifestFile]:
        parent = self._transaction.table_metadata.snapshot_by_id(self._parent_snapshot_id) \
            if self._parent_snapshot_id is not None else None
        if parent is None:
            raise ValueError("a rewrite needs a parent snapshot")
        kept: list[ManifestFile] = []
        found: set[str] = set()
        for manifest in parent.manifests(io=self._io):
            entries = manifest.fetch_manifest_entry(self._io, discard_deleted=True)
            hits = [e for e in entries if e.data_file.file_path in self._removed_paths]
            if not hits:
                if manifest.has_added_files() or manifest.has_existing_files():
                    kept.append(manifest)
                continue
            spec = self.spec(manifest.partition_spec_id)
            if manifest.content == ManifestContent.DELETES:
                writer: ManifestWriterV2 = _DeleteManifestWriter(spec, self.schema(), self.new_manifest_output(),
                                                                 self._snapshot_id, self._compression)
            else:
                writer = ManifestWriterV2(spec, self.schema(), self.new_manifest_output(), self._snapshot_id,
                                          self._compression)
            with writer:
                for entry in entries:
                    if entry.data_file.file_path in self._removed_paths:
                        found.add(entry.data_file.file_path)
                        self._deleted_data_files.add(entry.data_file)
                        writer.delete(entry)
                    else:
                        writer.existing(entry)
            kept.append(writer.to_manifest_file())
        missing = self._removed_paths - found
        if missing:
            raise ValueError(f"files to rewrite are not live in snapshot {parent.snapshot_id}: {sorted(missing)[:5]}")
        return kept

    def _manifests(self) -> list[ManifestFile]:
        existing = self._existing_manifests()
        by_spec: dict[int, list[DataFile]] = {}
        for data_file in self._added_data_files:
            by_spec.setdefault(data_file.spec_id, []).append(data_file)
        added = []
        for spec_id, files in sorted(by_spec.items()):
            with self.new_manifest_writer(self.spec(spec_id)) as writer:
                for data_file in files:
                    writer.add(ManifestEntry.from_args(
                        status=ManifestEntryStatus.ADDED, snapshot_id=self._snapshot_id,
                        sequence_number=self._data_sequence_number, file_sequence_number=None, data_file=data_file,
                    ))
            added.append(writer.to_manifest_file())
        return [*added, *existing]

    def _summary(self, snapshot_properties: dict[str, str] = {}) -> Summary:  # noqa: B006 (pyiceberg's signature)
        # pyiceberg totals the summary only for append, overwrite and delete; the counts of a replace are the same.
        self._operation = Operation.OVERWRITE
        try:
            summary = super()._summary(snapshot_properties)
        finally:
            self._operation = Operation.REPLACE
        return Summary(Operation.REPLACE, **summary.additional_properties)


def rewrite_files(transaction: Transaction, snapshot_properties: dict[str, str], removed: Sequence[str],
                  added: Sequence[DataFile], data_sequence_number: int) -> int:
    """Stage one ``replace`` snapshot on ``transaction`` (see :class:`RewriteFiles`); return its id."""
    rewrite = RewriteFiles(transaction, snapshot_properties, removed, added, data_sequence_number)
    with rewrite:
        snapshot_id = rewrite.snapshot_id
    return snapshot_id


def expire_snapshots(transaction: Transaction, snapshot_ids: Sequence[int]) -> None:
    """Stage the removal of ``snapshot_ids`` on ``transaction`` (pyiceberg's ExpireSnapshots, which refuses the
    head of a branch or tag with ``ValueError``: leave them out)."""
    ExpireSnapshots(transaction).by_ids(list(snapshot_ids)).commit()


def main_head_requirement(metadata: TableMetadata) -> TableRequirement:
    """``assert-ref-snapshot-id(main == head)``: a metadata-only commit (expiry) swaps against the head it checked."""
    return AssertRefSnapshotId(ref=MAIN_BRANCH, snapshot_id=metadata.current_snapshot_id)  # type: ignore[call-arg]
