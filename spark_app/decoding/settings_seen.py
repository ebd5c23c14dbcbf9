"""Counting, while change events are decoded, the signs that a documented Debezium setting is not in use.

Only events Debezium wrote count (their ``source`` block names the ``connector``): hand-written change records
owe nothing to Debezium's settings. Each sign is one count under its ``icebergsync.source-notes`` name
(icebergsync.source_settings.checks): events without their Connect schema while the table follows it, streamed
events without a ``transaction`` block while ``spec.changes.transactions`` is set, primary-key updates that carry
values Debezium did not send while triggers may split transactions, and updates or deletes without the old row.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from icebergsync.source_settings.checks import (
    CHANGES_WITHOUT_BEFORE,
    EVENTS_WITHOUT_TRANSACTION,
    MOVES_WITHOUT_TRANSACTIONS,
    RECORDS_WITHOUT_SCHEMA,
)

STREAMED_OPS = ("c", "u", "d")  # a snapshot read (r) and a truncate (t) belong to no transaction of changes


def written_by_debezium(envelope: dict[str, Any]) -> bool:
    """Whether a change event's ``source`` block names the Debezium connector that wrote it."""
    source = envelope.get("source")
    return isinstance(source, dict) and isinstance(source.get("connector"), str)


@dataclass(frozen=True)
class SettingsSeen:
    """Counts (through ``count``) the signs of missing settings in the events of a sync that ``follows_schema``
    (spec.schemaEvolution evolve) and ``keeps_transactions`` (spec.changes.transactions)."""

    follows_schema: bool
    keeps_transactions: bool
    count: Callable[[str], None]

    def event(self, envelope: dict[str, Any], schema: Any, op: str) -> None:
        """A Debezium change event (``schema``: its Connect schema, None when the record had none)."""
        if not written_by_debezium(envelope):
            return
        if schema is None and self.follows_schema:
            self.count(RECORDS_WITHOUT_SCHEMA)
        if self.keeps_transactions and op in STREAMED_OPS and not isinstance(envelope.get("transaction"), dict):
            self.count(EVENTS_WITHOUT_TRANSACTION)

    def moved(self, envelope: dict[str, Any]) -> None:
        """A primary-key update's half that carries values Debezium did not send from the old key."""
        if written_by_debezium(envelope) and not self.keeps_transactions:
            self.count(MOVES_WITHOUT_TRANSACTIONS)

    def without_before(self, envelope: dict[str, Any]) -> None:
        """An update or delete that lacks the old row it must name (``before`` missing or incomplete)."""
        if written_by_debezium(envelope):
            self.count(CHANGES_WITHOUT_BEFORE)


NOTHING_SEEN = SettingsSeen(follows_schema=False, keeps_transactions=True, count=lambda name: None)
"""Counts nothing: a decoder whose caller does not ask."""
