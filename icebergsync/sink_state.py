"""A sink's state as the table records it: the `icebergsync status` command and the operator read it."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any

from pyiceberg.catalog import Catalog
from pyiceberg.table.metadata import TableMetadata

from icebergsync import protocol
from icebergsync.source_settings.checks import newest_data_notes


@dataclass(frozen=True)
class SinkState:
    """What the table says about one sink (all fields JSON-friendly)."""

    sink_id: str
    table: str
    sink_version: int | None
    snapshot_id: int | None
    committed_at: str | None
    seconds_since_commit: float | None
    kind: str | None
    frontier: protocol.Frontier | None
    records_added: int | None
    dead_letters_added: int | None
    written_by_version: int | None
    max_event_time: str | None
    source_lag: dict[str, Any] | None
    total_records: int | None
    resumed_from: str
    foreign_snapshots_on_top: int
    other_sink: str | None = None  #: another sink that committed after this one's last commit (it writes the table now)
    source_notes: dict[str, Any] | None = None  #: the ``icebergsync.source-notes`` of the sink's newest data commit

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def read_sink_state(catalog: Catalog, table_name: str, sink_id: str, now: float | None = None) -> SinkState:
    """Read the table's head and describe the newest commit of ``sink_id`` on main."""
    return sink_state(catalog.load_table(table_name).metadata, table_name, sink_id, now)


def sink_state(metadata: TableMetadata, table_name: str, sink_id: str, now: float | None = None) -> SinkState:
    """Describe the newest commit of ``sink_id`` on the main branch of a table's metadata."""
    progress = protocol.read_progress(metadata, sink_id)
    last = progress.last_commit
    head = metadata.current_snapshot()
    total = head.summary.additional_properties.get("total-records") if head and head.summary else None
    now = time.time() if now is None else now
    return SinkState(
        sink_id=sink_id,
        table=table_name,
        sink_version=progress.highest.version if progress.highest else None,
        snapshot_id=last.snapshot_id if last else None,
        committed_at=datetime.fromtimestamp(last.timestamp_ms / 1000, tz=UTC).isoformat() if last else None,
        seconds_since_commit=round(now - last.timestamp_ms / 1000, 3) if last else None,
        kind=last.kind if last else None,
        frontier=progress.frontier,
        records_added=last.records if last else None,
        dead_letters_added=last.dead_letters if last else None,
        written_by_version=last.writer.version if last else None,
        max_event_time=last.max_event_time if last else None,
        source_lag=last.source_lag if last else None,
        total_records=int(total) if total is not None else None,
        resumed_from=progress.resumed_from,
        foreign_snapshots_on_top=progress.foreign_snapshots_on_top,
        other_sink=protocol.other_sink_on_top(metadata, sink_id),
        source_notes=newest_data_notes(metadata, sink_id),
    )
