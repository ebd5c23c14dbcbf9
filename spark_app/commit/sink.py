"""What a sink knows about its own commits, shared by every kind of commit it makes (docs/protocol.md): who writes,
its newest snapshots and frontier, the tables it pinned, and the checks and snapshots built from them."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from pyiceberg.catalog import Catalog
from pyiceberg.manifest import DataFile, DataFileContent
from pyiceberg.table import Table, Transaction
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.snapshots import Snapshot

from icebergsync import protocol
from icebergsync.errors import FencedError, IcebergSyncError, ProgressConflictError
from icebergsync.protocol import Frontier, Progress, SourceIdentity, Writer
from icebergsync.schema import SchemaChange
from spark_app.commit.partition_evolution import PartitionChange, apply_partition_change
from spark_app.commit.swap import Built, SwapPart, TablePin, delete_quietly, swap_cut
from spark_app.iceberg.internals import (
    add_unpartitioned_spec,
    added_snapshot,
    appended_snapshot_id,
    fast_append,
    row_delta,
)

PENDING_DEAD_LETTERS = "pending-dead-letter-files"


@dataclass
class Sink:
    """One sink writer's view of its commits: the state every commit reads and the one that landed updates.

    ``last_snapshot`` is the main-table snapshot of this writer's newest commit (its fence, before any data),
    ``last_dead_letter_snapshot`` the dead-letter table's; ``frontier`` that of the newest commit; ``pins`` what
    the fence fixed of each table; ``pending_dead_letter_paths`` the dead-letter files of the newest main commit
    until its dead-letter commit landed (every main checkpoint carries them).
    """

    catalog: Catalog
    identifier: str
    writer: Writer
    dead_letter_identifier: str | None = None
    source: SourceIdentity | None = None
    last_snapshot: Snapshot | None = None
    last_dead_letter_snapshot: Snapshot | None = None
    fence_time_ms: int | None = None
    pins: dict[str, TablePin] = field(default_factory=dict)
    frontier: Frontier | None = None
    pending_dead_letter_paths: list[str] = field(default_factory=list)

    def swap(self, identifier: str, check: Callable[[TableMetadata], None],
             build: Callable[[Table], tuple[Transaction, int]]) -> tuple[Snapshot, TableMetadata]:
        """Commit ``build``'s transaction iff ``check`` passes on the head it was built on (and the table's pin):
        the cut of one table (:func:`~spark_app.commit.swap.swap_cut`). Returns the snapshot that landed and the
        table metadata it landed in."""
        [landed] = swap_cut(self.catalog, [self.part(identifier, check, build)])
        return landed

    def part(self, identifier: str, check: Callable[[TableMetadata], None], build: Callable[[Table], Built],
             ) -> SwapPart:
        """Table ``identifier``'s part of a compare-and-swap, with the pin this sink fixed for it."""
        return SwapPart(identifier, self.pins.get(identifier), check, build)

    def startup_check(self, metadata: TableMetadata) -> Progress:
        """Raise ``FencedError`` if a higher version owns the sink; else return where it resumes."""
        progress = protocol.read_progress(metadata, self.writer.sink_id)
        owner = protocol.startup_fence_owner(progress, self.writer)
        if owner is not None:
            raise FencedError(self.writer.sink_id, self.writer.version, owner.version, owner.attempt)
        return progress

    def steady_check(self, last: Snapshot | None) -> Callable[[TableMetadata], None]:
        """The fence check of a commit after the start: ``last`` (this writer's newest snapshot of the table) is
        still on main and no higher version committed since."""
        def check(metadata: TableMetadata) -> None:
            if last is None:
                raise IcebergSyncError("commit before fence: call start() first")
            owner = protocol.steady_fence_owner(metadata, self.writer, last.snapshot_id)
            if owner is not None:
                raise FencedError(self.writer.sink_id, self.writer.version, owner.version, owner.attempt)
            if protocol.rolled_back_past(metadata, self.writer.sink_id, last):
                raise ProgressConflictError(
                    f"snapshot {last.snapshot_id} of this sink is no longer on main (the table was rolled back); "
                    "nothing more was written. A restart resumes from what main holds"
                )
        return check

    def statement(self, kind: str, frontier: Frontier | None,
                  below: protocol.CommitStatement | None = None) -> protocol.CommitStatement:
        """What a commit of this writer that adds no source records states: its kind and frontier, with the
        freshness (newest event time, source lag) of ``below``, the sink's commit it lands on, when given."""
        return protocol.CommitStatement(
            self.writer, kind, frontier, source=self.source,
            max_event_time=below.max_event_time if below else None, source_lag=below.source_lag if below else None,
        )

    def newest_statement(self) -> protocol.CommitStatement | None:
        """What this writer's newest main snapshot states (None before the fence)."""
        return protocol.parse_commit(self.last_snapshot) if self.last_snapshot is not None else None

    def set_checkpoint(self, transaction: Transaction, frontier: Frontier | None, snapshot_id: int,
                       extra: Mapping[str, object] | None) -> None:
        """Set this writer's checkpoint property on ``transaction``, naming the snapshot ``snapshot_id`` it adds."""
        checkpoint = protocol.checkpoint_value(self.writer, frontier, snapshot_id, extra, self.source,
                                               added_snapshot(transaction, snapshot_id))
        transaction.set_properties({protocol.checkpoint_key(self.writer.sink_id): checkpoint})

    def delete_paths(self, paths: Sequence[str]) -> None:
        """Delete files of the main table that no snapshot references (:func:`~spark_app.commit.swap.delete_quietly`)."""
        delete_quietly(self.catalog, self.identifier, paths)

    def delete_files(self, files: Sequence[DataFile]) -> None:
        """:meth:`delete_paths` of ``files``."""
        self.delete_paths([data_file.file_path for data_file in files])

    def snapshot_transaction(
        self, table: Table, statement: protocol.CommitStatement, files: list[DataFile],
        schema_changes: list[SchemaChange] | None = None, checkpoint_extra: Mapping[str, object] | None = None,
        delete_files: list[DataFile] | None = None, removed_delete_files: list[DataFile] | None = None,
        removed_data_files: list[DataFile] | None = None, partition_change: PartitionChange | None = None,
    ) -> tuple[Transaction, int]:
        """The transaction of one snapshot stating ``statement`` on ``table``'s head, and the id of that snapshot: the
        schema and partition changes first, then ``files`` and the delete files added and the files removed, and
        this writer's checkpoint naming it (with ``checkpoint_extra``)."""
        transaction = Transaction(table)
        if statement.kind == protocol.KIND_FENCE and table.schema().identifier_field_ids:
            # A keyed table's equality deletes need an unpartitioned spec (spark_app/staging/equality_deletes.py):
            # added with the claim, atomically, when missing (never made the default spec).
            add_unpartitioned_spec(transaction)
        if partition_change is not None:
            apply_partition_change(transaction, partition_change)
        if schema_changes:
            with transaction.update_schema() as update:
                for change in schema_changes:
                    if change.kind == "add":
                        assert change.new_type is not None
                        default = change.default if table.metadata.format_version >= 3 else None
                        update.add_column(change.path, change.new_type, required=False, default_value=default)
                    elif change.kind == "widen":
                        update.update_column(change.column, field_type=change.new_type)
                    else:
                        update.update_column(change.column, required=False)
        summary = statement.properties()
        if delete_files or removed_delete_files or removed_data_files or table.metadata.format_version >= 3:
            # (pyiceberg's own append writes no v3 manifests)
            _check_delete_specs(table, delete_files or [])
            snapshot_id = row_delta(transaction, summary, files, delete_files or [], removed_delete_files or (),
                                    removed_data_files or ())
        else:
            with fast_append(transaction, summary) as append:
                for data_file in files:
                    append.append_data_file(data_file)
                snapshot_id = appended_snapshot_id(append)
        self.set_checkpoint(transaction, statement.frontier, snapshot_id, checkpoint_extra)
        return transaction, snapshot_id


def pending_extra(paths: list[str]) -> dict[str, list[str]]:
    """Main checkpoint field listing dead-letter files not yet known to be in the dead-letter table."""
    return {PENDING_DEAD_LETTERS: paths} if paths else {}


def _check_delete_specs(table: Table, delete_files: list[DataFile]) -> None:
    """Equality deletes must be written under an unpartitioned spec of the table: else they would not reach
    rows in other partitions (a row that moved partition would survive its delete)."""
    specs = table.metadata.specs()
    for delete_file in delete_files:
        if delete_file.content != DataFileContent.EQUALITY_DELETES:
            continue  # a position delete names its data file: it lives in that file's partition
        spec = specs.get(delete_file.spec_id)
        if spec is None or spec.fields:
            raise IcebergSyncError(
                f"delete file {delete_file.file_path} has partition spec {delete_file.spec_id}, which is not an "
                f"unpartitioned spec of {table.name()}: its deletes would not reach every partition; nothing was committed"
            )
