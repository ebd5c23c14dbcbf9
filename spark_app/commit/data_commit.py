"""A trigger's data commit: each table's part of the cut (its position deletes, copy-on-write files and carried
rows written for the head of each round), the cut of all of them, and what follows once it landed (the dead
letters' commit) or was refused (what it staged deleted)."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from pyiceberg.manifest import DataFile, DataFileContent
from pyiceberg.table import Table, Transaction
from pyiceberg.table.snapshots import Snapshot

from icebergsync import protocol
from icebergsync.protocol import Frontier
from spark_app.commit.copy_on_write import CopyOnWrite
from spark_app.commit.dead_letters import commit_dead_letters
from spark_app.commit.head_writes import HeadWrites
from spark_app.commit.sink import Sink, pending_extra
from spark_app.commit.swap import REFUSALS, Commit, SwapPart, swap_cut
from spark_app.commit.trigger_output import TriggerOutput
from spark_app.faults import crash_point
from spark_app.iceberg.cut import AtomicCutUnsupportedError, atomic_cut_supported
from spark_app.iceberg.internals import live_files
from spark_app.iceberg.position_deletes.stage import PositionDeleteDelta
from spark_app.staging.writer import TaskResult

UNMATCHED_COPIES_NOTE = "keyless-rows-not-found"


@dataclass
class DataCommit:
    """One table's data commit of a trigger: its part of the cut, and what follows once it landed or was refused.

    Position deletes and carried rows are written for the head of each round, into that round's snapshot
    (``rounds``: what was written for each attempted snapshot).
    """

    sink: Sink
    head_writes: HeadWrites
    output: TriggerOutput
    frontier: Frontier
    cut: Mapping[str, object] | None = None
    rounds: dict[int, _Round] = field(default_factory=dict)
    started: float = field(default_factory=time.monotonic)

    @property
    def identifier(self) -> str:
        return self.sink.identifier

    def part(self) -> SwapPart:
        sink = self.sink
        return sink.part(sink.identifier, sink.steady_check(sink.last_snapshot), self._build)

    def _build(self, table: Table) -> tuple[Transaction, int]:
        sink, head_writes, output = self.sink, self.head_writes, self.output
        carried = head_writes.carry(table, output) or TaskResult()  # first: it may refuse the trigger
        head_writes.unmatched_copies = 0
        try:
            if output.truncate:  # a source truncate: every live file goes
                deletes, cow = _emptied(table)
            else:
                deletes, cow = head_writes.position_deletes(table, output)
        except BaseException:
            sink.delete_files([f.data_file for f in carried.files])
            raise
        written = _Round(deletes.added, carried, cow.added, cow.replaced_staged)
        dead_letters = output.dead_letter_files + written.carried_dead_letters
        dead_letter_paths = [f.file_path for f in dead_letters]
        replaced = {f.file_path for f in cow.replaced_staged}
        data_files = [f for f in output.data_files if f.file_path not in replaced] + cow.added
        statement = protocol.CommitStatement(
            sink.writer, protocol.KIND_DATA, self.frontier, source=sink.source,
            records=output.records + written.carried.records,
            dead_letters=output.dead_letters + written.carried.dead_letters, dead_letter_files=tuple(dead_letter_paths),
            max_event_time=output.max_event_time, source_lag=output.source_lag,
            source_notes=_noting_unmatched(output.source_notes, head_writes.unmatched_copies),
            cut=dict(self.cut) if self.cut else None,
        )
        transaction, snapshot_id = sink.snapshot_transaction(
            table, statement, data_files + written.carried_data,
            checkpoint_extra=pending_extra(dead_letter_paths if sink.dead_letter_identifier else []),
            delete_files=output.delete_files + deletes.added,
            removed_delete_files=deletes.removed + cow.removed_deletes, removed_data_files=cow.removed_data,
        )
        self.rounds[snapshot_id] = written
        return transaction, snapshot_id

    def abandon(self) -> None:
        """Delete everything staged for this commit: it certainly did not land (the check refused before it
        was sent)."""
        self.sink.delete_paths(self.output.all_paths())
        self.sink.delete_files([f for written in self.rounds.values() for f in written.files])

    def land(self, snapshot: Snapshot) -> Commit:
        """Book the snapshot that landed, delete what other rounds wrote, then commit the dead letters."""
        sink, output, frontier = self.sink, self.output, self.frontier
        sink.delete_files([f for snapshot_id, written in self.rounds.items()
                           if snapshot_id != snapshot.snapshot_id for f in written.files])
        landed = self.rounds.get(snapshot.snapshot_id, _Round([], TaskResult()))
        # The staged files the landed snapshot merged into its copy-on-write files: no snapshot holds them.
        sink.delete_files(landed.replaced_staged)
        dead_letters = output.dead_letter_files + landed.carried_dead_letters
        output.records += landed.carried.records  # what the job logs and counts: the rows that landed
        output.dead_letters += landed.carried.dead_letters
        for reason, count in landed.carried.dead_letter_reasons.items():
            output.dead_letter_reasons[reason] = output.dead_letter_reasons.get(reason, 0) + count
        sink.last_snapshot = snapshot
        sink.frontier = frontier
        sink.pending_dead_letter_paths = [f.file_path for f in dead_letters] if sink.dead_letter_identifier else []
        crash_point("main-committed")
        if dead_letters and sink.dead_letter_identifier:
            # From here on every staged file is listed by a main commit: whatever happens to the
            # dead-letter commit, nothing is discarded (a newer writer's fence recovers the dead letters).
            commit_dead_letters(sink, dead_letters, frontier, snapshot)
        sink.pending_dead_letter_paths = []
        return Commit(snapshot, (time.monotonic() - self.started) * 1000)


def commit_together(commits: Sequence[DataCommit]) -> list[Commit]:
    """Land the data commits of one trigger (to one table, or to several of one catalog) as ONE cut, or none.

    Every table's fence is checked on the head its snapshot is built on, and the cut is sent once all
    pass; a conflict on any table rebuilds all. A refusal on any table (fenced, rolled back, changed, bad
    input) deletes what every commit staged and raises. Several tables need a catalog that commits them
    atomically (``AtomicCutUnsupportedError`` otherwise, before anything is sent).
    """
    catalog = commits[0].sink.catalog
    if len(commits) > 1 and not atomic_cut_supported(catalog):
        raise AtomicCutUnsupportedError(f"catalog {catalog.name!r} cannot commit {len(commits)} tables atomically")
    try:
        landed = swap_cut(catalog, [commit.part() for commit in commits])
    except REFUSALS:
        for commit in commits:
            commit.abandon()
        raise
    return [commit.land(snapshot) for commit, (snapshot, _) in zip(commits, landed, strict=True)]


def _noting_unmatched(notes: dict[str, object] | None, unmatched: int) -> dict[str, object] | None:
    """A snapshot's source notes, with the rows a keyless trigger removed that the table did not hold (if any)."""
    return {**(notes or {}), UNMATCHED_COPIES_NOTE: unmatched} if unmatched else notes


def _emptied(table: Table) -> tuple[PositionDeleteDelta, CopyOnWrite]:
    """Every file live on ``table``'s head, to remove: the commit of a source truncate empties the table."""
    snapshot = table.current_snapshot()
    live = live_files(table, snapshot) if snapshot is not None else []
    removed = CopyOnWrite({})
    removed.removed_data.extend(f.data_file for f in live if f.data_file.content == DataFileContent.DATA)
    removed.removed_deletes.extend(f.data_file for f in live if f.data_file.content != DataFileContent.DATA)
    return PositionDeleteDelta(), removed


@dataclass(frozen=True)
class _Round:
    """What one round of a data commit wrote for its snapshot: position deletes, the carried rows' files and the
    copy-on-write files (with the staged files they replace, which only its snapshot leaves out)."""

    deletes: list[DataFile]
    carried: TaskResult
    rewritten: list[DataFile] = field(default_factory=list)
    replaced_staged: list[DataFile] = field(default_factory=list)

    def _of(self, table: str) -> list[DataFile]:
        return [f.data_file for f in self.carried.files if f.table == table]

    @property
    def carried_data(self) -> list[DataFile]:
        return self._of("data")

    @property
    def carried_dead_letters(self) -> list[DataFile]:
        return self._of("dead_letter")

    @property
    def files(self) -> list[DataFile]:
        return self.deletes + self.carried_data + self.carried_dead_letters + self.rewritten
