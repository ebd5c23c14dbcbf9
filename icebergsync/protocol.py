"""The snapshot-property protocol: how a sink records progress and ownership in the table itself.

Every snapshot a sink commits carries ``icebergsync.*`` summary properties (who wrote it and the
source frontier it covers). The same commit also sets one table property per sink, the
*checkpoint*, which survives snapshot expiry. See docs/protocol.md for the full algorithm.

Everything here is pure: it reads table metadata and decides; it never writes.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

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
CHECKPOINT_PREFIX = "icebergsync.checkpoint."

KIND_FENCE = "fence"
KIND_DATA = "data"

Frontier = dict[str, Any]


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

    def supersedes(self, other: Writer) -> bool:
        """True when this writer's claim outranks ``other``'s (higher version, or same version, newer attempt)."""
        return self.version > other.version or (self.version == other.version and self.attempt != other.attempt)


@dataclass(frozen=True)
class SinkCommit:
    """What one snapshot written by a sink says about itself."""

    snapshot_id: int
    timestamp_ms: int
    writer: Writer
    kind: str
    frontier: Frontier | None
    records: int = 0
    dead_letters: int = 0
    dead_letter_files: tuple[str, ...] = ()
    max_event_time: str | None = None
    source_lag: dict[str, Any] | None = None


@dataclass(frozen=True)
class Checkpoint:
    """The expiry-proof table property a sink sets with every commit."""

    writer: Writer
    frontier: Frontier | None
    snapshot_id: int
    extra: dict[str, Any] = field(default_factory=dict)


def snapshot_properties(
    writer: Writer,
    kind: str,
    frontier: Frontier | None,
    *,
    records: int = 0,
    dead_letters: int = 0,
    dead_letter_files: list[str] | None = None,
    max_event_time: str | None = None,
    source_lag: Mapping[str, Any] | None = None,
    source_notes: Mapping[str, Any] | None = None,
) -> dict[str, str]:
    """The summary properties of a snapshot committed by ``writer``."""
    properties = {
        PROTOCOL: PROTOCOL_VERSION,
        SINK_ID: writer.sink_id,
        SINK_VERSION: str(writer.version),
        ATTEMPT: writer.attempt,
        KIND: kind,
        FRONTIER: encode_json(frontier),
        RECORDS: str(records),
        DEAD_LETTERS: str(dead_letters),
    }
    if dead_letter_files:
        properties[DEAD_LETTER_FILES] = encode_json(dead_letter_files)
    if max_event_time:
        properties[MAX_EVENT_TIME] = max_event_time
    if source_lag:
        properties[SOURCE_LAG] = encode_json(dict(source_lag))
    if source_notes:
        properties[SOURCE_NOTES] = encode_json(dict(source_notes))
    return properties


def checkpoint_value(
    writer: Writer, frontier: Frontier | None, snapshot_id: int, extra: Mapping[str, Any] | None = None
) -> str:
    """The value of the checkpoint table property for a commit (``extra`` adds writer-specific fields)."""
    return encode_json({
        **(extra or {}),
        "version": writer.version, "attempt": writer.attempt, "frontier": frontier, "snapshot-id": snapshot_id,
    })


def parse_commit(snapshot: Snapshot) -> SinkCommit | None:
    """The sink commit a snapshot records, or None when the snapshot was not written by a sink."""
    summary = snapshot.summary.additional_properties if snapshot.summary else {}
    if SINK_ID not in summary or SINK_VERSION not in summary:
        return None
    try:
        return SinkCommit(
            snapshot_id=snapshot.snapshot_id,
            timestamp_ms=snapshot.timestamp_ms,
            writer=Writer(summary[SINK_ID], int(summary[SINK_VERSION]), summary.get(ATTEMPT, "")),
            kind=summary.get(KIND, KIND_DATA),
            frontier=json.loads(summary[FRONTIER]) if FRONTIER in summary else None,
            records=int(summary.get(RECORDS, "0")),
            dead_letters=int(summary.get(DEAD_LETTERS, "0")),
            dead_letter_files=tuple(json.loads(summary[DEAD_LETTER_FILES])) if DEAD_LETTER_FILES in summary else (),
            max_event_time=summary.get(MAX_EVENT_TIME),
            source_lag=json.loads(summary[SOURCE_LAG]) if SOURCE_LAG in summary else None,
        )
    except (ValueError, TypeError):
        return None


def parse_checkpoint(metadata: TableMetadata, sink_id: str) -> Checkpoint | None:
    """The sink's checkpoint table property, if present and well formed."""
    raw = metadata.properties.get(checkpoint_key(sink_id))
    if raw is None:
        return None
    try:
        value = json.loads(raw)
        return Checkpoint(
            writer=Writer(sink_id, int(value["version"]), str(value.get("attempt", ""))),
            frontier=value.get("frontier"),
            snapshot_id=int(value.get("snapshot-id", -1)),
            extra={k: v for k, v in value.items() if k not in ("version", "attempt", "frontier", "snapshot-id")},
        )
    except (ValueError, TypeError, KeyError):
        return None


def main_ancestry(metadata: TableMetadata) -> Iterator[Snapshot]:
    """Snapshots of the main branch from the head back to the oldest one still present."""
    snapshot = metadata.current_snapshot()
    while snapshot is not None:
        yield snapshot
        if snapshot.parent_snapshot_id is None:
            return
        snapshot = metadata.snapshot_by_id(snapshot.parent_snapshot_id)


@dataclass(frozen=True)
class Progress:
    """What the table says about a sink: where to resume and who owns it."""

    sink_id: str
    last_commit: SinkCommit | None
    checkpoint: Checkpoint | None
    highest: Writer | None
    frontier: Frontier | None
    resumed_from: str  # "snapshot" | "checkpoint" | "none"
    foreign_snapshots_on_top: int = 0
    notes: list[str] = field(default_factory=list)


def read_progress(metadata: TableMetadata, sink_id: str) -> Progress:
    """Find where ``sink_id`` resumes and the highest writer that has claimed it.

    The frontier is that of the newest main-branch ancestor written by the sink; snapshots of other
    writers (compaction, manual appends) are skipped. When expiry removed every such snapshot, the
    checkpoint property supplies it. A checkpoint whose snapshot still exists but is no longer an
    ancestor of main (the table was rolled back past it) is not used for the frontier.
    """
    last_commit: SinkCommit | None = None
    highest: Writer | None = None
    foreign_on_top = 0
    for snapshot in main_ancestry(metadata):
        commit = parse_commit(snapshot)
        if commit is None or commit.writer.sink_id != sink_id:
            if last_commit is None:
                foreign_on_top += 1
            continue
        if last_commit is None:
            last_commit = commit
        if highest is None or commit.writer.version > highest.version:
            highest = commit.writer
    checkpoint = parse_checkpoint(metadata, sink_id)
    if checkpoint and (highest is None or checkpoint.writer.version > highest.version):
        highest = checkpoint.writer
    notes: list[str] = []
    if last_commit is not None:
        frontier, resumed_from = last_commit.frontier, "snapshot"
    elif checkpoint is not None and metadata.snapshot_by_id(checkpoint.snapshot_id) is None:
        frontier, resumed_from = checkpoint.frontier, "checkpoint"
    else:
        frontier, resumed_from = None, "none"
        if checkpoint is not None:
            notes.append(
                f"checkpoint snapshot {checkpoint.snapshot_id} is not an ancestor of main (rolled back?): "
                "starting from the source's initial position"
            )
    return Progress(sink_id, last_commit, checkpoint, highest, frontier, resumed_from, foreign_on_top, notes)


def startup_fence_owner(progress: Progress, me: Writer) -> Writer | None:
    """Before the fence commit: the writer that outranks ``me`` by a higher version, if any.

    ``progress`` is ``read_progress`` of the head being checked. A restart of the same version (same
    version, new attempt) takes over, so only higher versions count.
    """
    if progress.highest is not None and progress.highest.version > me.version:
        return progress.highest
    return None


def steady_fence_owner(metadata: TableMetadata, me: Writer, my_last_snapshot_id: int) -> Writer | None:
    """Before a data commit: the writer that has claimed the sink since ``me`` last committed, if any.

    Checks the checkpoint property and every main-branch snapshot above ``my_last_snapshot_id``.
    """
    checkpoint = parse_checkpoint(metadata, me.sink_id)
    if checkpoint is not None and checkpoint.writer.supersedes(me):
        return checkpoint.writer
    for snapshot in main_ancestry(metadata):
        if snapshot.snapshot_id == my_last_snapshot_id:
            return None
        commit = parse_commit(snapshot)
        if commit is not None and commit.writer.sink_id == me.sink_id and commit.writer.supersedes(me):
            return commit.writer
    return None
