"""Which documented Debezium settings a sync can tell are not in use, and how the status says so.

The job counts what its change events show (``spark_app/decoding/settings_seen.py``) into the data commit's
``icebergsync.source-notes``, one count per :data:`CHECKS` entry's ``note``. The newest data commit of the sink
is what ``icebergsync status`` and the operator's ``SourceSettings`` condition report: a later commit whose
events no longer show the problem clears it. Settings no event can reveal (``skipped.operations``,
``replace.null.with.default``, ``bigint.unsigned.handling.mode``) are not checked: docs/connectors.md says so.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from pyiceberg.table.metadata import TableMetadata

from icebergsync import protocol

RECORDS_WITHOUT_SCHEMA = "records-without-schema"
EVENTS_WITHOUT_TRANSACTION = "events-without-transaction"
MOVES_WITHOUT_TRANSACTIONS = "moves-without-transactions"
CHANGES_WITHOUT_BEFORE = "changes-without-before"


@dataclass(frozen=True)
class SettingCheck:
    """One documented setting the events can show missing: its source note, condition reason and fix."""

    note: str
    reason: str
    problem: str
    fix: str


CHECKS = (
    SettingCheck(RECORDS_WITHOUT_SCHEMA, "RecordsWithoutSchema",
                 "Debezium's change events arrive without their Kafka Connect schema while the table follows the "
                 "source's schema (spec.schemaEvolution: evolve): new source columns become dead letters",
                 "set value.converter.schemas.enable=true (and key.converter.schemas.enable=true) on the connector"),
    SettingCheck(EVENTS_WITHOUT_TRANSACTION, "NoTransactionMetadata",
                 "Debezium's streamed change events carry no transaction block while spec.changes.transactions is "
                 "set: triggers cannot keep source transactions whole",
                 "set provide.transaction.metadata=true on the connector"),
    SettingCheck(MOVES_WITHOUT_TRANSACTIONS, "KeyMovesWithoutTransactions",
                 "primary-key updates without a value Debezium did not send (TOAST) arrive while a trigger may split "
                 "a source transaction: a move whose halves land in two triggers is a dead letter",
                 "set provide.transaction.metadata=true on the connector and spec.changes.transactions in the sync "
                 "(or REPLICA IDENTITY FULL on the table)"),
    SettingCheck(CHANGES_WITHOUT_BEFORE, "IncompleteBeforeImage",
                 "updates or deletes arrive without the old row they must name (before): they are dead letters",
                 "set REPLICA IDENTITY FULL on a PostgreSQL table without a primary key (DEFAULT or FULL on one with "
                 "a primary key); binlog_row_image=FULL on MySQL/MariaDB"),
)


@dataclass(frozen=True)
class Finding:
    """A check whose note the newest data commit of a table holds: how many events showed it, and where."""

    check: SettingCheck
    events: int
    table: str

    def text(self) -> str:
        return f"{self.table}: {self.check.problem} ({self.events} events); {self.check.fix}"


def findings(table: str, notes: Mapping[str, Any] | None) -> list[Finding]:
    """The checks a data commit's source notes show failed, in :data:`CHECKS` order."""
    notes = notes or {}
    return [Finding(check, int(notes[check.note]), table) for check in CHECKS
            if isinstance(notes.get(check.note), int) and notes[check.note] > 0]


def newest_data_notes(metadata: TableMetadata, sink_id: str) -> dict[str, Any] | None:
    """The source notes of the sink's newest data commit on main (None: no data commit, or no notes)."""
    for snapshot in protocol.main_ancestry(metadata):
        summary = snapshot.summary.additional_properties if snapshot.summary else {}
        if summary.get(protocol.SINK_ID) == sink_id and summary.get(protocol.KIND) == protocol.KIND_DATA:
            notes = summary.get(protocol.SOURCE_NOTES)
            return json.loads(notes) if notes else None
    return None


@dataclass(frozen=True)
class SettingsVerdict:
    """What the newest data commits say of the documented settings: ``ok``, a CamelCase reason and a message."""

    ok: bool
    reason: str
    message: str


def settings_verdict(tables: Iterable[tuple[str, Mapping[str, Any] | None]]) -> SettingsVerdict:
    """Of (table, source notes of its newest data commit) pairs: not ok with the first finding's reason and every
    finding's problem and fix; ok when there are none."""
    found = [finding for table, notes in tables for finding in findings(table, notes)]
    if not found:
        return SettingsVerdict(True, "AsDocumented",
                               "the newest data commits show no documented Debezium setting missing")
    return SettingsVerdict(False, found[0].check.reason, "; ".join(finding.text() for finding in found))
