"""The pyiceberg internals the sink relies on, all in one place (written against pyiceberg 0.12).

pyiceberg has no public API for these: committing a transaction with requirements of our own and
without its retry-and-rebase loop, the id of the snapshot a transaction will add, converting a
partition value to its stored form, column statistics from a Parquet footer, data locations for
a partition path, adding a partition spec without making it the default, reading a data file's rows
in a table's schema without the positions deleted from it, and committing delete
files (pyiceberg 0.12 writes no delete manifests: :class:`RowDelta` adds data files and equality
deletes, position delete files or deletion vectors in one snapshot and removes the DVs they
replace, as Iceberg's ``RowDelta`` does). The committer and the writer call only this module for
them, and tests/unit/test_iceberg_internals.py fails loudly, naming the call, when an upgrade
changes one.

Format version 3 (deletion vectors) needs more than pyiceberg 0.12 does; what is worked around here:

- Table metadata: ``TableMetadataV3.model_dump_json`` raises ``NotImplementedError``, so no catalog
  that writes metadata itself (SqlCatalog) can create or commit a v3 table.
  :func:`install_v3_metadata_writer`, called once at start-up by what may write v3 metadata (the job,
  ``SyncJob``), replaces it with pyiceberg's own v2 serialization plus the required ``next-row-id`` (0
  for a new table, which pyiceberg leaves unset): :func:`next_row_id`. Importing this module patches nothing.
- Manifests and manifest lists: pyiceberg writes v1/v2 only. :class:`_ManifestWriter` writes v2 and
  v3 manifests (v2 with ``referenced_data_file``, as Java's ``V2Metadata``); for v3 the producers
  write the manifest list themselves (:class:`_ManifestListWriterV3`, assigning data manifests their
  ``first_row_id``) and set the snapshot's ``first-row-id`` and ``added-rows`` (pyiceberg sets no
  ``added-rows``, and then loses the table's ``next-row-id``).
- Reading: pyiceberg reads manifests and manifest lists with the v2 fields, dropping
  ``referenced_data_file``, ``content_offset``, ``content_size_in_bytes`` and ``first_row_id``;
  :func:`manifest_files` and :func:`manifest_entries` read every field, and carried or rewritten
  manifests keep them.
- DataFile: pyiceberg's record has no properties for the v3 fields; :func:`full_data_file` builds
  one with them and :func:`referenced_data_file`, :func:`content_offset`, … read them.
"""

from __future__ import annotations

import logging
import uuid
from collections import Counter
from collections.abc import Callable, Collection, Iterator, MutableMapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from pyiceberg.avro.codecs import AvroCompressionCodec
from pyiceberg.avro.file import AvroFile, AvroOutputFile
from pyiceberg.catalog import Catalog
from pyiceberg.expressions import AlwaysTrue
from pyiceberg.io import FileIO, OutputFile
from pyiceberg.io.pyarrow import (
    DataFileStatistics,
    MetricModeTypes,
    MetricsMode,
    StatisticsCollector,
    _task_to_record_batches,
    compute_statistics_plan,
    data_file_statistics_from_parquet_metadata,
    match_metrics_mode,
    parquet_path_to_id_mapping,
)
from pyiceberg.manifest import (
    DATA_FILE_TYPE,
    MANIFEST_ENTRY_SCHEMAS,
    MANIFEST_LIST_FILE_SCHEMAS,
    DataFile,
    DataFileContent,
    FileFormat,
    ManifestContent,
    ManifestEntry,
    ManifestEntryStatus,
    ManifestFile,
    ManifestListWriterV2,
    ManifestWriter,
    ManifestWriterV2,
    PartitionFieldSummary,
    _inherit_from_manifest,
    data_file_with_partition,
    manifest_entry_schema_with_data_file,
)
from pyiceberg.partitioning import PartitionSpec, _to_partition_representation
from pyiceberg.schema import Schema
from pyiceberg.table import CommitTableResponse, FileScanTask, Table, TableProperties, Transaction
from pyiceberg.table.locations import LocationProvider
from pyiceberg.table.metadata import TableMetadata, TableMetadataV3
from pyiceberg.table.name_mapping import NameMapping
from pyiceberg.table.refs import MAIN_BRANCH, SnapshotRefType
from pyiceberg.table.snapshots import Operation, Snapshot, Summary
from pyiceberg.table.update import (
    AddPartitionSpecUpdate,
    AddSnapshotUpdate,
    AssertLastAssignedPartitionId,
    AssertRefSnapshotId,
    SetSnapshotRefUpdate,
    TableRequirement,
    UpdatesAndRequirements,
)
from pyiceberg.table.update.snapshot import (
    ExpireSnapshots,
    _FastAppendFiles,
    _new_manifest_list_file_name,
    _SnapshotProducer,
)
from pyiceberg.typedef import IcebergBaseModel, TableVersion
from pyiceberg.types import (
    BinaryType,
    IcebergType,
    IntegerType,
    ListType,
    MapType,
    NestedField,
    StringType,
    StructType,
)

from icebergsync import protocol
from spark_app.iceberg.cut import TableChange, commit_cut


def commit_transaction(catalog: Catalog, table: Table, transaction: Transaction,
                       *extra_requirements: TableRequirement) -> CommitTableResponse:
    """Send ``transaction``'s updates once, with its requirements plus ``extra_requirements``: the cut of one
    table (:func:`commit_transactions`)."""
    [response] = commit_transactions(catalog, [TableChange(table, transaction, extra_requirements)])
    return response


def commit_transactions(catalog: Catalog, changes: Sequence[TableChange]) -> list[CommitTableResponse]:
    """Send every change once, as one cut (spark_app/iceberg/cut.py: atomic, or refused for several tables
    where the catalog cannot commit them atomically).

    Unlike ``Transaction.commit_transaction`` nothing is retried or rebased: a conflict raises
    ``CommitFailedException`` for the caller to re-check and rebuild.
    """
    responses = commit_cut(catalog, changes)
    # As pyiceberg's own commits do: metadata files beyond write.metadata.previous-versions-max go when
    # write.metadata.delete-after-commit.enabled is set. The commit has landed: a failed delete only leaves a file.
    for change, response in zip(changes, responses, strict=True):
        try:
            Catalog._delete_old_metadata(change.table.io, change.table.metadata, response.metadata)
        except Exception as exc:
            log.warning("could not delete metadata files the commit to %s retired: %s", change.table.name(), exc)
    return responses


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
    """Iceberg column statistics (counts, bounds, sizes) of a Parquet file, from its footer. A field of a struct
    (outside arrays and maps) has bounds like a top-level column, as Iceberg's Java writer (1.10, ``ParquetMetrics``)
    gives them where pyiceberg keeps only counts; what lies inside an array or a map has its Parquet column's counts
    and no bounds."""
    return data_file_statistics_from_parquet_metadata(
        parquet_metadata=metadata,
        stats_columns=_statistics_plan(schema, table_properties),
        parquet_column_mapping=parquet_path_to_id_mapping(schema),
    )


def _statistics_plan(schema: Schema, table_properties: dict[str, str]) -> dict[int, StatisticsCollector]:
    plan = compute_statistics_plan(schema, table_properties)
    repeated = _inside_lists_and_maps(schema.as_struct(), inside=False)
    default_mode = table_properties.get(TableProperties.DEFAULT_WRITE_METRICS_MODE,
                                        TableProperties.DEFAULT_WRITE_METRICS_MODE_DEFAULT)
    for field_id, collector in plan.items():
        if "." in collector.column_name and field_id not in repeated:  # a struct's field: as a top-level column
            mode = match_metrics_mode(table_properties.get(
                f"{TableProperties.METRICS_MODE_COLUMN_CONF_PREFIX}.{collector.column_name}", default_mode))
            if mode.type == MetricModeTypes.TRUNCATE and not isinstance(collector.iceberg_type, StringType | BinaryType):
                mode = MetricsMode(MetricModeTypes.FULL)
            plan[field_id] = replace(collector, mode=mode)
    return plan


def _inside_lists_and_maps(struct: StructType, inside: bool) -> set[int]:
    """The ids of the fields of ``struct`` (at any depth) that lie inside a list or a map."""
    found: set[int] = set()

    def visit(field_id: int, field_type: IcebergType, within: bool) -> None:
        if within:
            found.add(field_id)
        if isinstance(field_type, StructType):
            found.update(_inside_lists_and_maps(field_type, within))
        elif isinstance(field_type, ListType):
            visit(field_type.element_id, field_type.element_type, True)
        elif isinstance(field_type, MapType):
            visit(field_type.key_id, field_type.key_type, True)
            visit(field_type.value_id, field_type.value_type, True)

    for field in struct.fields:
        visit(field.field_id, field.field_type, inside)
    return found


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


# -- content files with every field of the v3 schema -------------------------------------------------

log = logging.getLogger(__name__)
_FULL_FILE_TYPE = DATA_FILE_TYPE[3]
_FILE_FIELD = {field.name: position for position, field in enumerate(_FULL_FILE_TYPE.fields)}
_V3_ONLY_FILE_FIELD_IDS = frozenset({142, 144, 145})  # first_row_id, content_offset, content_size_in_bytes
_FULL_LIST_SCHEMA = MANIFEST_LIST_FILE_SCHEMAS[3]
_MANIFEST_FIRST_ROW_ID = next(i for i, f in enumerate(_FULL_LIST_SCHEMA.fields) if f.name == "first_row_id")


def full_data_file(**arguments: Any) -> DataFile:
    """A DataFile with every field of the v3 schema (``referenced_data_file``, ``content_offset``, …).

    pyiceberg 0.12 builds and reads DataFiles with the v2 fields only unless told otherwise; the v3
    fields follow the v2 ones, so a v2 record is a prefix of a full one.
    """
    return DataFile.from_args(_table_format_version=3, **arguments)


def _full(data_file: DataFile) -> DataFile:
    """``data_file`` with every field of the v3 schema (a v2 record padded with nulls), keeping its spec id."""
    missing = len(_FULL_FILE_TYPE.fields) - len(data_file)
    if missing == 0:
        return data_file
    full = DataFile(*(data_file[i] for i in range(len(data_file))), *([None] * missing))
    if hasattr(data_file, "_spec_id"):
        full.spec_id = data_file.spec_id
    return full


def _file_field(data_file: DataFile, name: str) -> Any:
    position = _FILE_FIELD[name]
    return data_file[position] if position < len(data_file) else None


def referenced_data_file(delete_file: DataFile) -> str | None:
    """The one data file a position delete file or DV references (None: any)."""
    return _file_field(delete_file, "referenced_data_file")


def content_offset(delete_file: DataFile) -> int | None:
    """Where a DV's blob starts in its Puffin file."""
    return _file_field(delete_file, "content_offset")


def content_size_in_bytes(delete_file: DataFile) -> int | None:
    """The length of a DV's blob."""
    return _file_field(delete_file, "content_size_in_bytes")


def first_row_id(data_file: DataFile) -> int | None:
    """The row id of a v3 data file's first row (inherited from its manifest when read)."""
    return _file_field(data_file, "first_row_id")


def is_deletion_vector(delete_file: DataFile) -> bool:
    return delete_file.content == DataFileContent.POSITION_DELETES and delete_file.file_format == FileFormat.PUFFIN


FileKey = tuple[str, int | None]


def file_key(content_file: DataFile) -> FileKey:
    """What tells content files apart: the DVs in one Puffin file share its path, not their offset."""
    return content_file.file_path, content_offset(content_file)


# -- manifests and manifest lists, read and written with every field -------------------------------


def manifest_files(io: FileIO, snapshot: Snapshot) -> list[ManifestFile]:
    """The manifests of ``snapshot``, with ``first_row_id`` (``Snapshot.manifests`` reads the v2 fields only)."""
    with AvroFile[ManifestFile](io.new_input(snapshot.manifest_list), _FULL_LIST_SCHEMA,
                                read_types={-1: ManifestFile, 508: PartitionFieldSummary},
                                read_enums={517: ManifestContent}) as reader:
        return list(reader)


def manifest_first_row_id(manifest: ManifestFile) -> int | None:
    return manifest[_MANIFEST_FIRST_ROW_ID] if len(manifest) > _MANIFEST_FIRST_ROW_ID else None


def manifest_entries(io: FileIO, manifest: ManifestFile, discard_deleted: bool = True) -> list[ManifestEntry]:
    """The entries of ``manifest`` with every field of the v3 schema and what they inherit from it.

    Sequence numbers, snapshot id and spec id as pyiceberg's ``fetch_manifest_entry`` inherits them
    (which drops the v3 fields); a data file without a ``first_row_id`` gets the manifest's plus the
    record counts of the live data files before it that had none (spec, "First Row ID Inheritance").
    """
    with AvroFile[ManifestEntry](io.new_input(manifest.manifest_path), MANIFEST_ENTRY_SCHEMAS[3],
                                 read_types={-1: ManifestEntry, 2: DataFile},
                                 read_enums={0: ManifestEntryStatus, 101: FileFormat, 134: DataFileContent}) as reader:
        entries = [_inherit_from_manifest(entry, manifest) for entry in reader]
    next_row_id = manifest_first_row_id(manifest)
    if next_row_id is not None:
        for entry in entries:
            if entry.status != ManifestEntryStatus.DELETED and first_row_id(entry.data_file) is None:
                entry.data_file[_FILE_FIELD["first_row_id"]] = next_row_id
                next_row_id += entry.data_file.record_count
    return [entry for entry in entries if not discard_deleted or entry.status != ManifestEntryStatus.DELETED]


EQUALITY_IDS_FIELD_ID = 135


def _manifest_file_type(partition_type: StructType, format_version: int) -> StructType:
    """The ``data_file`` struct a manifest is written with.

    Format 3: every field; format 2: the v2 fields plus ``referenced_data_file``, as Java's
    ``V2Metadata`` has it (pyiceberg 0.12 leaves it out). ``equality_ids`` is ``list<int>`` as in the
    Iceberg spec: pyiceberg declares ``list<long>`` and Iceberg's Java reader then fails on the
    manifest (``ClassCastException: Long cannot be cast to Integer`` in ``BaseFile``); Avro encodes
    int and long alike, so only the declared type changes.
    """
    fields = []
    for field in data_file_with_partition(partition_type, 3).fields:
        if format_version < 3 and field.field_id in _V3_ONLY_FILE_FIELD_IDS:
            continue
        if field.field_id == EQUALITY_IDS_FIELD_ID and isinstance(field.field_type, ListType):
            field = NestedField(field.field_id, field.name,
                                ListType(field.field_type.element_id, IntegerType(), element_required=True),
                                required=field.required, doc=field.doc)
        fields.append(field)
    return StructType(*fields)


class _ManifestWriter(ManifestWriterV2):
    """A manifest of data or delete files of a format-version 2 or 3 table (pyiceberg 0.12 writes v2 data manifests only)."""

    def __init__(self, spec: PartitionSpec, schema: Schema, output_file: OutputFile, snapshot_id: int,
                 compression: AvroCompressionCodec, format_version: TableVersion, content: ManifestContent):
        super().__init__(spec, schema, output_file, snapshot_id, compression)
        self._format_version: TableVersion = format_version
        self._content = content

    def content(self) -> ManifestContent:
        return self._content

    @property
    def version(self) -> TableVersion:
        return self._format_version

    @property
    def _meta(self) -> dict[str, str]:
        return {**super()._meta, "content": "deletes" if self._content == ManifestContent.DELETES else "data"}

    def new_writer(self) -> AvroOutputFile[ManifestEntry]:
        partition_type = self._spec.partition_type(self._schema)
        return AvroOutputFile[ManifestEntry](
            output_file=self._output_file,
            file_schema=manifest_entry_schema_with_data_file(self.version, _manifest_file_type(partition_type, self.version)),
            record_schema=manifest_entry_schema_with_data_file(3, _manifest_file_type(partition_type, 3)),
            schema_name="manifest_entry",
            metadata=self._meta,
        )

    def prepare_entry(self, entry: ManifestEntry) -> ManifestEntry:
        entry = super().prepare_entry(entry)
        entry.data_file = _full(entry.data_file)
        return entry


class _ManifestListWriterV3(ManifestListWriterV2):
    """A format-version 3 manifest list: a data manifest without ``first_row_id`` gets the next free row id.

    As Java's ``ManifestListWriter.V3Writer``: the first such manifest gets the snapshot's
    ``first-row-id``, each next one the previous plus its added and existing row counts;
    :attr:`next_row_id` ends one past the last id assigned (the snapshot's ``added-rows`` is the
    difference). Existing manifests keep theirs, delete manifests have none.
    """

    def __init__(self, output_file: OutputFile, snapshot_id: int, parent_snapshot_id: int | None, sequence_number: int,
                 first_row_id: int, compression: AvroCompressionCodec):
        super().__init__(output_file, snapshot_id, parent_snapshot_id, sequence_number, compression)
        self._format_version = 3
        self._meta = {**self._meta, "first-row-id": str(first_row_id), "format-version": "3"}
        self.next_row_id = first_row_id

    def __enter__(self) -> _ManifestListWriterV3:
        self._writer = AvroOutputFile[ManifestFile](output_file=self._output_file, record_schema=_FULL_LIST_SCHEMA,
                                                    file_schema=_FULL_LIST_SCHEMA, schema_name="manifest_file",
                                                    metadata=self._meta)
        self._writer.__enter__()
        return self

    def prepare_manifest(self, manifest_file: ManifestFile) -> ManifestFile:
        prepared = super().prepare_manifest(manifest_file)
        full = ManifestFile(*(prepared[i] for i in range(len(prepared))),
                            *([None] * (len(_FULL_LIST_SCHEMA.fields) - len(prepared))))
        if full.content == ManifestContent.DATA and manifest_first_row_id(full) is None:
            full[_MANIFEST_FIRST_ROW_ID] = self.next_row_id
            self.next_row_id += (full.added_rows_count or 0) + (full.existing_rows_count or 0)
        return full


# -- format-version 3 table metadata ------------------------------------------------------------------


def next_row_id(metadata: TableMetadata) -> int:
    """A format-version 3 table's ``next-row-id``: the first row id its next snapshot assigns.

    pyiceberg 0.12 leaves it None in a new table's metadata, where the spec's initial value is 0.
    It also sets it to None when it adds a snapshot without ``added-rows`` (its own producers do):
    with row ids assigned already that is an error, never a silent restart at 0.
    """
    value = getattr(metadata, "next_row_id", None)
    if value is not None:
        return value
    if any(snapshot.first_row_id is not None for snapshot in metadata.snapshots):
        raise ValueError("the table's next-row-id was lost though its snapshots assigned row ids")
    return 0


_pyiceberg_v3_metadata_json = TableMetadataV3.model_dump_json  # raises NotImplementedError in pyiceberg 0.12


def _v3_metadata_json(self: TableMetadataV3, exclude_none: bool = True, exclude: Any | None = None,
                      by_alias: bool = True, **kwargs: Any) -> str:
    """Format-version 3 table metadata as JSON: as pyiceberg writes v2, with the spec's required ``next-row-id``."""
    complete = self.model_copy(update={"next_row_id": next_row_id(self)})
    return IcebergBaseModel.model_dump_json(complete, exclude_none=exclude_none, exclude=exclude, by_alias=by_alias,
                                            **kwargs)


def install_v3_metadata_writer() -> None:
    """Let pyiceberg write format-version 3 table metadata (process-wide; calling it again changes nothing)."""
    TableMetadataV3.model_dump_json = _v3_metadata_json  # type: ignore[method-assign]


# -- snapshot producers -------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Carried:
    """The parent snapshot's manifests as the new snapshot keeps them, with what reading them found."""

    manifests: list[ManifestFile]
    removed: list[DataFile]  # files now written DELETED
    live: list[DataFile]  # the other live files of the manifests that were read


class _AttemptCommitUUID(uuid.UUID):
    """A commit's uuid whose text starts with the file prefix of the sink's attempt that commits: pyiceberg names a
    commit's manifests ``<commit uuid>-m<n>.avro`` and its manifest list ``snap-<id>-<n>-<commit uuid>.avro``, so
    these carry the attempt like its staged files, and the start-up cleanup finds those that never landed."""

    prefix: str

    def __init__(self, prefix: str, value: int | None = None):
        super().__init__(int=uuid.uuid4().int if value is None else value)
        object.__setattr__(self, "prefix", prefix)

    def __str__(self) -> str:
        return f"{self.prefix}-{super().__str__()}"

    def __reduce__(self) -> tuple[type[_AttemptCommitUUID], tuple[str, int]]:  # copies and pickles keep the prefix
        return type(self), (self.prefix, self.int)


def attempt_commit_uuid(snapshot_properties: dict[str, str]) -> uuid.UUID:
    """The commit uuid of a snapshot with these summary properties: named for the sink's attempt when they name
    one (:func:`icebergsync.protocol.file_owner` reads it back)."""
    writer = protocol.summary_writer(snapshot_properties)
    return _AttemptCommitUUID(protocol.attempt_file_prefix(writer)) if writer is not None else uuid.uuid4()


def fast_append(transaction: Transaction, snapshot_properties: dict[str, str]) -> _FastAppendFiles:
    """pyiceberg's fast append, its manifests named for the committing attempt (:func:`attempt_commit_uuid`)."""
    append = transaction.update_snapshot(snapshot_properties=snapshot_properties).fast_append()
    append.commit_uuid = attempt_commit_uuid(snapshot_properties)
    return append


def written_metadata(transaction: Transaction) -> list[str]:
    """The manifests and manifest lists the snapshots of ``transaction`` wrote (none of them live until it lands)."""
    return [path for producer in transaction._snapshot_producers
            for path in (*producer._written_manifests, *producer._written_manifest_lists)]


class _RowLevelProducer(_SnapshotProducer[Any]):
    """A snapshot producer for format-version 2 and 3 tables.

    Its manifests keep every field of a content file (see :class:`_ManifestWriter`); for format 3
    it writes the manifest list itself and sets the snapshot's ``first-row-id`` and ``added-rows``
    (row lineage), which pyiceberg 0.12 does not. Its manifests are named for the committing attempt
    (:func:`attempt_commit_uuid`).
    """

    def __init__(self, **arguments: Any):
        super().__init__(**arguments, commit_uuid=attempt_commit_uuid(arguments["snapshot_properties"]))

    def _deleted_entries(self) -> list[ManifestEntry]:
        return []  # removed entries are written DELETED inside the rewritten manifests

    def _manifest_writer(self, spec: PartitionSpec, content: ManifestContent) -> _ManifestWriter:
        return _ManifestWriter(spec, self.schema(), self.new_manifest_output(), self._snapshot_id, self._compression,
                               self._transaction.table_metadata.format_version, content)

    def new_manifest_writer(self, spec: PartitionSpec) -> ManifestWriter:
        return self._manifest_writer(spec, ManifestContent.DATA)

    def _carry_manifests(self, removes: Callable[[DataFile], bool], reads: Callable[[ManifestFile], bool]) -> _Carried:
        """The parent's manifests for the new snapshot: those ``reads`` selects are read, and rewritten when they hold
        a live file that ``removes`` selects (its entry DELETED, the others EXISTING, sequence numbers kept); the
        others are kept as they are (manifests left with no live file are dropped)."""
        parent = self._transaction.table_metadata.snapshot_by_id(self._parent_snapshot_id) \
            if self._parent_snapshot_id is not None else None
        carried = _Carried([], [], [])
        for manifest in manifest_files(self._io, parent) if parent is not None else []:
            entries = manifest_entries(self._io, manifest) if reads(manifest) else []
            hits = [e for e in entries if removes(e.data_file)]
            carried.live.extend(e.data_file for e in entries if not removes(e.data_file))
            if not hits:
                if manifest.has_added_files() or manifest.has_existing_files():
                    carried.manifests.append(manifest)
                continue
            with self._manifest_writer(self.spec(manifest.partition_spec_id), manifest.content) as writer:
                for entry in entries:
                    if removes(entry.data_file):
                        carried.removed.append(entry.data_file)
                        writer.delete(entry)
                    else:
                        writer.existing(entry)
            carried.manifests.append(writer.to_manifest_file())
        return carried

    def _added_manifests(self, files: Sequence[DataFile], content: ManifestContent,
                         sequence_number: int | None) -> list[ManifestFile]:
        """One manifest per spec with ``files`` ADDED, with an explicit data ``sequence_number`` (None: the
        new snapshot's, inherited)."""
        by_spec: dict[int, list[DataFile]] = {}
        for content_file in files:
            by_spec.setdefault(content_file.spec_id, []).append(content_file)
        manifests = []
        for spec_id, spec_files in sorted(by_spec.items()):
            with self._manifest_writer(self.spec(spec_id), content) as writer:
                for content_file in spec_files:
                    writer.add(ManifestEntry.from_args(
                        status=ManifestEntryStatus.ADDED, snapshot_id=self._snapshot_id, sequence_number=sequence_number,
                        file_sequence_number=None, data_file=content_file,
                    ))
            manifests.append(writer.to_manifest_file())
        return manifests

    def _summary_counting(self, snapshot_properties: dict[str, str], added_deletes: Sequence[DataFile],
                          removed: Sequence[DataFile]) -> Summary:
        """pyiceberg's summary, which counts files by their content, with ``added_deletes`` counted as added and
        ``removed`` (data and delete files) as removed; DVs counted apart."""
        # Removed files go in as a list: the DVs of one Puffin file share its path, a set would merge them.
        data_files, deleted = self._added_data_files, self._deleted_data_files
        self._added_data_files = [*data_files, *added_deletes]
        self._deleted_data_files = removed  # type: ignore[assignment]
        try:
            summary = _SnapshotProducer._summary(self, snapshot_properties)
        finally:
            self._added_data_files, self._deleted_data_files = data_files, deleted
        return _count_dvs_apart(summary, added_deletes, removed)

    def _replace_summary(self, snapshot_properties: dict[str, str], added_deletes: Sequence[DataFile],
                         removed: Sequence[DataFile]) -> Summary:
        """The summary of a ``replace`` snapshot, counted as :meth:`_summary_counting` counts."""
        # pyiceberg totals the summary only for append, overwrite and delete; the counts of a replace are the same.
        self._operation = Operation.OVERWRITE
        try:
            summary = self._summary_counting(snapshot_properties, added_deletes, removed)
        finally:
            self._operation = Operation.REPLACE
        return Summary(Operation.REPLACE, **summary.additional_properties)

    def _commit(self) -> UpdatesAndRequirements:
        metadata = self._transaction.table_metadata
        if metadata.format_version < 3:
            return super()._commit()
        manifests = self._manifests()
        sequence_number = metadata.next_sequence_number()
        summary = self._summary(self.snapshot_properties)
        list_path = self._transaction._table.location_provider().new_metadata_location(
            _new_manifest_list_file_name(snapshot_id=self._snapshot_id, attempt=0, commit_uuid=self.commit_uuid))
        self._written_manifest_lists.append(list_path)
        first_row = next_row_id(metadata)
        with _ManifestListWriterV3(self._io.new_output(list_path), self._snapshot_id, self._parent_snapshot_id,
                                   sequence_number, first_row, self._compression) as writer:
            writer.add_manifests(manifests)
        snapshot = Snapshot(snapshot_id=self._snapshot_id, parent_snapshot_id=self._parent_snapshot_id,
                            manifest_list=list_path, sequence_number=sequence_number, summary=summary,
                            schema_id=metadata.current_schema_id, first_row_id=first_row,
                            added_rows=writer.next_row_id - first_row)  # type: ignore[call-arg]
        head = metadata.refs[MAIN_BRANCH].snapshot_id if MAIN_BRANCH in metadata.refs else None
        return ((AddSnapshotUpdate(snapshot=snapshot),
                 SetSnapshotRefUpdate(snapshot_id=self._snapshot_id, parent_snapshot_id=self._parent_snapshot_id,
                                      ref_name=MAIN_BRANCH, type=SnapshotRefType.BRANCH)),  # type: ignore[call-arg]
                (AssertRefSnapshotId(snapshot_id=head, ref=MAIN_BRANCH),))  # type: ignore[call-arg]


def _count_dvs_apart(summary: Summary, added: Sequence[DataFile], removed: Sequence[DataFile]) -> Summary:
    """``summary`` with DVs counted as ``added-dvs``/``removed-dvs`` instead of position delete files, as Java does."""
    properties = dict(summary.additional_properties)
    for prefix, files in (("added", added), ("removed", removed)):
        dvs = sum(1 for f in files if is_deletion_vector(f))
        if dvs:
            key = f"{prefix}-position-delete-files"
            left = int(properties.pop(key, "0")) - dvs
            if left:
                properties[key] = str(left)
            properties[f"{prefix}-dvs"] = str(dvs)
    return Summary(summary.operation, **properties)


class RowDelta(_RowLevelProducer):
    """One snapshot adding data and delete files and removing delete files, like Iceberg's ``RowDelta``.

    Data files go into one data manifest under the default spec, added delete files into one delete
    manifest per spec; a removed delete file (the DV a new DV replaces) is written DELETED in a
    rewritten copy of its manifest, and so is a removed data file (a small file a keyed commit writes
    again, copy-on-write: its DV must be removed with it). The snapshot's operation is Iceberg's for a row delta:
    ``append`` for data files alone, ``delete`` for delete files alone, ``overwrite`` for both.
    Position deletes are position delete files in a format-version 2 table and deletion vectors in
    a format-version 3 one; the commit is refused when a data file would be left with two DVs or
    when a file to remove is not live in the parent snapshot. Use it as a context manager, like
    pyiceberg's snapshot producers.
    """

    def __init__(self, transaction: Transaction, snapshot_properties: dict[str, str]):
        super().__init__(operation=Operation.APPEND, transaction=transaction, io=transaction._table.io,
                         branch=MAIN_BRANCH, snapshot_properties=snapshot_properties)
        self._added_delete_files: list[DataFile] = []
        self._removed_delete_files: list[DataFile] = []
        self._removed_data_files: list[DataFile] = []

    def add_delete_file(self, delete_file: DataFile) -> RowDelta:
        _check_delete_file(delete_file, self._transaction.table_metadata.format_version)
        self._added_delete_files.append(delete_file)
        return self

    def remove_delete_file(self, delete_file: DataFile) -> RowDelta:
        if delete_file.content == DataFileContent.DATA:
            raise ValueError(f"not a delete file: {delete_file.file_path}")
        self._removed_delete_files.append(delete_file)
        return self

    def remove_data_file(self, data_file: DataFile) -> RowDelta:
        if data_file.content != DataFileContent.DATA:
            raise ValueError(f"not a data file: {data_file.file_path}")
        self._removed_data_files.append(data_file)
        return self

    def _commit(self) -> UpdatesAndRequirements:
        if self._added_delete_files or self._removed_delete_files or self._removed_data_files:
            version = self._transaction.table_metadata.format_version
            if version < 2:
                raise ValueError(f"delete files need an Iceberg format-version 2 or 3 table (this one is {version})")
            self._operation = Operation.OVERWRITE if self._added_data_files else Operation.DELETE
        return super()._commit()

    def _existing_manifests(self) -> list[ManifestFile]:
        removed_deletes = {file_key(f) for f in self._removed_delete_files}
        removed_data = {file_key(f) for f in self._removed_data_files}
        removed = removed_deletes | removed_data
        added_dvs = Counter(referenced_data_file(f) for f in self._added_delete_files if is_deletion_vector(f))
        carried = self._carry_manifests(
            lambda f: file_key(f) in removed,
            lambda m: (m.content == ManifestContent.DELETES and bool(removed_deletes or added_dvs or removed_data))
            or (m.content == ManifestContent.DATA and bool(removed_data)))
        missing = removed - {file_key(f) for f in carried.removed}
        if missing:
            raise ValueError(f"files to remove are not live in the parent snapshot: {sorted(missing)[:3]}")
        _check_deletion_vectors(self._added_delete_files, carried.live,
                                {f.file_path for f in self._removed_data_files})
        return carried.manifests

    def _manifests(self) -> list[ManifestFile]:
        manifests = super()._manifests()
        return [*manifests, *self._added_manifests(self._added_delete_files, ManifestContent.DELETES, None)]

    def _summary(self, snapshot_properties: dict[str, str] = {}) -> Summary:  # noqa: B006 (pyiceberg's signature)
        return self._summary_counting(snapshot_properties, self._added_delete_files,
                                      [*self._removed_data_files, *self._removed_delete_files])


def _check_deletion_vectors(added: Sequence[DataFile], live: Sequence[DataFile], removed_data: Collection[str] = ()) -> None:
    """The spec's rules for a commit's DVs, given the delete files it ``added`` and the others it leaves ``live``:
    a data file ends with at most one DV, and no DV is left on a data file it removes (``removed_data``)."""
    added_dvs = Counter(referenced_data_file(f) for f in added if is_deletion_vector(f))
    live_dvs = {referenced_data_file(f) for f in live if is_deletion_vector(f)}
    twice = sorted(str(path) for path, count in added_dvs.items() if count > 1 or path in live_dvs)
    if twice:
        raise ValueError(f"data files would have two deletion vectors: {twice[:3]} (the spec allows one; "
                         "remove the live one in the same commit, its positions merged into the new one)")
    dangling = sorted(str(path) for path in (live_dvs | added_dvs.keys()) & set(removed_data))
    if dangling:
        raise ValueError(f"deletion vectors of removed data files are left: {dangling[:3]} (the spec has them "
                         "removed in the same commit)")


def _check_delete_file(delete_file: DataFile, format_version: int) -> None:
    """Refuse what a table of ``format_version`` must not take: position delete files in v3, DVs in v2."""
    if delete_file.content == DataFileContent.EQUALITY_DELETES:
        return
    if delete_file.content != DataFileContent.POSITION_DELETES:
        raise ValueError(f"not a delete file: {delete_file.file_path} ({delete_file.content})")
    if not is_deletion_vector(delete_file):
        if format_version >= 3:
            raise ValueError(f"a format-version 3 table takes deletion vectors, not position delete files: "
                             f"{delete_file.file_path}")
        return
    if format_version < 3:
        raise ValueError(f"deletion vectors need a format-version 3 table: {delete_file.file_path}")
    if None in (referenced_data_file(delete_file), content_offset(delete_file), content_size_in_bytes(delete_file)):
        raise ValueError(f"a deletion vector needs referenced_data_file, content_offset and content_size_in_bytes: "
                         f"{delete_file.file_path}")


def row_delta(transaction: Transaction, snapshot_properties: dict[str, str], data_files: Sequence[DataFile],
              delete_files: Sequence[DataFile], removed_delete_files: Sequence[DataFile] = (),
              removed_data_files: Sequence[DataFile] = ()) -> int:
    """Stage one snapshot with ``data_files`` and ``delete_files`` added and ``removed_delete_files`` and
    ``removed_data_files`` removed on ``transaction``; return its id."""
    delta = RowDelta(transaction, snapshot_properties)
    with delta:
        for data_file in data_files:
            delta.append_data_file(data_file)
        for delete_file in delete_files:
            delta.add_delete_file(delete_file)
        for delete_file in removed_delete_files:
            delta.remove_delete_file(delete_file)
        for data_file in removed_data_files:
            delta.remove_data_file(data_file)
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

    @property
    def key(self) -> FileKey:
        """What tells it apart from the other live files (:func:`file_key`)."""
        return file_key(self.data_file)


def live_files(table: Table, snapshot: Snapshot,
               cache: MutableMapping[str, list[LiveFile]] | None = None) -> list[LiveFile]:
    """Every data and delete file live in ``snapshot`` (entries ADDED or EXISTING), with their sequence numbers.

    ``cache`` (manifest path -> its live files) saves reading a manifest again: a manifest never changes. It keeps
    the manifests of ``snapshot`` only (those an older head dropped are not needed again).
    """
    files = []
    manifests = manifest_files(table.io, snapshot)
    if cache is not None:
        current = {manifest.manifest_path for manifest in manifests}
        for path in [path for path in cache if path not in current]:
            del cache[path]
    for manifest in manifests:
        if cache is not None and manifest.manifest_path in cache:
            files.extend(cache[manifest.manifest_path])
            continue
        read = []
        for entry in manifest_entries(table.io, manifest):
            sequence_number = entry.sequence_number
            if sequence_number is None:  # inherited by manifest_entries; never None on a committed snapshot
                raise ValueError(f"manifest entry of {entry.data_file.file_path} has no sequence number")
            read.append(LiveFile(entry.data_file, sequence_number, manifest.manifest_path))
        if cache is not None:
            cache[manifest.manifest_path] = read
        files.extend(read)
    return files


def read_data_file(io: FileIO, data_file: DataFile, schema: Schema, spec: PartitionSpec, format_version: TableVersion,
                   name_mapping: NameMapping | None, deleted_positions: pa.Array | None) -> Iterator[pa.RecordBatch]:
    """The rows of ``data_file`` in ``schema`` (columns matched by field id, missing ones null, types promoted,
    as Iceberg readers project a file), without the rows at ``deleted_positions``; batch by batch.

    pyiceberg's own per-file reader (``_task_to_record_batches``), without its scan around it, which
    reads a whole file into memory before yielding any of it.
    """
    projected = {field_id for field_id in schema.field_ids
                 if not isinstance(schema.find_type(field_id), (MapType, ListType))}
    deletes = [pa.chunked_array([deleted_positions])] if deleted_positions is not None and len(deleted_positions) else None
    yield from _task_to_record_batches(io, FileScanTask(data_file), AlwaysTrue(), schema, schema, projected, deletes,
                                       True, name_mapping, spec, format_version)


class RewriteFiles(_RowLevelProducer):
    """One ``replace`` snapshot removing data and delete files and adding data files and position delete files or
    DVs, like Iceberg's ``RewriteFiles``.

    The added files get the explicit data sequence number ``data_sequence_number`` (Iceberg's
    ``RewriteFiles.dataSequenceNumber``: the sequence number of the snapshot the rewrite planned
    from), so every equality delete committed after that snapshot still applies to the added data
    files, and an added position delete file or DV applies to the data files it names as the ones it
    replaces did; their file sequence number is the new snapshot's. Files to remove are told apart by
    :func:`file_key` (a DV by its offset: the other DVs of its Puffin file stay). Manifests holding a
    removed file are rewritten with that entry ``DELETED`` and the others ``EXISTING`` (sequence
    numbers and ``first_row_id`` kept); other manifests are kept as they are. In a format-version 3
    table the manifest list assigns the added data files a ``first_row_id`` (their rows' ids unless
    the files hold ``_row_id`` values, as upkeep's replacements do: :mod:`spark_app.staging.lineage`)
    and the DV rules are checked: at most one per data file, none left on a removed data file.
    Raises ``ValueError`` when a file to remove is not live in the parent snapshot, when an added
    file is an equality delete file or of the wrong kind for the format, and when a DV rule would
    be broken.
    """

    def __init__(self, transaction: Transaction, snapshot_properties: dict[str, str], removed: Sequence[DataFile],
                 added: Sequence[DataFile], data_sequence_number: int):
        super().__init__(operation=Operation.REPLACE, transaction=transaction, io=transaction._table.io,
                         branch=MAIN_BRANCH, snapshot_properties=snapshot_properties)
        version = transaction.table_metadata.format_version
        self._removed_keys = {file_key(f) for f in removed}
        self._removed: list[DataFile] = []  # as found live: a list, the DVs of one Puffin file share its path
        self._data_sequence_number = data_sequence_number
        self._added_delete_files: list[DataFile] = []
        for content_file in added:
            if content_file.content == DataFileContent.DATA:
                self._added_data_files.append(content_file)
            elif content_file.content == DataFileContent.POSITION_DELETES:
                _check_delete_file(content_file, version)
                self._added_delete_files.append(content_file)
            else:
                raise ValueError(f"a rewrite adds data and position delete files, not {content_file.file_path} "
                                 f"({content_file.content})")

    def _existing_manifests(self) -> list[ManifestFile]:
        if self._parent_snapshot_id is None:
            raise ValueError("a rewrite needs a parent snapshot")
        carried = self._carry_manifests(lambda f: file_key(f) in self._removed_keys, lambda m: True)
        self._removed = carried.removed
        missing = self._removed_keys - {file_key(f) for f in carried.removed}
        if missing:
            raise ValueError(f"files to rewrite are not live in snapshot {self._parent_snapshot_id}: {sorted(missing)[:5]}")
        _check_deletion_vectors(self._added_delete_files, carried.live,
                                {f.file_path for f in carried.removed if f.content == DataFileContent.DATA})
        return carried.manifests

    def _manifests(self) -> list[ManifestFile]:
        existing = self._existing_manifests()
        return [*self._added_manifests(self._added_data_files, ManifestContent.DATA, self._data_sequence_number),
                *self._added_manifests(self._added_delete_files, ManifestContent.DELETES, self._data_sequence_number),
                *existing]

    def _summary(self, snapshot_properties: dict[str, str] = {}) -> Summary:  # noqa: B006 (pyiceberg's signature)
        return self._replace_summary(snapshot_properties, self._added_delete_files, self._removed)


def rewrite_files(transaction: Transaction, snapshot_properties: dict[str, str], removed: Sequence[DataFile],
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


class RewriteManifests(_RowLevelProducer):
    """One ``replace`` snapshot rewriting the live entries of some of the parent's manifests into fewer, like
    Iceberg's ``RewriteManifests``: no file is added or removed.

    Each bin of ``bins`` (manifests of one content and one partition spec) becomes one manifest holding
    their live entries ``EXISTING``, with their snapshot ids, data and file sequence numbers and (format 3)
    ``first_row_id`` kept as the parent had them (inherited values written out), so every delete applies to
    exactly the data files it applied to before; the entries they held ``DELETED`` are dropped, and the
    parent's other manifests are kept as they are. Raises ``ValueError`` when a manifest of ``bins`` is not
    in the parent snapshot or a bin mixes contents or specs.
    """

    def __init__(self, transaction: Transaction, snapshot_properties: dict[str, str],
                 bins: Sequence[Sequence[ManifestFile]]):
        super().__init__(operation=Operation.REPLACE, transaction=transaction, io=transaction._table.io,
                         branch=MAIN_BRANCH, snapshot_properties=snapshot_properties)
        for manifests in bins:
            if len({(m.content, m.partition_spec_id) for m in manifests}) != 1:
                raise ValueError(f"a bin of manifests to rewrite mixes contents or specs: {manifests[0].manifest_path}")
        self._bins = [list(manifests) for manifests in bins]

    def _existing_manifests(self) -> list[ManifestFile]:
        parent = self._transaction.table_metadata.snapshot_by_id(self._parent_snapshot_id) \
            if self._parent_snapshot_id is not None else None
        if parent is None:
            raise ValueError("a manifest rewrite needs a parent snapshot")
        manifests = manifest_files(self._io, parent)
        rewritten = {m.manifest_path for manifests in self._bins for m in manifests}
        missing = rewritten - {m.manifest_path for m in manifests}
        if missing:
            raise ValueError(f"manifests to rewrite are not in snapshot {parent.snapshot_id}: {sorted(missing)[:3]}")
        written = []
        for bin_manifests in self._bins:
            entries = [entry for manifest in bin_manifests for entry in manifest_entries(self._io, manifest)]
            if not entries:  # manifests of DELETED entries only (a compaction's): nothing of them is live any more
                continue
            first = bin_manifests[0]
            with self._manifest_writer(self.spec(first.partition_spec_id), first.content) as writer:
                for entry in entries:
                    writer.existing(entry)
            written.append(writer.to_manifest_file())
        return [*written, *(m for m in manifests if m.manifest_path not in rewritten)]

    def _summary(self, snapshot_properties: dict[str, str] = {}) -> Summary:  # noqa: B006 (pyiceberg's signature)
        return self._replace_summary(snapshot_properties, [], [])


def rewrite_manifests(transaction: Transaction, snapshot_properties: dict[str, str],
                      bins: Sequence[Sequence[ManifestFile]]) -> int:
    """Stage one ``replace`` snapshot on ``transaction`` merging each of ``bins`` into one manifest (see
    :class:`RewriteManifests`); return its id."""
    rewrite = RewriteManifests(transaction, snapshot_properties, bins)
    with rewrite:
        snapshot_id = rewrite.snapshot_id
    return snapshot_id
