"""The dead-letter table's commits: its fence, which recovers the dead letters a crashed attempt left pending, and
the commit of each main commit's dead letters after it (docs/protocol.md).

A main commit lists its dead-letter files (and its checkpoint carries them until the dead-letter commit landed); the
dead-letter checkpoint records the newest main snapshot whose dead letters it holds.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from pyiceberg.manifest import DataFile
from pyiceberg.table import Table, Transaction
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.snapshots import Snapshot

from icebergsync import protocol
from icebergsync.protocol import Frontier
from icebergsync.storage import normalize
from spark_app.commit.references import referenced_files
from spark_app.commit.sink import PENDING_DEAD_LETTERS, Sink
from spark_app.commit.swap import TablePin

log = logging.getLogger("icebergsync.committer")

MAIN_SEQUENCE = "main-sequence-number"
MAIN_SNAPSHOT = protocol.MAIN_SNAPSHOT_ID


def fence_dead_letters(sink: Sink, main: Table, rebuild_data_file: Callable[[Table, str], DataFile] | None) -> None:
    """Fence the dead-letter table too, committing dead letters a crashed attempt left pending (their data files
    rebuilt by ``rebuild_data_file`` from their paths)."""
    assert sink.dead_letter_identifier is not None

    def check(metadata: TableMetadata) -> None:
        sink.startup_check(metadata)

    def build(table: Table) -> tuple[Transaction, int]:
        pending, covered, frontier = pending_dead_letters(sink, main.metadata, table)
        files = [rebuild_data_file(table, path) for path in pending] if rebuild_data_file else []
        if files:
            log.info("%s: recovering %d dead-letter file(s) committed to the main table up to snapshot %s",
                     sink.writer.sink_id, len(files), covered[MAIN_SNAPSHOT])
        return sink.snapshot_transaction(table, sink.statement(protocol.KIND_FENCE, frontier), files,
                                         checkpoint_extra=covered)

    snapshot, metadata = sink.swap(sink.dead_letter_identifier, check, build)
    sink.pins[sink.dead_letter_identifier] = TablePin.of(metadata)
    sink.last_dead_letter_snapshot = snapshot


def pending_dead_letters(sink: Sink, main: TableMetadata, dead: Table) -> tuple[list[str], dict[str, int], Frontier | None]:
    """Dead-letter files listed by this sink's main commits that the dead-letter table lacks.

    Listed are the files of the sink's main commits down to the main snapshot the dead-letter
    checkpoint covers (by id, which every format version has, or by sequence number, format v2
    only), and those the main checkpoint carries (it survives expiry of the snapshots that
    listed them) unless its snapshot is covered or was rolled back. Files the dead-letter table
    already references are never added twice. Returns the files, the checkpoint fields that
    record the newest main commit now covered, and its frontier.
    """
    checkpoint = protocol.parse_checkpoint(dead.metadata, sink.writer.sink_id)
    covered_snapshot = checkpoint.extra.get(MAIN_SNAPSHOT) if checkpoint else None
    covered_sequence = int(checkpoint.extra.get(MAIN_SEQUENCE, 0)) if checkpoint else 0

    def covered(snapshot_id: int, sequence_number: int) -> bool:
        return snapshot_id == covered_snapshot or 0 < sequence_number <= covered_sequence

    listed: list[str] = []
    newest: dict[str, int] | None = None
    frontier: Frontier | None = None
    for snapshot in protocol.main_ancestry(main):
        if covered(snapshot.snapshot_id, snapshot.sequence_number or 0):
            break
        commit = protocol.parse_commit(snapshot)
        if commit is None or commit.writer.sink_id != sink.writer.sink_id:
            continue
        if newest is None:
            newest, frontier = _covered(snapshot.snapshot_id, snapshot.sequence_number or 0), commit.frontier
        listed = list(commit.dead_letter_files) + listed
    carried = protocol.parse_checkpoint(main, sink.writer.sink_id)
    if (carried is not None and carried.extra.get(PENDING_DEAD_LETTERS)
            and not covered(carried.snapshot_id, carried.sequence_number or 0)
            and protocol.checkpoint_on_main(main, carried)):
        listed = [str(path) for path in carried.extra[PENDING_DEAD_LETTERS]] + listed
        if newest is None:
            newest, frontier = _covered(carried.snapshot_id, carried.sequence_number or 0), carried.frontier
    listed = list(dict.fromkeys(listed))
    present = referenced_files(dead) if listed else set()
    pending = [path for path in listed if normalize(path) not in present]
    if newest is None:
        return pending, dict(checkpoint.extra) if checkpoint else {}, checkpoint.frontier if checkpoint else None
    return pending, newest, frontier


def commit_dead_letters(sink: Sink, files: list[DataFile], frontier: Frontier, main: Snapshot) -> None:
    """Commit the dead-letter ``files`` of the main snapshot ``main`` (with its ``frontier``) to the dead-letter
    table, fenced as every steady commit."""
    assert sink.dead_letter_identifier is not None

    def build(table: Table) -> tuple[Transaction, int]:
        statement = protocol.CommitStatement(sink.writer, protocol.KIND_DATA, frontier, source=sink.source,
                                             dead_letters=sum(f.record_count for f in files))
        return sink.snapshot_transaction(table, statement, files,
                                         checkpoint_extra=_covered(main.snapshot_id, main.sequence_number or 0))

    snapshot, _ = sink.swap(sink.dead_letter_identifier, sink.steady_check(sink.last_dead_letter_snapshot), build)
    sink.last_dead_letter_snapshot = snapshot


def _covered(snapshot_id: int, sequence_number: int) -> dict[str, int]:
    """Dead-letter checkpoint fields recording that a main snapshot's dead letters are in the dead-letter table."""
    return {MAIN_SNAPSHOT: snapshot_id, MAIN_SEQUENCE: sequence_number}
