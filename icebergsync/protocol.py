"""The snapshot-property protocol: how a sink records progress and ownership in the table itself.

Every snapshot a sink commits carries ``icebergsync.*`` summary properties (who wrote it and the
source frontier it covers). The same commit also sets one table property per sink, the
*checkpoint*, which survives snapshot expiry. See docs/protocol.md for the full algorithm.

Everything here is pure: it reads table metadata and decides; it never writes.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from icebergsync.errors import ProgressConflictError

if TYPE_CHECKING:
    from pyiceberg.table.metadata import TableMetadata
    from pyiceberg.table.snapshots import Snapshot

PROTOCOL_VERSION = "1"
PREFIX = "icebergsync."
SINK_ID = "icebergsync.sink-id"
SINK_VERSION = "icebergsync.sink-version"
ATTEMPT = "icebergsync.attempt"
KIND = "icebergsync.kind"
FRONTIER = "icebergsync.frontier"
PROTOCOL = "icebergsync.protocol"
RECORDS = "icebergsync.records"
DEAD_LETTERS = "icebergsync.dead-letters"
DEAD_LETTER_FILES = "icebergsync.dead-letter-files"
MAX_EVENT_TIME = "icebergsync.max-event-time"
SOURCE_LAG = "icebergsync.source-lag"
SOURCE_NOTES = "icebergsync.source-notes"
SOURCE = "icebergsync.source"
# A commit of a sync of several tables (CommitStatement.cut).
CUT = "icebergsync.cut"
CHECKPOINT_PREFIX = "icebergsync.checkpoint."
# Only a dead-letter table's checkpoint holds this field: the main snapshot whose dead letters it covers.
MAIN_SNAPSHOT_ID = "main-snapshot-id"

KIND_FENCE = "fence"
KIND_DATA = "data"
# Table maintenance by the sink (spark_app/upkeep/runner.py): a ``replace`` snapshot that changes how
# rows are stored, never which rows; it carries the frontier of the commit below it unchanged.
KIND_MAINTENANCE = "maintenance"
# A schema change the source's records asked for (spark_app/decoding/schema_drift/): an empty snapshot in the same
# transaction as the change, carrying the frontier of the commit below it unchanged (docs/protocol.md).
KIND_SCHEMA = "schema"

Frontier = dict[str, Any]
SourceIdentity = dict[str, Any]


def encode_json(value: Any) -> str:
    """Canonical JSON (sorted keys, no spaces): equal values always encode to equal strings."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def checkpoint_key(sink_id: str) -> str:
    """The table property that holds a sink's checkpoint."""
    return CHECKPOINT_PREFIX + sink_id


@dataclass(frozen=True)
class Writer:
    """One running attempt of a sink: its id, its version and a unique attempt id."""

    sink_id: str
    version: int
    attempt: str


def sink_file_prefix(sink_id: str) -> str:
    """File-name prefix shared by every file any version of this sink writes (staged files, manifests)."""
    return "isync-" + hashlib.sha1(sink_id.encode()).hexdigest()[:10]


def attempt_file_prefix(writer: Writer) -> str:
    """File-name prefix of one attempt: sink prefix, version and attempt id."""
    return f"{sink_file_prefix(writer.sink_id)}-v{writer.version}-{writer.attempt}"


def summary_writer(summary: Mapping[str, str]) -> Writer | None:
    """The writer a snapshot summary names (None: not a sink's snapshot)."""
    try:
        return Writer(summary[SINK_ID], int(summary[SINK_VERSION]), summary[ATTEMPT])
    except (KeyError, ValueError):
        return None


_MANIFEST_LIST_NAME = re.compile(r"^snap-\d+-\d+-")  # pyiceberg's: snap-<snapshot id>-<attempt>-<commit uuid>.avro


def file_owner(name: str, sink_prefix: str) -> tuple[int, str] | None:
    """(version, attempt) of the sink's attempt that wrote the file ``name``, or None if no attempt of the sink
    with ``sink_prefix`` did: a staged data or delete file (``<attempt prefix>-…``), a manifest
    (``<attempt prefix>-<uuid>-m<n>.avro``) or a manifest list (``snap-<snapshot id>-<n>-<attempt prefix>-….avro``)."""
    name = _MANIFEST_LIST_NAME.sub("", name)
    if not name.startswith(sink_prefix + "-v"):
        return None
    parts = name[len(sink_prefix) + 2:].split("-")
    try:
        return int(parts[0]), parts[1]
    except (IndexError, ValueError):
        return None


class DamagedRecordError(ProgressConflictError):
    """A snapshot summary or checkpoint that names a sink but cannot be parsed."""


@dataclass(frozen=True)
class CommitStatement:
    """What one snapshot written by a sink states about itself: the ``icebergsync.*`` summary properties.

    :meth:`properties` writes them and :meth:`from_properties` reads them back; empty values (no source, no
    dead-letter files, no event time, no lag, notes or cut) are left out of the properties and read back as such.
    """

    writer: Writer
    kind: str
    frontier: Frontier | None
    source: SourceIdentity | None = None
    records: int = 0
    dead_letters: int = 0
    dead_letter_files: tuple[str, ...] = ()
    max_event_time: str | None = None
    source_lag: dict[str, Any] | None = None
    source_notes: dict[str, Any] | None = None
    # Only in a sync of several tables: {"atomic": bool, "id": cut id, "tables": tables in the cut}.
    cut: dict[str, Any] | None = None

    def properties(self) -> dict[str, str]:
        """The snapshot summary properties that state this."""
        properties = {
            PROTOCOL: PROTOCOL_VERSION,
            SINK_ID: self.writer.sink_id,
            SINK_VERSION: str(self.writer.version),
            ATTEMPT: self.writer.attempt,
            KIND: self.kind,
            FRONTIER: encode_json(self.frontier),
            RECORDS: str(self.records),
            DEAD_LETTERS: str(self.dead_letters),
        }
        if self.source:
            properties[SOURCE] = encode_json(self.source)
        if self.dead_letter_files:
            properties[DEAD_LETTER_FILES] = encode_json(list(self.dead_letter_files))
        if self.max_event_time:
            properties[MAX_EVENT_TIME] = self.max_event_time
        if self.source_lag:
            properties[SOURCE_LAG] = encode_json(self.source_lag)
        if self.source_notes:
            properties[SOURCE_NOTES] = encode_json(self.source_notes)
        if self.cut:
            properties[CUT] = encode_json(self.cut)
        return properties

    @classmethod
    def from_properties(cls, summary: Mapping[str, str]) -> CommitStatement:
        """The statement a sink's snapshot summary makes (written before a property existed: its empty value).

        Raises ``DamagedRecordError`` when the summary names a sink but does not parse (its cause says why).
        """
        try:
            dead_letter_files = json.loads(summary[DEAD_LETTER_FILES]) if DEAD_LETTER_FILES in summary else []
            if not isinstance(dead_letter_files, list) or not all(isinstance(p, str) for p in dead_letter_files):
                raise TypeError(f"{DEAD_LETTER_FILES} is not a list of paths")
            return cls(
                writer=Writer(summary[SINK_ID], int(summary[SINK_VERSION]), summary.get(ATTEMPT, "")),
                kind=summary.get(KIND, KIND_DATA),
                frontier=_json_object_or_none(summary, FRONTIER),
                source=_json_object_or_none(summary, SOURCE),
                records=int(summary.get(RECORDS, "0")),
                dead_letters=int(summary.get(DEAD_LETTERS, "0")),
                dead_letter_files=tuple(dead_letter_files),
                max_event_time=summary.get(MAX_EVENT_TIME),
                source_lag=_json_object_or_none(summary, SOURCE_LAG),
                source_notes=_json_object_or_none(summary, SOURCE_NOTES),
                cut=_json_object_or_none(summary, CUT),
            )
        except (ValueError, TypeError, KeyError) as exc:
            raise DamagedRecordError(f"the properties of sink {summary.get(SINK_ID)!r} are damaged: {exc!r}") from exc


@dataclass(frozen=True)
class SinkCommit(CommitStatement):
    """A sink's statement as one snapshot of the table holds it: with that snapshot's id and timestamp."""

    snapshot_id: int = field(kw_only=True)
    timestamp_ms: int = field(kw_only=True)


@dataclass(frozen=True)
class Checkpoint:
    """The expiry-proof table property a sink sets with every commit."""

    writer: Writer
    frontier: Frontier | None
    snapshot_id: int
    source: SourceIdentity | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    # The snapshot's sequence number and timestamp, to place it in main's history once it has
    # expired (absent from checkpoints written before they were recorded).
    sequence_number: int | None = None
    timestamp_ms: int | None = None


_CHECKPOINT_FIELDS = (
    "version", "attempt", "frontier", "snapshot-id", "source", "snapshot-sequence-number", "snapshot-timestamp-ms"
)


def checkpoint_value(
    writer: Writer, frontier: Frontier | None, snapshot_id: int, extra: Mapping[str, Any] | None = None,
    source: SourceIdentity | None = None, snapshot: Snapshot | None = None,
) -> str:
    """The value of the checkpoint table property for a commit (``extra`` adds writer-specific fields;
    ``snapshot``, the snapshot the commit adds, records its sequence number and timestamp)."""
    value: dict[str, Any] = {
        **(extra or {}),
        "version": writer.version, "attempt": writer.attempt, "frontier": frontier, "snapshot-id": snapshot_id,
    }
    if snapshot is not None:
        value["snapshot-sequence-number"] = snapshot.sequence_number or 0
        value["snapshot-timestamp-ms"] = snapshot.timestamp_ms
    if source:
        value["source"] = source
    return encode_json(value)


def _json_object_or_none(summary: Mapping[str, str], key: str) -> dict[str, Any] | None:
    """The JSON object (or null) the property ``key`` holds; None when absent."""
    if key not in summary:
        return None
    value = json.loads(summary[key])
    if value is not None and not isinstance(value, dict):
        raise TypeError(f"{key} is not a JSON object")
    return value


def parse_commit(snapshot: Snapshot) -> SinkCommit | None:
    """The sink commit a snapshot records; None when no sink wrote it.

    Raises ``DamagedRecordError`` when the snapshot names a sink but its properties do not parse.
    """
    summary = snapshot.summary.additional_properties if snapshot.summary else {}
    if SINK_ID not in summary:
        return None
    try:
        statement = CommitStatement.from_properties(summary)
    except DamagedRecordError as exc:
        raise DamagedRecordError(
            f"snapshot {snapshot.snapshot_id} names sink {summary[SINK_ID]!r} but its properties are damaged: "
            f"{exc.__cause__!r}"
        ) from exc.__cause__
    return SinkCommit(**vars(statement),
                      snapshot_id=snapshot.snapshot_id, timestamp_ms=snapshot.timestamp_ms)


def parse_checkpoint(metadata: TableMetadata, sink_id: str) -> Checkpoint | None:
    """The sink's checkpoint table property; None when absent.

    Raises ``DamagedRecordError`` when the property is present but does not parse.
    """
    raw = metadata.properties.get(checkpoint_key(sink_id))
    if raw is None:
        return None
    try:
        value = json.loads(raw)
        if not isinstance(value, dict):
            raise TypeError("not a JSON object")
        frontier, source = value.get("frontier"), value.get("source")
        if not (frontier is None or isinstance(frontier, dict)) or not (source is None or isinstance(source, dict)):
            raise TypeError("frontier and source must be JSON objects")
        return Checkpoint(
            writer=Writer(sink_id, int(value["version"]), str(value.get("attempt", ""))),
            frontier=frontier,
            snapshot_id=int(value.get("snapshot-id", -1)),
            source=source,
            extra={k: v for k, v in value.items() if k not in _CHECKPOINT_FIELDS},
            sequence_number=int(value["snapshot-sequence-number"]) if "snapshot-sequence-number" in value else None,
            timestamp_ms=int(value["snapshot-timestamp-ms"]) if "snapshot-timestamp-ms" in value else None,
        )
    except (ValueError, TypeError, KeyError) as exc:
        raise DamagedRecordError(
            f"table property {checkpoint_key(sink_id)} is present but damaged ({exc!r}): {raw[:200]!r}"
        ) from exc


def main_ancestry(metadata: TableMetadata) -> Iterator[Snapshot]:
    """Snapshots of the main branch from the head back to the oldest one still present."""
    snapshot = metadata.current_snapshot()
    while snapshot is not None:
        yield snapshot
        if snapshot.parent_snapshot_id is None:
            return
        snapshot = metadata.snapshot_by_id(snapshot.parent_snapshot_id)


def is_on_main(metadata: TableMetadata, snapshot_id: int) -> bool:
    """Whether an existing snapshot is an ancestor of (or is) the main head.

    Walks main's parents. Expiry may have cut that history (pyiceberg even clears the parent id of
    a snapshot whose parent it expired), so when the walk ends without reaching the snapshot, it
    counts as an ancestor iff it is older than the oldest snapshot reached. A larger sequence number
    (format v2) or a later timestamp than that one means it was committed after the history main
    now holds: main was rolled back past it.
    """
    target = metadata.snapshot_by_id(snapshot_id)
    if target is None:
        return False
    return was_on_main(metadata, snapshot_id, target.sequence_number or 0, target.timestamp_ms)


def was_on_main(metadata: TableMetadata, snapshot_id: int, sequence_number: int, timestamp_ms: int) -> bool:
    """Whether a snapshot (present or expired) with this sequence number and timestamp is on main's history.

    The rule of ``is_on_main``, for a snapshot known only by what a checkpoint recorded of it.
    """
    oldest: Snapshot | None = None
    for snapshot in main_ancestry(metadata):
        if snapshot.snapshot_id == snapshot_id:
            return True
        oldest = snapshot
    if oldest is None:
        return False
    if sequence_number > 0 and sequence_number >= (oldest.sequence_number or 0):
        return False
    return timestamp_ms <= oldest.timestamp_ms


@dataclass(frozen=True)
class Progress:
    """What the table says about a sink: where to resume and who owns it.

    ``conflict`` says why the sink must not resume (damaged record, rollback past its commits);
    ``resumed_from`` is then ``"conflict"`` and the frontier None.
    """

    sink_id: str
    last_commit: SinkCommit | None
    checkpoint: Checkpoint | None
    highest: Writer | None
    frontier: Frontier | None
    resumed_from: str  # "snapshot" | "checkpoint" | "none" | "conflict"
    source: SourceIdentity | None = None
    foreign_snapshots_on_top: int = 0
    notes: list[str] = field(default_factory=list)
    conflict: str | None = None


def read_progress(metadata: TableMetadata, sink_id: str) -> Progress:
    """Find where ``sink_id`` resumes and the highest writer that has claimed it.

    The frontier is that of the newest main-branch ancestor written by the sink; snapshots of other
    writers (compaction, manual appends, other sinks) are skipped. When none is reachable the
    checkpoint property supplies it if its snapshot was expired or is still on main (expiry cut the
    history above it). A checkpoint snapshot that exists but is not on main means the table was
    rolled back past every commit of the sink: that, and damaged records of this sink, are a
    ``conflict`` (never a silent replay from the source's start).
    """
    last_commit: SinkCommit | None = None
    highest: Writer | None = None
    foreign_on_top = 0
    try:
        for snapshot in main_ancestry(metadata):
            summary = snapshot.summary.additional_properties if snapshot.summary else {}
            if summary.get(SINK_ID) != sink_id:
                if last_commit is None:
                    foreign_on_top += 1
                continue
            commit = parse_commit(snapshot)
            assert commit is not None
            if last_commit is None:
                last_commit = commit
            if highest is None or commit.writer.version > highest.version:
                highest = commit.writer
        checkpoint = parse_checkpoint(metadata, sink_id)
    except DamagedRecordError as exc:
        return Progress(sink_id, last_commit, None, highest, None, "conflict", None, foreign_on_top, conflict=str(exc))
    if checkpoint and (highest is None or checkpoint.writer.version > highest.version):
        highest = checkpoint.writer
    notes: list[str] = []
    if last_commit is not None:
        if checkpoint is not None and checkpoint.snapshot_id != last_commit.snapshot_id \
                and metadata.snapshot_by_id(checkpoint.snapshot_id) is not None \
                and not is_on_main(metadata, checkpoint.snapshot_id):
            notes.append(f"checkpoint snapshot {checkpoint.snapshot_id} is not on main (the table was rolled back): "
                         f"resuming from snapshot {last_commit.snapshot_id}, which main holds")
        return Progress(sink_id, last_commit, checkpoint, highest, last_commit.frontier, "snapshot",
                        last_commit.source, foreign_on_top, notes)
    if checkpoint is None:
        return Progress(sink_id, None, None, highest, None, "none", None, foreign_on_top)
    if checkpoint_on_main(metadata, checkpoint):
        return Progress(sink_id, None, checkpoint, highest, checkpoint.frontier, "checkpoint", checkpoint.source,
                        foreign_on_top)
    conflict = (f"the table was rolled back past every commit of sink {sink_id}: its checkpoint snapshot "
                f"{checkpoint.snapshot_id} is not on main's history. Resuming would replay the source from its start "
                f"(duplicates) or from the checkpoint (rows the table no longer holds); restore the table, or "
                f"remove the table property {checkpoint_key(sink_id)} to start over deliberately")
    return Progress(sink_id, None, checkpoint, highest, None, "conflict", checkpoint.source, foreign_on_top,
                    conflict=conflict)


def checkpoint_on_main(metadata: TableMetadata, checkpoint: Checkpoint) -> bool:
    """Whether the checkpoint's snapshot is (or, expired, was) on main's history.

    An expired snapshot is placed by the sequence number and timestamp the checkpoint recorded;
    checkpoints written before those were recorded are trusted (expiry is the common case).
    """
    if metadata.snapshot_by_id(checkpoint.snapshot_id) is not None:
        return is_on_main(metadata, checkpoint.snapshot_id)
    if checkpoint.sequence_number is None or checkpoint.timestamp_ms is None:
        return True
    return was_on_main(metadata, checkpoint.snapshot_id, checkpoint.sequence_number, checkpoint.timestamp_ms)


def startup_fence_owner(progress: Progress, me: Writer) -> Writer | None:
    """Before the fence commit: the writer that outranks ``me`` by a higher version, if any.

    ``progress`` is ``read_progress`` of the head being checked. A restart of the same version (same
    version, new attempt) takes over, so only higher versions count.
    """
    if progress.highest is not None and progress.highest.version > me.version:
        return progress.highest
    return None


def check_resumable(progress: Progress, source: SourceIdentity | None) -> None:
    """Raise ``ProgressConflictError`` unless a sink reading ``source`` may resume from ``progress``.

    Refused: a conflict (damaged record, rollback), or a frontier recorded for another source.
    Frontiers recorded before the source identity was (no ``source``) are accepted.
    """
    if progress.conflict is not None:
        raise ProgressConflictError(progress.conflict)
    if source is not None and progress.source is not None and progress.source != source:
        raise ProgressConflictError(
            f"sink {progress.sink_id}: the table's frontier {encode_json(progress.frontier)} was written for source "
            f"{encode_json(progress.source)}, not this sync's source {encode_json(source)} (do two syncs share a "
            "sinkId?); refusing to resume from it"
        )


def other_sink_on_top(metadata: TableMetadata, sink_id: str) -> str | None:
    """The sink id of another sink that committed on main after ``sink_id``'s last commit (or at all,
    when ``sink_id`` never did): the table's current writer is then someone else. None otherwise."""
    for snapshot in main_ancestry(metadata):
        writer = (snapshot.summary.additional_properties if snapshot.summary else {}).get(SINK_ID)
        if writer:
            return None if writer == sink_id else writer
    return None


def rolled_back_past(metadata: TableMetadata, sink_id: str, last: Snapshot) -> bool:
    """Whether main no longer holds a sink's last snapshot ``last`` (main was rolled back past it).

    The snapshot still exists off main; or it is gone and either main's history reaches an older
    commit of the sink (expiry alone cuts the history at the expired snapshot, so none is
    reachable) or the snapshot is newer than main's history. Check the fence first: a newer
    writer's commits above the snapshot are no rollback.
    """
    if metadata.snapshot_by_id(last.snapshot_id) is not None:
        return not is_on_main(metadata, last.snapshot_id)
    if any((s.summary.additional_properties if s.summary else {}).get(SINK_ID) == sink_id
           for s in main_ancestry(metadata)):
        return True
    return not was_on_main(metadata, last.snapshot_id, last.sequence_number or 0, last.timestamp_ms)


def steady_fence_owner(metadata: TableMetadata, me: Writer, my_last_snapshot_id: int) -> Writer | None:
    """Before a data commit: the writer that has claimed the sink since ``me`` last committed, if any.

    A higher version outranks ``me`` wherever it shows: in the checkpoint property or on main. Another
    attempt of ``me``'s version outranks it only when it claimed the sink *later*: the checkpoint
    names it (every commit of the sink rewrites the checkpoint, so it names the sink's last writer), or
    one of its snapshots lies above ``my_last_snapshot_id`` on main. When main no longer reaches that
    snapshot (a rollback, or expiry cut the history) and the checkpoint names ``me``, the commits of
    other attempts of the version that main holds are older than ``me``'s claim: they do not count
    (the caller then tells a rollback from expiry). Without a checkpoint they count, to be safe.
    Raises ``DamagedRecordError`` when the checkpoint, or a snapshot of this sink above it, is damaged.
    """
    checkpoint = parse_checkpoint(metadata, me.sink_id)
    if checkpoint is not None and checkpoint.writer != me and checkpoint.writer.version >= me.version:
        return checkpoint.writer
    same_version_above: Writer | None = None
    for snapshot in main_ancestry(metadata):
        if snapshot.snapshot_id == my_last_snapshot_id:
            return same_version_above
        summary = snapshot.summary.additional_properties if snapshot.summary else {}
        if summary.get(SINK_ID) != me.sink_id:
            continue
        commit = parse_commit(snapshot)
        assert commit is not None
        if commit.writer.version > me.version:
            return commit.writer
        if commit.writer.version == me.version and commit.writer.attempt != me.attempt and same_version_above is None:
            same_version_above = commit.writer
    return same_version_above if checkpoint is None else None
