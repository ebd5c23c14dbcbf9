"""Commits that add no source records and keep this writer's frontier: a schema change, a rewrite of files and a
rewrite of manifests, each ONE snapshot through the fenced compare-and-swap of a data commit."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from pyiceberg.manifest import DataFile, ManifestFile
from pyiceberg.table import Table, Transaction
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.snapshots import Snapshot

from icebergsync import protocol
from icebergsync.schema import SchemaChange
from spark_app.commit.sink import Sink, pending_extra
from spark_app.commit.swap import Commit, MaintenanceConflictError, TablePin
from spark_app.iceberg.internals import rewrite_files, rewrite_manifests


def commit_rewrite(sink: Sink, planned: Snapshot, removed: list[DataFile], added: list[DataFile]) -> Commit:
    """Commit a rewrite planned on the main snapshot ``planned`` as ONE ``replace`` snapshot of kind maintenance
    (see :meth:`spark_app.commit.committer.SinkCommitter.commit_maintenance`)."""
    return _commit_maintenance(sink, planned, "rewrite", lambda transaction, summary: rewrite_files(
        transaction, summary, removed, added, planned.sequence_number or 0))


def commit_manifest_rewrite(sink: Sink, planned: Snapshot, bins: Sequence[Sequence[ManifestFile]]) -> Commit:
    """Commit a manifest rewrite planned on the main snapshot ``planned`` (each of ``bins`` merged into one
    manifest, every entry's sequence numbers kept) as ONE ``replace`` snapshot of kind maintenance."""
    return _commit_maintenance(sink, planned, "manifest rewrite",
                               lambda transaction, summary: rewrite_manifests(transaction, summary, bins))


def commit_schema(sink: Sink, changes: list[SchemaChange]) -> Commit:
    """Commit ``changes`` to the main table's schema as ONE empty snapshot of kind ``schema``, then pin the table
    to the new schema."""
    started = time.monotonic()
    last = sink.newest_statement()

    def build(table: Table) -> tuple[Transaction, int]:
        return sink.snapshot_transaction(table, sink.statement(protocol.KIND_SCHEMA, sink.frontier, last), [], changes,
                                         checkpoint_extra=pending_extra(sink.pending_dead_letter_paths))

    snapshot, metadata = sink.swap(sink.identifier, sink.steady_check(sink.last_snapshot), build)
    sink.pins[sink.identifier] = TablePin.of(metadata)
    sink.last_snapshot = snapshot
    return Commit(snapshot, (time.monotonic() - started) * 1000)


def _commit_maintenance(sink: Sink, planned: Snapshot, what: str,
                        stage: Callable[[Transaction, dict[str, str]], int]) -> Commit:
    """Commit the snapshot ``stage`` stages (given its summary) on the head ``planned``, carrying this writer's
    frontier and checkpoint, through the fenced compare-and-swap; main moved: ``MaintenanceConflictError``."""
    started = time.monotonic()
    last = sink.newest_statement()
    steady = sink.steady_check(sink.last_snapshot)

    def check(metadata: TableMetadata) -> None:
        steady(metadata)
        if metadata.current_snapshot_id != planned.snapshot_id:
            raise MaintenanceConflictError(
                f"main moved from snapshot {planned.snapshot_id} to {metadata.current_snapshot_id} while the "
                f"{what} was planned; nothing was committed"
            )

    def build(table: Table) -> tuple[Transaction, int]:
        transaction = Transaction(table)
        summary = sink.statement(protocol.KIND_MAINTENANCE, sink.frontier, last).properties()
        snapshot_id = stage(transaction, summary)
        sink.set_checkpoint(transaction, sink.frontier, snapshot_id, pending_extra(sink.pending_dead_letter_paths))
        return transaction, snapshot_id

    snapshot, _ = sink.swap(sink.identifier, check, build)
    sink.last_snapshot = snapshot
    return Commit(snapshot, (time.monotonic() - started) * 1000)
