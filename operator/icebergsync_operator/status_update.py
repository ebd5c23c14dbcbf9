"""How the operator builds a resource's next status: the stored one, kstatus conditions, the table's view.

Condition polarity follows kstatus: ``Ready`` is the normal-true condition; ``Reconciling`` and
``Stalled`` are abnormal-true. All three are always present, each with a CamelCase reason.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from pydantic import ValidationError

from icebergsync.errors import TableInUseError
from icebergsync.launch_check import TableState, highest_version, table_in_use
from icebergsync.metrics.lag import lag_text
from icebergsync.protocol import encode_json
from icebergsync.resource_status import LastCommit, SyncCondition, SyncStatus
from icebergsync.sink_state import SinkState
from icebergsync.source_settings.checks import settings_verdict
from icebergsync.tables.cuts import CutSupport
from icebergsync.tables.status import Lanes, cut_text, tables_status, total_backlog

log = logging.getLogger(__name__)

TRUE = "True"
FALSE = "False"


@dataclass(frozen=True)
class TableObservation:
    """What reading the table gave: the sink's state, or why it could not be read."""

    sink: SinkState | None = None  #: None when the table does not exist yet or could not be read
    error: str | None = None  #: set when the catalog or table could not be read
    timed_out: bool = False  #: the read ran out of time (it is retried after a backoff)
    too_large: bool = False  #: an answer was over the size cap or the memory budget (retried after a backoff)
    lanes: Lanes | None = None  #: a sync of many tables: its tables (``sink`` is then the newest commit's table)

    @property
    def state(self) -> TableState | None:
        """What was read: the tables of a template, else the one table's sink state."""
        return self.lanes if self.lanes is not None else self.sink

    @property
    def backs_off(self) -> bool:
        """Whether the read is tried again only after a backoff: a timeout, an answer too large."""
        return self.timed_out or self.too_large

    @property
    def highest_version(self) -> int | None:
        """The highest sink version the table (every table, for many) has seen."""
        return highest_version(self.state)

    @property
    def in_use(self) -> TableInUseError | None:
        """The refusal due when another sink wrote a table of the sink last (``icebergsync.launch_check``)."""
        return table_in_use(self.state)


@dataclass(frozen=True)
class Verdict:
    """One condition's value before it gets its timestamps."""

    status: str
    reason: str
    message: str = ""


@dataclass(frozen=True)
class Assessment:
    """The phase and the three conditions of one reconcile."""

    phase: str
    ready: Verdict
    reconciling: Verdict
    stalled: Verdict


def format_time(moment: datetime) -> str:
    """RFC 3339 in UTC with second precision, as Kubernetes writes times."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(text: str | None) -> datetime | None:
    return datetime.fromisoformat(text.replace("Z", "+00:00")) if text else None


def parse_status(raw: Mapping[str, Any] | None) -> SyncStatus:
    """The stored status; fields this operator does not own are ignored, a corrupt one starts over."""
    known = {field.alias for field in SyncStatus.model_fields.values()}
    try:
        return SyncStatus.model_validate({key: value for key, value in (raw or {}).items() if key in known})
    except ValidationError as error:
        log.warning("ignoring unreadable status: %s", error)
        return SyncStatus()


def condition(status: SyncStatus, kind: str) -> SyncCondition | None:
    return next((item for item in status.conditions if item.type == kind), None)


def conditions(previous: SyncStatus, assessment: Assessment, generation: int, now: datetime,
               cuts: CutSupport | None = None, settings: Verdict | None = None) -> list[SyncCondition]:
    """The new conditions (``AtomicCuts`` too for a sync of many tables, whose ``cuts`` are given; ``SourceSettings``
    for a sync of Debezium events, whose ``settings`` are given); lastTransitionTime only moves when a condition's
    status changes."""
    verdicts = [("Ready", assessment.ready), ("Reconciling", assessment.reconciling), ("Stalled", assessment.stalled)]
    if cuts is not None:
        verdicts.append(("AtomicCuts", Verdict(TRUE if cuts.atomic else FALSE, cuts.reason, cuts.message)))
    if settings is not None:
        verdicts.append(("SourceSettings", settings))
    result = []
    for kind, verdict in verdicts:
        before = condition(previous, kind)
        moved = before is None or before.status != verdict.status
        result.append(SyncCondition(
            type=kind,  # type: ignore[arg-type]
            status=verdict.status,  # type: ignore[arg-type]
            reason=verdict.reason,
            message=verdict.message,
            last_transition_time=format_time(now) if moved or before is None else before.last_transition_time,
            observed_generation=generation,
        ))
    return result


def source_settings(previous: SyncStatus, table: TableObservation) -> Verdict | None:
    """The ``SourceSettings`` condition: False (a warning) when the newest data commit of any of the sink's tables
    noted events that show a documented Debezium setting not in use (icebergsync.source_settings); the previous
    one while the table cannot be read or does not exist yet (None before there is any)."""
    states = table.lanes.states if table.lanes is not None else (table.sink,) if table.sink is not None else ()
    if table.error is not None or not states:
        before = condition(previous, "SourceSettings")
        return Verdict(before.status, before.reason, before.message) if before is not None else None
    verdict = settings_verdict((state.table, state.source_notes) for state in states)
    return Verdict(TRUE if verdict.ok else FALSE, verdict.reason, verdict.message)


def last_commit(sink: SinkState) -> LastCommit | None:
    """The sink's newest snapshot in status form (frontier as canonical JSON)."""
    if sink.snapshot_id is None or sink.committed_at is None:
        return None
    return LastCommit(
        snapshot_id=sink.snapshot_id,
        committed_at=sink.committed_at,
        frontier=encode_json(sink.frontier) if sink.frontier is not None else None,
        records_added=sink.records_added,
        sink_version=sink.written_by_version,
    )


def with_table(status: SyncStatus, table: TableObservation) -> SyncStatus:
    """Copy what the table says into the status; keep the last known values when it could not be read."""
    if table.error is None and table.lanes is not None:
        return with_tables(status, table.lanes)
    if table.error is not None or table.sink is None:
        return status
    sink = table.sink
    return status.model_copy(update={
        "last_commit": last_commit(sink),
        "seconds_since_last_commit": sink.seconds_since_commit,
        "lag": lag_text(sink.source_lag),
    })


def with_tables(status: SyncStatus, lanes: Lanes) -> SyncStatus:
    """A sync of many tables: the aggregate; lastCommit is the newest commit of any table (frontier cut), lag
    the sum of the tables' backlogs."""
    newest = lanes.newest
    commit = last_commit(newest) if newest is not None else None
    if commit is not None and commit.frontier is not None:
        commit = commit.model_copy(update={"frontier": cut_text(commit.frontier)})
    return status.model_copy(update={
        "tables": tables_status(lanes),
        "last_commit": commit,
        "seconds_since_last_commit": newest.seconds_since_commit if newest is not None else None,
        "lag": lag_text(total_backlog(lanes.states)),
    })
