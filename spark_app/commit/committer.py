"""Driver side of phase 2: fence, commit once per trigger, recover dead letters, clean up orphans.

Every commit is a compare-and-swap against the main-branch head that was checked for fencing:
pyiceberg's own commit loop (which rebases a conflicting commit onto the new head) is bypassed,
because a rebase would let a stale writer land on top of a newer one. On conflict the table is
reloaded and the fence re-checked; on an unknown outcome (e.g. a 5xx from a REST catalog) the
table is reloaded and searched for the snapshot ids this commit attempted before anything else.
"""

from __future__ import annotations

import contextlib
import json
import logging
import random
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial
from typing import TYPE_CHECKING, TypeVar

import pyarrow as pa
from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import CommitFailedException
from pyiceberg.manifest import DataFile, DataFileContent, ManifestFile
from pyiceberg.table import Table, Transaction
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.snapshots import Snapshot
from pyiceberg.table.update import AssertCurrentSchemaId, AssertTableUUID

from icebergsync import protocol
from icebergsync.errors import (
    BadInputError,
    CommitStateUnknownError,
    FencedError,
    IcebergSyncError,
    ProgressConflictError,
    TableChangedError,
)
from icebergsync.protocol import (
    Frontier,
    Progress,
    SourceIdentity,
    Writer,
    attempt_file_prefix,
    file_owner,
    sink_file_prefix,
)
from icebergsync.schema import SchemaChange
from icebergsync.storage import list_files, normalize
from icebergsync.transient.calls import last_line, retry_transient
from spark_app.commit.carry.fill import fill
from spark_app.commit.carry.live_rows import live_positions, read_live_rows
from spark_app.commit.carry.moves import fill_from_moves, matching_moves, old_keys_to_read
from spark_app.commit.copy_on_write import CopyOnWrite, copy_on_write
from spark_app.commit.key_index.file_keys import FileKeysCache
from spark_app.commit.key_index.key_columns import DRIVER_KEY_COLUMNS
from spark_app.commit.key_index.locate import LocateStats, locate_rows
from spark_app.commit.keyless_locate import locate_copies
from spark_app.commit.partition_evolution import PartitionChange, apply_partition_change
from spark_app.decoding.changes import CARRY_COLUMN
from spark_app.decoding.row_identity import COUNT_COLUMN
from spark_app.faults import crash_point
from spark_app.iceberg.cut import AtomicCutUnsupportedError, TableChange, atomic_cut_supported
from spark_app.iceberg.internals import (
    LiveFile,
    add_unpartitioned_spec,
    added_snapshot,
    appended_snapshot_id,
    commit_transaction,
    commit_transactions,
    expire_snapshots,
    fast_append,
    live_files,
    main_head_requirement,
    rewrite_files,
    rewrite_manifests,
    row_delta,
    written_metadata,
)
from spark_app.iceberg.position_deletes.deletion_vector import DeletionVector
from spark_app.iceberg.position_deletes.stage import PositionDeleteDelta, stage_position_deletes
from spark_app.staging.writer import TaskResult, WritePlan, stage_partition

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger("icebergsync.committer")
CLEANUP_BUDGET_SECONDS = 30.0  # how long deleting what never landed rides out faults (start-up cleanup is next)

MAIN_SEQUENCE = "main-sequence-number"
MAIN_SNAPSHOT = protocol.MAIN_SNAPSHOT_ID
PENDING_DEAD_LETTERS = "pending-dead-letter-files"
UNKNOWN_OUTCOME_DEADLINE_SECONDS = 300.0

T = TypeVar("T")


@dataclass(frozen=True)
class TablePin:
    """What a sink fixed about a table when it fenced it: every later commit asserts both."""

    table_uuid: str
    schema_id: int

    @staticmethod
    def of(metadata: TableMetadata) -> TablePin:
        return TablePin(str(metadata.table_uuid), metadata.current_schema_id)

    def check(self, identifier: str, metadata: TableMetadata) -> None:
        """Raise ``TableChangedError`` when ``metadata`` is another table, or has another schema, than pinned."""
        if str(metadata.table_uuid) != self.table_uuid:
            raise TableChangedError(
                f"table {identifier} was dropped and recreated while this sink ran (uuid {self.table_uuid} is now "
                f"{metadata.table_uuid}); nothing more was written to it. A restart resumes from the new table"
            )
        if metadata.current_schema_id != self.schema_id:
            raise TableChangedError(
                f"the schema of {identifier} was changed by another writer while this sink ran (schema id "
                f"{self.schema_id} is now {metadata.current_schema_id}); the files staged under the old schema were "
                "not committed. A restart re-plans its writes from the current schema"
            )


class _Retry:
    """The retry policy of one compare-and-swap against the catalog (a data commit, an expiry).

    A conflict (another writer moved the head) is retried at once after a short jittered backoff; an
    unknown outcome (the request failed in a way that does not say whether it landed) is retried
    until ``UNKNOWN_OUTCOME_DEADLINE_SECONDS``, after which ``CommitStateUnknownError`` is raised.
    Either way the caller re-reads the table and re-checks the fence before the next round.
    """

    def __init__(self, action: str, identifier: str):
        self._action = action
        self._identifier = identifier
        self._deadline = time.monotonic() + UNKNOWN_OUTCOME_DEADLINE_SECONDS
        self._rounds = 0

    def attempt(self, request: Callable[[], T], on_unknown: str) -> T | None:
        """``request()``'s result, or None when the caller should re-check and try again."""
        self._rounds += 1
        try:
            return request()
        except CommitFailedException as exc:
            log.info("%s conflict on %s (round %d): %s; re-checking the fence", self._action, self._identifier,
                     self._rounds, exc)
            time.sleep(random.uniform(0.0, min(1.0, 0.01 * 2**min(self._rounds, 7))))
        except (IcebergSyncError, KeyboardInterrupt):
            raise
        except Exception as exc:  # unknown outcome: the request may or may not have landed
            if time.monotonic() > self._deadline:
                raise CommitStateUnknownError(
                    f"{self._action} on {self._identifier} failed with an unknown outcome for "
                    f"{UNKNOWN_OUTCOME_DEADLINE_SECONDS:.0f}s: {exc}"
                ) from exc
            log.warning("%s on %s had an unknown outcome (%s); %s", self._action, self._identifier, exc, on_unknown)
            time.sleep(min(5.0, 0.2 * 2**min(self._rounds, 5)))
        return None


@dataclass(frozen=True)
class Commit:
    """A commit that landed: its snapshot and how long the compare-and-swap took."""

    snapshot: Snapshot
    commit_ms: float


@dataclass
class TriggerOutput:
    """What one trigger staged, to be committed in one snapshot.

    ``delete_files`` are equality delete files of a keyed table (spark_app/staging/equality_deletes.py), committed in
    the same snapshot as ``data_files``. ``touched_keys`` (the key columns) are the keys a keyed
    trigger touched whose older rows it deletes by position: they are located on the head the commit
    swaps against, and the position deletes (format 2) or deletion vectors (format 3) written then
    (spark_app/iceberg/position_deletes/) join the same snapshot. ``carried`` are upserts missing values
    Debezium did not send: completed from their keys' live rows on that same head and written with
    ``carry_plan`` (spark_app/commit/carry/), they join it too (or its dead letters); ``moved`` are the trigger's deletes
    of source events, the old keys of primary-key updates whose creates are among ``carried``.
    ``removed_copies`` (a table without a primary key) are the distinct rows whose live copies the trigger removes,
    with how many (spark_app/commit/keyless_locate.py): located on that same head, and deleted by position with the keys' rows.
    """

    data_files: list[DataFile] = field(default_factory=list)
    dead_letter_files: list[DataFile] = field(default_factory=list)
    delete_files: list[DataFile] = field(default_factory=list)
    touched_keys: pa.Table | None = None
    carried: pa.Table | None = None
    carry_plan: WritePlan | None = None
    moved: pa.Table | None = None
    removed_copies: pa.Table | None = None
    truncate: bool = False  # the table is emptied first: the snapshot removes every live file (a source truncate)
    records: int = 0
    dead_letters: int = 0
    dead_letter_reasons: dict[str, int] = field(default_factory=dict)
    max_event_time: str | None = None
    source_lag: dict[str, object] | None = None
    source_notes: dict[str, object] | None = None

    @property
    def bytes(self) -> int:
        return sum(f.file_size_in_bytes for f in self.data_files + self.delete_files + self.dead_letter_files)

    def all_paths(self) -> list[str]:
        return [f.file_path for f in self.data_files + self.delete_files + self.dead_letter_files]


@dataclass(frozen=True)
class SwapPart:
    """One table's part of a compare-and-swap: its pin (once fenced), the check its head must pass, and the
    transaction built on that head (with the id of the snapshot it adds)."""

    identifier: str
    pin: TablePin | None
    check: Callable[[TableMetadata], None]
    build: Callable[[Table], tuple[Transaction, int]]


def swap_cut(catalog: Catalog, parts: Sequence[SwapPart]) -> list[tuple[Snapshot, TableMetadata]]:
    """Commit every part's transaction (see :func:`_swap_rounds`); the manifests and manifest lists of the rounds
    that did not land are deleted once one did, all of them when the cut is refused (an unknown outcome keeps them:
    the start-up cleanup deletes those no snapshot references)."""
    rounds: dict[int, tuple[str, Transaction]] = {}
    try:
        landed = _swap_rounds(catalog, parts, rounds)
    except (FencedError, ProgressConflictError, TableChangedError, BadInputError, MaintenanceConflictError):
        _delete_lost_rounds(catalog, rounds, set())
        raise
    _delete_lost_rounds(catalog, rounds, {snapshot.snapshot_id for snapshot, _ in landed})
    return landed


def delete_quietly(catalog: Catalog, identifier: str, paths: Sequence[str]) -> None:
    """Delete files of table ``identifier`` that no snapshot references, as well as the catalog and the object store
    let it: a fault here never stops the sync nor hides the error that led here (it may be on its way up). What
    stays is the start-up cleanup's (:meth:`SinkCommitter.cleanup_orphans`), which runs under the fence."""
    remaining = list(paths)
    if not remaining:  # nothing to delete: no table load either (after every commit that landed as built)
        return

    def delete_remaining() -> None:
        io = catalog.load_table(identifier).io
        while remaining:
            with contextlib.suppress(FileNotFoundError):
                io.delete(remaining[-1])
            remaining.pop()

    try:
        retry_transient(f"delete {len(remaining)} file(s) of {identifier}", delete_remaining,
                        budget_seconds=CLEANUP_BUDGET_SECONDS)
    except Exception as error:
        log.warning("%s: could not delete %d file(s) no snapshot references (%s); the next start-up's cleanup removes "
                    "them", identifier, len(remaining), last_line(error))


def _delete_lost_rounds(catalog: Catalog, rounds: Mapping[int, tuple[str, Transaction]], landed: set[int]) -> None:
    """Delete what the transactions of ``rounds`` (snapshot id -> table, transaction) wrote for snapshots not
    ``landed``."""
    lost: dict[str, list[str]] = {}
    for snapshot_id, (identifier, transaction) in rounds.items():
        if snapshot_id not in landed:
            lost.setdefault(identifier, []).extend(written_metadata(transaction))
    for identifier, paths in lost.items():
        delete_quietly(catalog, identifier, paths)


def _swap_rounds(catalog: Catalog, parts: Sequence[SwapPart],
                 rounds: dict[int, tuple[str, Transaction]]) -> list[tuple[Snapshot, TableMetadata]]:
    """Commit every part's transaction, all in one cut (spark_app/iceberg/cut.py), iff every part's
    ``check`` passes on the head its transaction was built on; per part the snapshot that landed and the
    metadata it landed in.

    Each round loads every table, checks its pin and its ``check``, builds its transaction and sends the
    cut, requiring each table's uuid and current schema to be those checked: a schema change by another
    writer between the check and the commit (which moves no head) is a conflict, never files of the old
    schema landing under the new. A conflict on any table starts a new round for all; after an unknown
    outcome the tables are searched for the snapshot ids attempted, which a cut shows on every table or on none:
    in the table's snapshots, or named by a checkpoint property of the table, which the same commit wrote (Nessie's
    table metadata keeps the current snapshot only, so another writer's commit on top hides ours there).
    """
    attempted: list[list[int]] = [[] for _ in parts]
    built: dict[int, Transaction] = {}
    names = ", ".join(part.identifier for part in parts)
    retry = _Retry("commit", names)
    while True:
        tables = [catalog.load_table(part.identifier) for part in parts]
        landed = [next((s for s in map(table.metadata.snapshot_by_id, ids) if s is not None), None)
                  or _named_by_checkpoint(table.metadata, ids, built)
                  for table, ids in zip(tables, attempted, strict=True)]
        if any(snapshot is not None for snapshot in landed):
            if any(snapshot is None for snapshot in landed):
                raise CommitStateUnknownError(f"a cut of {names} landed on some of its tables only: the catalog "
                                              "did not commit it atomically; nothing more was written")
            return [(snapshot, table.metadata) for snapshot, table in zip(landed, tables, strict=True)
                    if snapshot is not None]
        changes, snapshot_ids = [], []
        for part, table in zip(parts, tables, strict=True):
            if part.pin is not None:
                part.pin.check(part.identifier, table.metadata)
            part.check(table.metadata)
        for part, table, ids in zip(parts, tables, attempted, strict=True):
            transaction, snapshot_id = part.build(table)
            built[snapshot_id] = transaction
            rounds[snapshot_id] = part.identifier, transaction
            ids.append(snapshot_id)
            snapshot_ids.append(snapshot_id)
            changes.append(TableChange(table, transaction, (
                AssertTableUUID(uuid=table.metadata.table_uuid),
                AssertCurrentSchemaId(current_schema_id=table.metadata.current_schema_id),  # type: ignore[call-arg]
            )))
        responses = retry.attempt(partial(commit_transactions, catalog, changes),
                                  f"looking for snapshot(s) {attempted}")
        if responses is None:
            continue
        result = []
        for part, response, snapshot_id in zip(parts, responses, snapshot_ids, strict=True):
            snapshot = response.metadata.snapshot_by_id(snapshot_id) or _named_by_checkpoint(response.metadata,
                                                                                              [snapshot_id], built)
            if snapshot is None:
                raise CommitStateUnknownError(
                    f"commit to {part.identifier} succeeded but snapshot {snapshot_id} is missing")
            result.append((snapshot, response.metadata))
        return result


def _named_by_checkpoint(metadata: TableMetadata, ids: Sequence[int], built: Mapping[int, Transaction]) -> Snapshot | None:
    """The attempted snapshot (one of ``ids``) a checkpoint property of the table names, as its transaction added it.

    Every commit sent through :func:`swap_cut` by a sink sets its checkpoint property to name the snapshot it adds, in
    the same commit: the property naming an attempted id proves that attempt landed, though the metadata may no longer
    hold its snapshot (on Nessie, whose table metadata holds the current snapshot only, after another writer's commit
    on top of it). A property that cannot be read names nothing here (the checks read it again and say so).
    """
    for key, value in metadata.properties.items():
        if not key.startswith(protocol.CHECKPOINT_PREFIX):
            continue
        try:
            named = json.loads(value).get("snapshot-id")
        except (ValueError, AttributeError):
            continue
        if named in ids and named in built:
            return added_snapshot(built[named], named)
    return None


class SinkCommitter:
    """Owns every write the sink makes to the catalog."""

    def __init__(self, catalog: Catalog, identifier: str, writer: Writer, dead_letter_identifier: str | None = None,
                 rebuild_data_file: Callable[[Table, str], DataFile] | None = None,
                 spark: Callable[[], SparkSession] | None = None, copy_on_write_bytes: int = 0):
        self._catalog = catalog
        self._identifier = identifier
        self._dead_letter_identifier = dead_letter_identifier
        self._rebuild_data_file = rebuild_data_file
        self.writer = writer
        self.source: SourceIdentity | None = None
        self.last_snapshot: Snapshot | None = None
        self.last_dead_letter_snapshot: Snapshot | None = None
        self.fence_time_ms: int | None = None
        self.pins: dict[str, TablePin] = {}
        self.frontier: Frontier | None = None  # the frontier of this writer's newest commit
        self._pending_dead_letter_paths: list[str] = []  # of the newest main commit, until its dead-letter commit
        self._file_keys = FileKeysCache()  # the key index's data file summaries, kept across triggers
        self._key_columns = DRIVER_KEY_COLUMNS  # and the key columns of the row groups it read (every table's)
        self._spark = spark  # runs a large locate's reads as tasks (spark_app/commit/key_index/tasks.py)
        # keyed, position deletes: touched data files smaller than this are written again (changes.copyOnWriteBelow)
        self.copy_on_write_bytes = copy_on_write_bytes
        self.unmatched_copies = 0  # of the last keyless locate: rows the source removed that the table did not hold
        self._live_manifests: dict[str, list[LiveFile]] = {}  # the head's live files by manifest, for copy-on-write

    # -- compare-and-swap -------------------------------------------------------------------------

    def _compare_and_swap(
        self,
        identifier: str,
        check: Callable[[TableMetadata], None],
        build: Callable[[Table], tuple[Transaction, int]],
    ) -> tuple[Snapshot, TableMetadata]:
        """Commit ``build``'s transaction iff ``check`` passes on the head it was built on: the cut of one table
        (:func:`swap_cut`). Returns the snapshot that landed and the table metadata it landed in."""
        [landed] = swap_cut(self._catalog, [SwapPart(identifier, self.pins.get(identifier), check, build)])
        return landed

    def _statement(self, kind: str, frontier: Frontier | None,
                   below: protocol.CommitStatement | None = None) -> protocol.CommitStatement:
        """What a commit of this writer that adds no source records states: its kind and frontier, with the
        freshness (newest event time, source lag) of ``below``, the sink's commit it lands on, when given."""
        return protocol.CommitStatement(
            self.writer, kind, frontier, source=self.source,
            max_event_time=below.max_event_time if below else None, source_lag=below.source_lag if below else None,
        )

    def _transaction(
        self, table: Table, statement: protocol.CommitStatement, files: list[DataFile],
        schema_changes: list[SchemaChange] | None = None, checkpoint_extra: Mapping[str, object] | None = None,
        delete_files: list[DataFile] | None = None, removed_delete_files: list[DataFile] | None = None,
        removed_data_files: list[DataFile] | None = None, partition_change: PartitionChange | None = None,
    ) -> tuple[Transaction, int]:
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
        checkpoint = protocol.checkpoint_value(self.writer, statement.frontier, snapshot_id, checkpoint_extra,
                                               self.source, added_snapshot(transaction, snapshot_id))
        transaction.set_properties({protocol.checkpoint_key(self.writer.sink_id): checkpoint})
        return transaction, snapshot_id

    # -- fencing ----------------------------------------------------------------------------------

    def _startup_check(self, metadata: TableMetadata) -> Progress:
        """Raise ``FencedError`` if a higher version owns the sink; else return where it resumes."""
        progress = protocol.read_progress(metadata, self.writer.sink_id)
        owner = protocol.startup_fence_owner(progress, self.writer)
        if owner is not None:
            raise FencedError(self.writer.sink_id, self.writer.version, owner.version, owner.attempt)
        return progress

    @property
    def dead_letter_identifier(self) -> str | None:
        return self._dead_letter_identifier

    @property
    def last_snapshot_id(self) -> int | None:
        """The main-table snapshot of this writer's newest commit (its fence, before any data)."""
        return self.last_snapshot.snapshot_id if self.last_snapshot else None

    def _steady_check(self, last: Snapshot | None) -> Callable[[TableMetadata], None]:
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

    def start(self, schema_changes: list[SchemaChange], source: SourceIdentity | None = None,
              check_frontier: Callable[[Frontier], None] | None = None,
              partition_change: PartitionChange | None = None) -> Progress:
        """Commit the fence: evolve the schema and the partitioning, claim the sink, pin the table, recover pending
        dead letters.

        ``source`` identifies the source this sink reads (recorded with every frontier);
        ``check_frontier`` raises when a frontier does not fit that source. Before anything is
        written, raises ``FencedError`` when a higher version already owns the sink (a higher
        version's commit on the main or on the dead-letter table), and
        ``ProgressConflictError`` when the table's progress cannot be resumed from (damaged, rolled
        back, or recorded for another source).
        """
        self.source = source
        progress_seen: list[Progress] = []

        def check(metadata: TableMetadata) -> None:
            progress = self._startup_check(metadata)
            if self._dead_letter_identifier:
                # A higher version that committed on the dead-letter table fences W as well: main may no
                # longer show it (rolled back past it, its checkpoint removed to start over), the
                # dead-letter table still does. Checked before the main fence, so a fenced W lands nothing.
                self._startup_check(self._catalog.load_table(self._dead_letter_identifier).metadata)
            protocol.check_resumable(progress, source)
            if progress.frontier is not None and check_frontier is not None:
                try:
                    check_frontier(progress.frontier)
                except (ValueError, TypeError, KeyError) as exc:
                    raise ProgressConflictError(
                        f"sink {self.writer.sink_id}: the table's frontier {protocol.encode_json(progress.frontier)} "
                        f"does not fit this sync's source ({exc}); refusing to resume from it"
                    ) from exc
            progress_seen.append(progress)

        def build(table: Table) -> tuple[Transaction, int]:
            # The fence's checkpoint carries the dead letters still pending, so that neither a crash
            # before the dead-letter fence nor expiry of the snapshots that listed them loses them.
            pending = self._pending_dead_letters(table.metadata, self._catalog.load_table(self._dead_letter_identifier))[0] \
                if self._dead_letter_identifier else []
            # The fence carries the freshness of the commit below it, so that status and lag survive a restart.
            last = progress_seen[-1].last_commit
            return self._transaction(table, self._statement(protocol.KIND_FENCE, progress_seen[-1].frontier, last),
                                     [], schema_changes, checkpoint_extra=_pending_extra(pending),
                                     partition_change=partition_change)

        snapshot, metadata = self._compare_and_swap(self._identifier, check, build)
        self.pins[self._identifier] = TablePin.of(metadata)
        self.last_snapshot = snapshot
        self.fence_time_ms = snapshot.timestamp_ms
        progress = progress_seen[-1]
        self.frontier = progress.frontier
        if self._dead_letter_identifier:
            self._fence_dead_letters(self._catalog.load_table(self._identifier))
        for note in progress.notes:
            log.warning("%s: %s", self.writer.sink_id, note)
        return progress

    def _fence_dead_letters(self, main: Table) -> None:
        """Fence the dead-letter table too, committing dead letters a crashed attempt left pending."""
        assert self._dead_letter_identifier is not None

        def check(metadata: TableMetadata) -> None:
            self._startup_check(metadata)

        def build(table: Table) -> tuple[Transaction, int]:
            pending, covered, frontier = self._pending_dead_letters(main.metadata, table)
            files = [self._rebuild_data_file(table, path) for path in pending] if self._rebuild_data_file else []
            if files:
                log.info("%s: recovering %d dead-letter file(s) committed to the main table up to snapshot %s",
                         self.writer.sink_id, len(files), covered[MAIN_SNAPSHOT])
            return self._transaction(table, self._statement(protocol.KIND_FENCE, frontier), files,
                                     checkpoint_extra=covered)

        snapshot, metadata = self._compare_and_swap(self._dead_letter_identifier, check, build)
        self.pins[self._dead_letter_identifier] = TablePin.of(metadata)
        self.last_dead_letter_snapshot = snapshot

    def _pending_dead_letters(self, main: TableMetadata, dead: Table) -> tuple[list[str], dict[str, int], Frontier | None]:
        """Dead-letter files listed by this sink's main commits that the dead-letter table lacks.

        Listed are the files of the sink's main commits down to the main snapshot the dead-letter
        checkpoint covers (by id, which every format version has, or by sequence number, format v2
        only), and those the main checkpoint carries (it survives expiry of the snapshots that
        listed them) unless its snapshot is covered or was rolled back. Files the dead-letter table
        already references are never added twice. Returns the files, the checkpoint fields that
        record the newest main commit now covered, and its frontier.
        """
        checkpoint = protocol.parse_checkpoint(dead.metadata, self.writer.sink_id)
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
            if commit is None or commit.writer.sink_id != self.writer.sink_id:
                continue
            if newest is None:
                newest, frontier = _covered(snapshot.snapshot_id, snapshot.sequence_number or 0), commit.frontier
            listed = list(commit.dead_letter_files) + listed
        carried = protocol.parse_checkpoint(main, self.writer.sink_id)
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

    # -- data commits -----------------------------------------------------------------------------

    def commit(self, output: TriggerOutput, frontier: Frontier) -> Commit:
        """Commit one trigger's staged files and frontier in ONE main-table snapshot (dead letters follow).

        With delete files the snapshot holds the data files and the equality delete files together
        (operation ``overwrite``, or ``delete`` without data files), as Iceberg's RowDelta does.
        Position deletes and carried rows are written for the head of each round, into that round's snapshot.
        This is the cut of one table (:func:`commit_together`).
        """
        [commit] = commit_together([self.data_commit(output, frontier)])
        return commit

    def data_commit(self, output: TriggerOutput, frontier: Frontier, cut: Mapping[str, object] | None = None,
                    ) -> DataCommit:
        """This table's part of a trigger's commit, for :func:`commit_together` (``cut``: the snapshot's
        ``icebergsync.cut``, for a sync of several tables)."""
        return DataCommit(self, output, frontier, cut)

    @property
    def identifier(self) -> str:
        return self._identifier

    @property
    def catalog(self) -> Catalog:
        return self._catalog

    def _commit_dead_letters(self, files: list[DataFile], frontier: Frontier, main: Snapshot) -> None:
        assert self._dead_letter_identifier is not None

        def build(table: Table) -> tuple[Transaction, int]:
            statement = protocol.CommitStatement(self.writer, protocol.KIND_DATA, frontier, source=self.source,
                                                 dead_letters=sum(f.record_count for f in files))
            return self._transaction(table, statement, files,
                                     checkpoint_extra=_covered(main.snapshot_id, main.sequence_number or 0))

        snapshot, _ = self._compare_and_swap(
            self._dead_letter_identifier, self._steady_check(self.last_dead_letter_snapshot), build
        )
        self.last_dead_letter_snapshot = snapshot

    # -- maintenance ------------------------------------------------------------------------------

    def commit_maintenance(self, planned: Snapshot, removed: list[DataFile], added: list[DataFile]) -> Commit:
        """Commit a rewrite planned on the main snapshot ``planned`` as ONE ``replace`` snapshot of kind maintenance.

        It removes the files ``removed`` (data files, delete files and DVs), adds the files ``added`` with the
        data sequence number of ``planned`` (so that every delete committed after ``planned`` still
        applies to them) and carries this writer's frontier and checkpoint unchanged, through the
        same fenced compare-and-swap as a data commit. A fenced writer lands nothing
        (``FencedError``); when main moved past ``planned`` (another writer committed meanwhile)
        ``MaintenanceConflictError`` says to plan again. Either way the caller deletes ``added``.
        """
        return self._commit_maintenance(planned, "rewrite", lambda transaction, summary: rewrite_files(
            transaction, summary, removed, added, planned.sequence_number or 0))

    def commit_manifest_rewrite(self, planned: Snapshot, bins: Sequence[Sequence[ManifestFile]]) -> Commit:
        """Commit a manifest rewrite planned on the main snapshot ``planned`` (each of ``bins`` merged into one
        manifest, every entry's sequence numbers kept) as ONE ``replace`` snapshot of kind maintenance, fenced
        and dropped when main moved exactly as :meth:`commit_maintenance`."""
        return self._commit_maintenance(planned, "manifest rewrite",
                                        lambda transaction, summary: rewrite_manifests(transaction, summary, bins))

    def _commit_maintenance(self, planned: Snapshot, what: str,
                            stage: Callable[[Transaction, dict[str, str]], int]) -> Commit:
        """Commit the snapshot ``stage`` stages (given its summary) on the head ``planned``, carrying this writer's
        frontier and checkpoint, through the fenced compare-and-swap; main moved: ``MaintenanceConflictError``."""
        started = time.monotonic()
        last = protocol.parse_commit(self.last_snapshot) if self.last_snapshot is not None else None
        steady = self._steady_check(self.last_snapshot)

        def check(metadata: TableMetadata) -> None:
            steady(metadata)
            if metadata.current_snapshot_id != planned.snapshot_id:
                raise MaintenanceConflictError(
                    f"main moved from snapshot {planned.snapshot_id} to {metadata.current_snapshot_id} while the "
                    f"{what} was planned; nothing was committed"
                )

        def build(table: Table) -> tuple[Transaction, int]:
            transaction = Transaction(table)
            summary = self._statement(protocol.KIND_MAINTENANCE, self.frontier, last).properties()
            snapshot_id = stage(transaction, summary)
            checkpoint = protocol.checkpoint_value(
                self.writer, self.frontier, snapshot_id, _pending_extra(self._pending_dead_letter_paths), self.source,
                added_snapshot(transaction, snapshot_id),
            )
            transaction.set_properties({protocol.checkpoint_key(self.writer.sink_id): checkpoint})
            return transaction, snapshot_id

        snapshot, _ = self._compare_and_swap(self._identifier, check, build)
        self.last_snapshot = snapshot
        return Commit(snapshot, (time.monotonic() - started) * 1000)

    def evolve_schema(self, changes: list[SchemaChange]) -> Commit:
        """Commit ``changes`` to the main table's schema as ONE empty snapshot of kind ``schema``.

        The change and the snapshot are one transaction through the fenced compare-and-swap of a data
        commit: a fenced (older) version changes nothing (``FencedError``), and the frontier and
        checkpoint are this writer's, unchanged. The table is pinned to the new schema afterwards.
        """
        started = time.monotonic()
        last = protocol.parse_commit(self.last_snapshot) if self.last_snapshot is not None else None

        def build(table: Table) -> tuple[Transaction, int]:
            return self._transaction(table, self._statement(protocol.KIND_SCHEMA, self.frontier, last), [], changes,
                                     checkpoint_extra=_pending_extra(self._pending_dead_letter_paths))

        snapshot, metadata = self._compare_and_swap(self._identifier, self._steady_check(self.last_snapshot), build)
        self.pins[self._identifier] = TablePin.of(metadata)
        self.last_snapshot = snapshot
        return Commit(snapshot, (time.monotonic() - started) * 1000)

    def expire_snapshots(self, older_than_ms: int, retain_last: int) -> list[Snapshot]:
        """Expire main-table snapshots older than ``older_than_ms`` (epoch ms) beyond the newest ``retain_last``
        of main, under the fence; return the expired snapshots.

        Never expired: the heads of branches and tags, the newest ``retain_last`` snapshots of main,
        and this writer's own newest snapshot (the fence check looks for it). The checkpoint property
        is untouched: it is what recovery reads once the snapshots carrying the summaries are gone.
        The commit asserts main's head and the table uuid, after the same fence check as a data
        commit; a conflict re-checks and recomputes. Expiry is idempotent, so an unknown outcome is
        retried the same way (a landed expiry leaves nothing to expire).
        """
        check = self._steady_check(self.last_snapshot)
        retry = _Retry("expiry", self._identifier)
        while True:
            table = self._catalog.load_table(self._identifier)
            if self._identifier in self.pins:
                self.pins[self._identifier].check(self._identifier, table.metadata)
            check(table.metadata)
            expired = expirable_snapshots(table.metadata, older_than_ms, retain_last,
                                          self.last_snapshot_id)
            if not expired:
                return []
            transaction = Transaction(table)
            expire_snapshots(transaction, [s.snapshot_id for s in expired])
            # An unknown outcome is retried like a conflict: recomputing finds nothing to expire if it landed.
            if retry.attempt(partial(commit_transaction, self._catalog, table, transaction,
                                     AssertTableUUID(uuid=table.metadata.table_uuid),
                                     main_head_requirement(table.metadata)), "re-checking") is not None:
                return expired

    # -- cleanup ----------------------------------------------------------------------------------

    def cleanup_orphans(self, table: Table, older_than_ms: int | None = None) -> list[str]:
        """Delete files of earlier attempts of this sink that no snapshot references: staged data and delete
        files, and the manifests and manifest lists of commits that never landed.

        Only files of lower versions, or of the same version by another attempt written before this
        attempt's fence, are candidates: a newer writer's files are never touched. With
        ``older_than_ms`` (epoch ms) only files written before it are (the periodic removal's safety age).
        """
        assert self.fence_time_ms is not None
        fence_time = datetime.fromtimestamp(self.fence_time_ms / 1000, tz=UTC)
        before = datetime.fromtimestamp(older_than_ms / 1000, tz=UTC) if older_than_ms is not None else None
        prefix = sink_file_prefix(self.writer.sink_id)
        candidates = []
        metadata_dir = table.location_provider().new_metadata_location("").rstrip("/")
        stored_files = [*list_files(f"{table.metadata.location}/data", table.io.properties),
                        *(f for f in list_files(metadata_dir, table.io.properties) if f.uri.endswith(".avro"))]
        for stored in stored_files:
            owner = file_owner(stored.uri.rsplit("/", 1)[-1], prefix)
            if owner is None or (before is not None and (stored.mtime is None or stored.mtime >= before)):
                continue
            version, attempt = owner
            older = version < self.writer.version
            same_version_before_fence = (
                version == self.writer.version and attempt != self.writer.attempt
                and stored.mtime is not None and stored.mtime < fence_time
            )
            if older or same_version_before_fence:
                candidates.append(stored.uri)
        if not candidates:
            return []
        referenced = referenced_files(table)
        orphans = [uri for uri in candidates if normalize(uri) not in referenced]
        for uri in orphans:
            with contextlib.suppress(FileNotFoundError):  # its (fenced) writer may have discarded it meanwhile
                table.io.delete(uri)
        if orphans:
            log.info("%s: deleted %d leftover file(s) of earlier attempts (staged files, manifests of commits that "
                     "never landed)", self.writer.sink_id, len(orphans))
        return orphans

    def discard(self, output: TriggerOutput) -> None:
        """Delete files staged for a main commit that certainly did not land."""
        self._delete_paths(output.all_paths())

    def _delete_paths(self, paths: Sequence[str]) -> None:
        delete_quietly(self._catalog, self._identifier, paths)

    def _position_deletes(self, table: Table, output: TriggerOutput) -> tuple[PositionDeleteDelta, CopyOnWrite]:
        """The position deletes (or deletion vectors) of the rows ``output.touched_keys`` hold on ``table``'s head,
        but for the small files written again instead, with the trigger's new rows of their partitions
        (:mod:`spark_app.commit.copy_on_write`, below ``copy_on_write_bytes``)."""
        snapshot = table.current_snapshot()
        if snapshot is None:
            return PositionDeleteDelta(), CopyOnWrite({})
        prefix = f"{attempt_file_prefix(self.writer)}-{snapshot.snapshot_id}"
        located = self._locate(table, snapshot, output.touched_keys)
        located.update(self._locate_copies(table, snapshot, output.removed_copies))
        cow = CopyOnWrite(located)
        if self.copy_on_write_bytes > 0 and not output.delete_files and (located or output.data_files):
            started = time.monotonic()
            cow = copy_on_write(table, located, output.data_files, self.copy_on_write_bytes, f"{prefix}-cow",
                                self._live_manifests)
            if cow.added:
                log.info("%s: wrote %d small data file(s) again in %.2fs (%d row(s), %d staged file(s) merged) "
                         "instead of position deletes", self.writer.sink_id, len(cow.removed_data),
                         time.monotonic() - started, cow.rows_rewritten, len(cow.replaced_staged))
        try:
            return stage_position_deletes(table, cow.located, prefix), cow
        except BaseException:
            self._delete_files(cow.added)
            raise

    def _locate(self, table: Table, snapshot: Snapshot, touched_keys: pa.Table | None) -> dict[str, DeletionVector]:
        """Data file path -> the positions of the rows ``touched_keys`` hold on ``snapshot``."""
        if touched_keys is None or touched_keys.num_rows == 0:
            return {}
        started, stats = time.monotonic(), LocateStats()
        located = locate_rows(table, snapshot, touched_keys, self._file_keys, stats, self._spark, self._key_columns)
        log.info("%s: located %d key(s) in %.2fs: %d of %d file(s) past bounds, %d of %d row group(s) searched "
                 "(%d skipped by statistics, %d by Bloom filters), %d key rows in memory, %d read (%d by Spark tasks), "
                 "%d file(s) with deletes", self.writer.sink_id, touched_keys.num_rows, time.monotonic() - started,
                 stats.files - stats.files_skipped_by_bounds, stats.files,
                 stats.row_groups - stats.row_groups_skipped_by_statistics - stats.row_groups_skipped_by_bloom,
                 stats.row_groups, stats.row_groups_skipped_by_statistics, stats.row_groups_skipped_by_bloom,
                 stats.rows_in_memory, stats.rows_read, stats.rows_read_in_tasks, len(located))
        return dict(located)

    def _locate_copies(self, table: Table, snapshot: Snapshot, removed: pa.Table | None) -> dict[str, DeletionVector]:
        """Data file path -> the positions of the live copies ``removed`` (a keyless trigger's) takes on ``snapshot``;
        copies the table does not hold are counted in ``unmatched_copies`` and warned about."""
        self.unmatched_copies = 0
        if removed is None or removed.num_rows == 0:
            return {}
        started, stats = time.monotonic(), LocateStats()
        located = locate_copies(table, snapshot, removed, self._file_keys, stats, self._spark)
        log.info("%s: located %d row(s) to remove (%d copies) in %.2fs: %d of %d file(s) read (%d row(s)), "
                 "%d file(s) with deletes", self.writer.sink_id, removed.num_rows,
                 sum(removed.column(COUNT_COLUMN).to_pylist()), time.monotonic() - started,
                 stats.files - stats.files_skipped_by_bounds, stats.files, stats.rows_read, len(located.positions))
        if located.unmatched:
            self.unmatched_copies = located.unmatched
            log.warning("%s: the source removed %d row(s) of %s that the table does not hold as live rows (a table "
                        "without a primary key: a delete or update removes one live row equal to its before image); "
                        "nothing else was removed for them", self.writer.sink_id, located.unmatched, table.name())
        return located.positions

    def _carry(self, table: Table, output: TriggerOutput) -> TaskResult | None:
        """The files of ``output.carried`` completed from their keys' live rows on ``table``'s head (data files, and
        dead letters of keys without one); raises ``BadInputError`` for those without a dead-letter table."""
        carried, plan = output.carried, output.carry_plan
        if carried is None or carried.num_rows == 0 or plan is None or plan.key is None:
            return None
        snapshot = None if output.truncate else table.current_snapshot()  # emptied first: no row lives on
        names = sorted({name for names in carried.column(CARRY_COLUMN).to_pylist() if names for name in names})
        moves = matching_moves(carried, output.moved)  # the old keys of primary-key updates (spark_app/commit/carry/moves.py)
        keys = carried.select(list(plan.key))
        if (old_keys := old_keys_to_read(moves, plan.key)) is not None:
            keys = pa.concat_tables([keys, old_keys.cast(keys.schema)])
        located = locate_rows(table, snapshot, keys, self._file_keys, LocateStats(),
                              self._spark, self._key_columns) if snapshot is not None else {}
        rows = live_positions(table, snapshot, located) if snapshot is not None else []
        live = read_live_rows(table, rows, plan.key, names, self._spark)
        moved, rest = fill_from_moves(carried, moves, live, plan.key)
        completed = pa.concat_tables([moved, fill(rest, live, plan.key)])
        result = stage_partition(plan, iter(completed.to_batches()),
                                 f"carry-{snapshot.snapshot_id if snapshot else 0}-{uuid.uuid4().hex[:8]}")
        if result.rejection is not None:
            raise result.rejection.error()
        log.info("%s: carried %d row(s)' unsent values from %d live row(s), %d dead letter(s)", self.writer.sink_id,
                 carried.num_rows, live.num_rows, result.dead_letters)
        return result

    def _delete_files(self, files: list[DataFile]) -> None:
        self._delete_paths([data_file.file_path for data_file in files])


@dataclass
class DataCommit:
    """One table's data commit of a trigger: its part of the cut, and what follows once it landed or was refused.

    Position deletes and carried rows are written for the head of each round, into that round's snapshot
    (``rounds``: what was written for each attempted snapshot).
    """

    committer: SinkCommitter
    output: TriggerOutput
    frontier: Frontier
    cut: Mapping[str, object] | None = None
    rounds: dict[int, _Round] = field(default_factory=dict)
    started: float = field(default_factory=time.monotonic)

    def part(self) -> SwapPart:
        committer = self.committer
        return SwapPart(committer.identifier, committer.pins.get(committer.identifier),
                        committer._steady_check(committer.last_snapshot), self._build)

    def _build(self, table: Table) -> tuple[Transaction, int]:
        committer, output = self.committer, self.output
        carried = committer._carry(table, output) or TaskResult()  # first: it may refuse the trigger
        committer.unmatched_copies = 0
        try:
            if output.truncate:  # a source truncate: every live file goes
                deletes, cow = _emptied(table)
            else:
                deletes, cow = committer._position_deletes(table, output)
        except BaseException:
            committer._delete_files([f.data_file for f in carried.files])
            raise
        written = _Round(deletes.added, carried, cow.added, cow.replaced_staged)
        dead_letters = output.dead_letter_files + written.carried_dead_letters
        dead_letter_paths = [f.file_path for f in dead_letters]
        replaced = {f.file_path for f in cow.replaced_staged}
        data_files = [f for f in output.data_files if f.file_path not in replaced] + cow.added
        statement = protocol.CommitStatement(
            committer.writer, protocol.KIND_DATA, self.frontier, source=committer.source,
            records=output.records + written.carried.records,
            dead_letters=output.dead_letters + written.carried.dead_letters, dead_letter_files=tuple(dead_letter_paths),
            max_event_time=output.max_event_time, source_lag=output.source_lag,
            source_notes=_noting_unmatched(output.source_notes, committer.unmatched_copies),
            cut=dict(self.cut) if self.cut else None,
        )
        transaction, snapshot_id = committer._transaction(
            table, statement, data_files + written.carried_data,
            checkpoint_extra=_pending_extra(dead_letter_paths if committer.dead_letter_identifier else []),
            delete_files=output.delete_files + deletes.added,
            removed_delete_files=deletes.removed + cow.removed_deletes, removed_data_files=cow.removed_data,
        )
        self.rounds[snapshot_id] = written
        return transaction, snapshot_id

    def abandon(self) -> None:
        """Delete everything staged for this commit: it certainly did not land (the check refused before it
        was sent)."""
        self.committer.discard(self.output)
        self.committer._delete_files([f for written in self.rounds.values() for f in written.files])

    def land(self, snapshot: Snapshot) -> Commit:
        """Book the snapshot that landed, delete what other rounds wrote, then commit the dead letters."""
        committer, output, frontier = self.committer, self.output, self.frontier
        committer._delete_files([f for snapshot_id, written in self.rounds.items()
                                 if snapshot_id != snapshot.snapshot_id for f in written.files])
        landed = self.rounds.get(snapshot.snapshot_id, _Round([], TaskResult()))
        # The staged files the landed snapshot merged into its copy-on-write files: no snapshot holds them.
        committer._delete_files(landed.replaced_staged)
        dead_letters = output.dead_letter_files + landed.carried_dead_letters
        output.records += landed.carried.records  # what the job logs and counts: the rows that landed
        output.dead_letters += landed.carried.dead_letters
        for reason, count in landed.carried.dead_letter_reasons.items():
            output.dead_letter_reasons[reason] = output.dead_letter_reasons.get(reason, 0) + count
        committer.last_snapshot = snapshot
        committer.frontier = frontier
        committer._pending_dead_letter_paths = ([f.file_path for f in dead_letters]
                                                if committer.dead_letter_identifier else [])
        crash_point("main-committed")
        if dead_letters and committer.dead_letter_identifier:
            # From here on every staged file is listed by a main commit: whatever happens to the
            # dead-letter commit, nothing is discarded (a newer writer's fence recovers the dead letters).
            committer._commit_dead_letters(dead_letters, frontier, snapshot)
        committer._pending_dead_letter_paths = []
        return Commit(snapshot, (time.monotonic() - self.started) * 1000)


UNMATCHED_COPIES_NOTE = "keyless-rows-not-found"


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


def commit_together(commits: Sequence[DataCommit]) -> list[Commit]:
    """Land the data commits of one trigger (to one table, or to several of one catalog) as ONE cut, or none.

    Every table's fence is checked on the head its snapshot is built on, and the cut is sent once all
    pass; a conflict on any table rebuilds all. A refusal on any table (fenced, rolled back, changed, bad
    input) deletes what every commit staged and raises. Several tables need a catalog that commits them
    atomically (``AtomicCutUnsupportedError`` otherwise, before anything is sent).
    """
    catalog = commits[0].committer.catalog
    if len(commits) > 1 and not atomic_cut_supported(catalog):
        raise AtomicCutUnsupportedError(f"catalog {catalog.name!r} cannot commit {len(commits)} tables atomically")
    try:
        landed = swap_cut(catalog, [commit.part() for commit in commits])
    except (FencedError, ProgressConflictError, TableChangedError, BadInputError):
        for commit in commits:
            commit.abandon()
        raise
    return [commit.land(snapshot) for commit, (snapshot, _) in zip(commits, landed, strict=True)]


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


class MaintenanceConflictError(IcebergSyncError):
    """Main moved while a rewrite was planned: nothing was committed, plan again later."""


def expirable_snapshots(metadata: TableMetadata, older_than_ms: int, retain_last: int,
                        keep: int | None = None) -> list[Snapshot]:
    """Snapshots an expiry removes: older than ``older_than_ms``, not among the newest ``retain_last`` of main,
    not the head of a branch or tag, and not ``keep``."""
    retained = {s.snapshot_id for _, s in zip(range(max(retain_last, 1)), protocol.main_ancestry(metadata), strict=False)}
    protected = {ref.snapshot_id for ref in metadata.refs.values()} | retained | ({keep} if keep is not None else set())
    return [s for s in metadata.snapshots if s.snapshot_id not in protected and s.timestamp_ms < older_than_ms]


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


def _covered(snapshot_id: int, sequence_number: int) -> dict[str, int]:
    """Dead-letter checkpoint fields recording that a main snapshot's dead letters are in the dead-letter table."""
    return {MAIN_SNAPSHOT: snapshot_id, MAIN_SEQUENCE: sequence_number}


def _pending_extra(paths: list[str]) -> dict[str, list[str]]:
    """Main checkpoint field listing dead-letter files not yet known to be in the dead-letter table."""
    return {PENDING_DEAD_LETTERS: paths} if paths else {}


def referenced_files(table: Table) -> set[str]:
    """Normalized paths of every file any snapshot of the table references: manifest lists, manifests, and their
    data and delete files."""
    return set(file_references(table, table.metadata.snapshots, live_only=False))


def file_references(table: Table, snapshots: Sequence[Snapshot], live_only: bool) -> dict[str, str]:
    """Normalized path -> URI of the files ``snapshots`` reference: manifest lists, manifests, and their data and
    delete files (``live_only``: only those live in a snapshot, not those it records as deleted)."""
    referenced: dict[str, str] = {}
    for snapshot in snapshots:
        referenced[normalize(snapshot.manifest_list)] = snapshot.manifest_list
        for manifest in snapshot.manifests(table.io):
            if normalize(manifest.manifest_path) in referenced:
                continue
            referenced[normalize(manifest.manifest_path)] = manifest.manifest_path
            for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=live_only):
                referenced[normalize(entry.data_file.file_path)] = entry.data_file.file_path
    return referenced
