"""Driver side of phase 2: fence, commit once per trigger, recover dead letters, clean up orphans.

Every commit is a compare-and-swap against the main-branch head that was checked for fencing:
pyiceberg's own commit loop (which rebases a conflicting commit onto the new head) is bypassed,
because a rebase would let a stale writer land on top of a newer one. On conflict the table is
reloaded and the fence re-checked; on an unknown outcome (e.g. a 5xx from a REST catalog) the
table is reloaded and searched for the snapshot ids this commit attempted before anything else.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import CommitFailedException
from pyiceberg.manifest import DataFile
from pyiceberg.table import Table, Transaction
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.snapshots import Snapshot
from pyiceberg.table.update import AssertTableUUID

from icebergsync import protocol
from icebergsync.errors import CommitStateUnknownError, FencedError, IcebergSyncError
from icebergsync.protocol import Frontier, Progress, Writer
from icebergsync.schema import SchemaChange
from icebergsync.storage import list_files, normalize
from spark_app.faults import crash_point

log = logging.getLogger("icebergsync.committer")

MAIN_SEQUENCE = "main-sequence-number"
UNKNOWN_OUTCOME_DEADLINE_SECONDS = 300.0


def sink_file_prefix(sink_id: str) -> str:
    """File-name prefix shared by every file any version of this sink stages."""
    return "isync-" + hashlib.sha1(sink_id.encode()).hexdigest()[:10]


def attempt_file_prefix(writer: Writer) -> str:
    """File-name prefix of one attempt: sink prefix, version and attempt id."""
    return f"{sink_file_prefix(writer.sink_id)}-v{writer.version}-{writer.attempt}"


def _parse_file_owner(name: str, sink_prefix: str) -> tuple[int, str] | None:
    """(version, attempt) encoded in a staged file's name, or None if it is not this sink's."""
    if not name.startswith(sink_prefix + "-v"):
        return None
    parts = name[len(sink_prefix) + 2:].split("-")
    try:
        return int(parts[0]), parts[1]
    except (IndexError, ValueError):
        return None


@dataclass(frozen=True)
class Commit:
    """A commit that landed: its snapshot and how long the compare-and-swap took."""

    snapshot: Snapshot
    commit_ms: float


@dataclass
class TriggerOutput:
    """What one trigger staged, to be committed in one snapshot."""

    data_files: list[DataFile] = field(default_factory=list)
    dead_letter_files: list[DataFile] = field(default_factory=list)
    records: int = 0
    dead_letters: int = 0
    dead_letter_reasons: dict[str, int] = field(default_factory=dict)
    max_event_time: str | None = None
    source_lag: dict[str, object] | None = None
    source_notes: dict[str, object] | None = None

    @property
    def bytes(self) -> int:
        return sum(f.file_size_in_bytes for f in self.data_files) + sum(f.file_size_in_bytes for f in self.dead_letter_files)

    def all_paths(self) -> list[str]:
        return [f.file_path for f in self.data_files + self.dead_letter_files]


class SinkCommitter:
    """Owns every write the sink makes to the catalog."""

    def __init__(self, catalog: Catalog, identifier: str, writer: Writer, dead_letter_identifier: str | None = None,
                 rebuild_data_file: Callable[[Table, str], DataFile] | None = None):
        self._catalog = catalog
        self._identifier = identifier
        self._dead_letter_identifier = dead_letter_identifier
        self._rebuild_data_file = rebuild_data_file
        self.writer = writer
        self.last_snapshot_id: int | None = None
        self.last_dead_letter_snapshot_id: int | None = None
        self.fence_time_ms: int | None = None

    # -- compare-and-swap -------------------------------------------------------------------------

    def _compare_and_swap(
        self,
        identifier: str,
        check: Callable[[TableMetadata], None],
        build: Callable[[Table], tuple[Transaction, int]],
    ) -> Snapshot:
        """Commit ``build``'s transaction iff ``check`` passes on the head it was built on; return the snapshot that landed."""
        attempted: list[int] = []
        deadline = time.monotonic() + UNKNOWN_OUTCOME_DEADLINE_SECONDS
        rounds = 0
        while True:
            rounds += 1
            table = self._catalog.load_table(identifier)
            landed = next((s for s in map(table.metadata.snapshot_by_id, attempted) if s is not None), None)
            if landed is not None:
                return landed
            check(table.metadata)
            transaction, snapshot_id = build(table)
            attempted.append(snapshot_id)
            requirements = (*transaction._requirements, AssertTableUUID(uuid=table.metadata.table_uuid))
            try:
                response = self._catalog.commit_table(table, requirements, transaction._updates)
            except CommitFailedException as exc:
                log.info("commit conflict on %s (round %d): %s; re-checking the fence", identifier, rounds, exc)
                time.sleep(random.uniform(0.0, min(1.0, 0.01 * 2**min(rounds, 7))))
                continue
            except (IcebergSyncError, KeyboardInterrupt):
                raise
            except Exception as exc:  # unknown outcome: the commit may or may not have landed
                if time.monotonic() > deadline:
                    raise CommitStateUnknownError(
                        f"commit to {identifier} failed with an unknown outcome for "
                        f"{UNKNOWN_OUTCOME_DEADLINE_SECONDS:.0f}s: {exc}"
                    ) from exc
                log.warning("commit to %s had an unknown outcome (%s); looking for snapshot(s) %s",
                            identifier, exc, attempted)
                time.sleep(min(5.0, 0.2 * 2**min(rounds, 5)))
                continue
            snapshot = response.metadata.snapshot_by_id(snapshot_id)
            if snapshot is None:
                raise CommitStateUnknownError(f"commit to {identifier} succeeded but snapshot {snapshot_id} is missing")
            return snapshot

    def _transaction(
        self, table: Table, kind: str, frontier: Frontier | None, files: list[DataFile],
        schema_changes: list[SchemaChange] | None = None, checkpoint_extra: dict[str, object] | None = None,
        **properties: object,
    ) -> tuple[Transaction, int]:
        transaction = Transaction(table)
        if schema_changes:
            with transaction.update_schema() as update:
                for change in schema_changes:
                    if change.kind == "add":
                        assert change.new_type is not None
                        update.add_column(change.column, change.new_type, required=False)
                    elif change.kind == "widen":
                        update.update_column(change.column, field_type=change.new_type)
                    else:
                        update.update_column(change.column, required=False)
        summary = protocol.snapshot_properties(self.writer, kind, frontier, **properties)  # type: ignore[arg-type]
        with transaction.update_snapshot(snapshot_properties=summary).fast_append() as append:
            for data_file in files:
                append.append_data_file(data_file)
            snapshot_id = append.snapshot_id
        checkpoint = protocol.checkpoint_value(self.writer, frontier, snapshot_id, checkpoint_extra)
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

    def _steady_check(self, last_snapshot_id: int | None) -> Callable[[TableMetadata], None]:
        def check(metadata: TableMetadata) -> None:
            if last_snapshot_id is None:
                raise IcebergSyncError("commit before fence: call start() first")
            owner = protocol.steady_fence_owner(metadata, self.writer, last_snapshot_id)
            if owner is not None:
                raise FencedError(self.writer.sink_id, self.writer.version, owner.version, owner.attempt)
            on_main = any(s.snapshot_id == last_snapshot_id for s in protocol.main_ancestry(metadata))  # stops there
            if not on_main and metadata.snapshot_by_id(last_snapshot_id) is not None:
                raise IcebergSyncError(
                    f"snapshot {last_snapshot_id} of this sink is no longer on main (the table was rolled back); "
                    "restart to resume from the table"
                )
        return check

    def start(self, schema_changes: list[SchemaChange]) -> Progress:
        """Commit the fence: evolve the schema, claim the sink, recover pending dead letters.

        Raises ``FencedError`` when a higher version already owns the sink.
        """
        progress_seen: list[Progress] = []

        def check(metadata: TableMetadata) -> None:
            progress_seen.append(self._startup_check(metadata))

        def build(table: Table) -> tuple[Transaction, int]:
            return self._transaction(table, protocol.KIND_FENCE, progress_seen[-1].frontier, [], schema_changes)

        snapshot = self._compare_and_swap(self._identifier, check, build)
        self.last_snapshot_id = snapshot.snapshot_id
        self.fence_time_ms = snapshot.timestamp_ms
        progress = progress_seen[-1]
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
            covered = self._dead_letter_sequence(table.metadata)
            pending, sequence, frontier = self._pending_dead_letters(main.metadata, covered)
            files = [self._rebuild_data_file(table, path) for path in pending] if self._rebuild_data_file else []
            if files:
                log.info("%s: recovering %d dead-letter file(s) committed to the main table up to sequence %d",
                         self.writer.sink_id, len(files), sequence)
            return self._transaction(
                table, protocol.KIND_FENCE, frontier, files, checkpoint_extra={MAIN_SEQUENCE: sequence}
            )

        snapshot = self._compare_and_swap(self._dead_letter_identifier, check, build)
        self.last_dead_letter_snapshot_id = snapshot.snapshot_id

    def _dead_letter_sequence(self, metadata: TableMetadata) -> int:
        checkpoint = protocol.parse_checkpoint(metadata, self.writer.sink_id)
        return int(checkpoint.extra.get(MAIN_SEQUENCE, 0)) if checkpoint else 0

    def _pending_dead_letters(self, main: TableMetadata, covered_sequence: int) -> tuple[list[str], int, Frontier | None]:
        """Dead-letter files listed by this sink's main commits newer than ``covered_sequence``."""
        pending: list[str] = []
        newest_sequence = covered_sequence
        frontier: Frontier | None = None
        for snapshot in protocol.main_ancestry(main):
            if snapshot.sequence_number is not None and snapshot.sequence_number <= covered_sequence:
                break
            commit = protocol.parse_commit(snapshot)
            if commit is None or commit.writer.sink_id != self.writer.sink_id:
                continue
            if frontier is None:
                frontier = commit.frontier
                newest_sequence = max(newest_sequence, snapshot.sequence_number or 0)
            pending = list(commit.dead_letter_files) + pending
        return pending, newest_sequence, frontier

    # -- data commits -----------------------------------------------------------------------------

    def commit(self, output: TriggerOutput, frontier: Frontier) -> Commit:
        """Commit one trigger's staged files and frontier in ONE main-table snapshot (dead letters follow)."""
        started = time.monotonic()
        max_event_time = output.max_event_time
        dead_letter_paths = [f.file_path for f in output.dead_letter_files]

        def build(table: Table) -> tuple[Transaction, int]:
            return self._transaction(
                table, protocol.KIND_DATA, frontier, output.data_files,
                records=output.records, dead_letters=output.dead_letters, dead_letter_files=dead_letter_paths,
                max_event_time=max_event_time, source_lag=output.source_lag, source_notes=output.source_notes,
            )

        snapshot = self._compare_and_swap(self._identifier, self._steady_check(self.last_snapshot_id), build)
        self.last_snapshot_id = snapshot.snapshot_id
        sequence = snapshot.sequence_number or 0
        crash_point("main-committed")
        if output.dead_letter_files and self._dead_letter_identifier:
            self._commit_dead_letters(output.dead_letter_files, frontier, sequence)
        return Commit(snapshot, (time.monotonic() - started) * 1000)

    def _commit_dead_letters(self, files: list[DataFile], frontier: Frontier, main_sequence: int) -> None:
        assert self._dead_letter_identifier is not None

        def build(table: Table) -> tuple[Transaction, int]:
            return self._transaction(
                table, protocol.KIND_DATA, frontier, files, checkpoint_extra={MAIN_SEQUENCE: main_sequence},
                dead_letters=sum(f.record_count for f in files),
            )

        snapshot = self._compare_and_swap(
            self._dead_letter_identifier, self._steady_check(self.last_dead_letter_snapshot_id), build
        )
        self.last_dead_letter_snapshot_id = snapshot.snapshot_id

    # -- cleanup ----------------------------------------------------------------------------------

    def cleanup_orphans(self, table: Table) -> list[str]:
        """Delete staged files of earlier attempts of this sink that no snapshot references.

        Only files of lower versions, or of the same version by another attempt written before this
        attempt's fence, are candidates: a newer writer's staged files are never touched.
        """
        assert self.fence_time_ms is not None
        fence_time = datetime.fromtimestamp(self.fence_time_ms / 1000, tz=UTC)
        prefix = sink_file_prefix(self.writer.sink_id)
        candidates = []
        for stored in list_files(f"{table.metadata.location}/data", table.io.properties):
            owner = _parse_file_owner(stored.uri.rsplit("/", 1)[-1], prefix)
            if owner is None:
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
            log.info("%s: deleted %d leftover staged file(s) of earlier attempts", self.writer.sink_id, len(orphans))
        return orphans

    def discard(self, table: Table, output: TriggerOutput) -> None:
        """Delete files staged for a commit that will never happen (fenced or failed)."""
        for path in output.all_paths():
            with contextlib.suppress(FileNotFoundError):
                table.io.delete(path)


def referenced_files(table: Table) -> set[str]:
    """Normalized paths of every data file referenced by any snapshot of the table."""
    referenced: set[str] = set()
    seen_manifests: set[str] = set()
    for snapshot in table.metadata.snapshots:
        for manifest in snapshot.manifests(table.io):
            if manifest.manifest_path in seen_manifests:
                continue
            seen_manifests.add(manifest.manifest_path)
            for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=False):
                referenced.add(normalize(entry.data_file.file_path))
    return referenced
