"""A sink's start: the fence commit that evolves the schema and partitioning, claims the sink and pins the table,
then the dead-letter table's fence (docs/protocol.md)."""

from __future__ import annotations

import logging
from collections.abc import Callable

from pyiceberg.manifest import DataFile
from pyiceberg.table import Table, Transaction
from pyiceberg.table.metadata import TableMetadata

from icebergsync import protocol
from icebergsync.errors import ProgressConflictError
from icebergsync.protocol import Frontier, Progress, SourceIdentity
from icebergsync.schema import SchemaChange
from spark_app.commit.dead_letters import fence_dead_letters, pending_dead_letters
from spark_app.commit.partition_evolution import PartitionChange
from spark_app.commit.sink import Sink, pending_extra
from spark_app.commit.swap import TablePin

log = logging.getLogger("icebergsync.committer")


def claim(sink: Sink, schema_changes: list[SchemaChange], source: SourceIdentity | None,
          check_frontier: Callable[[Frontier], None] | None, partition_change: PartitionChange | None,
          rebuild_data_file: Callable[[Table, str], DataFile] | None) -> Progress:
    """Commit the fence of ``sink`` (see :meth:`spark_app.commit.committer.SinkCommitter.start`); return where it
    resumes."""
    sink.source = source
    progress_seen: list[Progress] = []
    dead_letter_identifier = sink.dead_letter_identifier

    def check(metadata: TableMetadata) -> None:
        progress = sink.startup_check(metadata)
        if dead_letter_identifier:
            # A higher version that committed on the dead-letter table fences W as well: main may no
            # longer show it (rolled back past it, its checkpoint removed to start over), the
            # dead-letter table still does. Checked before the main fence, so a fenced W lands nothing.
            sink.startup_check(sink.catalog.load_table(dead_letter_identifier).metadata)
        protocol.check_resumable(progress, source)
        if progress.frontier is not None and check_frontier is not None:
            try:
                check_frontier(progress.frontier)
            except (ValueError, TypeError, KeyError) as exc:
                raise ProgressConflictError(
                    f"sink {sink.writer.sink_id}: the table's frontier {protocol.encode_json(progress.frontier)} "
                    f"does not fit this sync's source ({exc}); refusing to resume from it"
                ) from exc
        progress_seen.append(progress)

    def build(table: Table) -> tuple[Transaction, int]:
        # The fence's checkpoint carries the dead letters still pending, so that neither a crash
        # before the dead-letter fence nor expiry of the snapshots that listed them loses them.
        pending = pending_dead_letters(sink, table.metadata, sink.catalog.load_table(dead_letter_identifier))[0] \
            if dead_letter_identifier else []
        # The fence carries the freshness of the commit below it, so that status and lag survive a restart.
        last = progress_seen[-1].last_commit
        return sink.snapshot_transaction(table, sink.statement(protocol.KIND_FENCE, progress_seen[-1].frontier, last),
                                         [], schema_changes, checkpoint_extra=pending_extra(pending),
                                         partition_change=partition_change)

    snapshot, metadata = sink.swap(sink.identifier, check, build)
    sink.pins[sink.identifier] = TablePin.of(metadata)
    sink.last_snapshot = snapshot
    sink.fence_time_ms = snapshot.timestamp_ms
    progress = progress_seen[-1]
    sink.frontier = progress.frontier
    if dead_letter_identifier:
        fence_dead_letters(sink, sink.catalog.load_table(sink.identifier), rebuild_data_file)
    for note in progress.notes:
        log.warning("%s: %s", sink.writer.sink_id, note)
    return progress
