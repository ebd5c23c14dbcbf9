"""What decoding Debezium's change events tells of the documented Debezium settings.

The events are shaped as Debezium 3.6.1's PostgreSQL connector writes them through Kafka's JsonConverter (the
``source`` block, the ``transaction`` block of ``provide.transaction.metadata=true``, the ``{"schema", "payload"}``
form of ``schemas.enable=true``, tombstones, the TOAST placeholder); each setting turned off changes them as
Debezium does, and only that setting's sign is counted (spark_app/decoding/settings_seen.py)."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import pytest

from icebergsync.source_settings.checks import (
    CHANGES_WITHOUT_BEFORE,
    EVENTS_WITHOUT_TRANSACTION,
    MOVES_WITHOUT_TRANSACTIONS,
    RECORDS_WITHOUT_SCHEMA,
    settings_verdict,
)
from icebergsync.spec import Column
from spark_app.decoding.changes import UNAVAILABLE, decode_changes
from spark_app.decoding.settings_seen import SettingsSeen

COLUMNS = [Column(name="id", type="long", required=True), Column(name="notes", type="string")]
ROW_SCHEMA = {"type": "struct", "optional": True, "name": "dbserver1.public.customers.Value", "fields": [
    {"type": "int64", "optional": False, "field": "id"}, {"type": "string", "optional": True, "field": "notes"}]}
ENVELOPE_SCHEMA = {"type": "struct", "optional": False, "name": "dbserver1.public.customers.Envelope", "fields": [
    {**ROW_SCHEMA, "field": "before"}, {**ROW_SCHEMA, "field": "after"},
    {"type": "struct", "optional": False, "name": "io.debezium.connector.postgresql.Source", "field": "source",
     "fields": [{"type": "string", "optional": False, "field": "connector"}]},
    {"type": "struct", "optional": True, "name": "event.block", "field": "transaction", "fields": [
        {"type": "string", "optional": False, "field": "id"}]},
    {"type": "string", "optional": False, "field": "op"}, {"type": "int64", "optional": True, "field": "ts_ms"}]}


def event(op: str, before: dict[str, Any] | None, after: dict[str, Any] | None, lsn: int, *,
          schemas: bool = True, transactions: bool = True, debezium: bool = True) -> bytes:
    """A change event as Debezium writes it (``schemas``: value.converter.schemas.enable; ``transactions``:
    provide.transaction.metadata; ``debezium``: False for a hand-written record without Debezium's source)."""
    snapshot = op == "r"
    source = {"version": "3.6.1.Final", "connector": "postgresql", "name": "dbserver1", "ts_ms": 1764000000000,
              "snapshot": "true" if snapshot else "false", "db": "shop", "schema": "public", "table": "customers",
              "txId": 770 + lsn, "lsn": 24023128 + lsn, "xmin": None}
    payload: dict[str, Any] = {"before": before, "after": after,
                               "source": source if debezium else {"lsn": 24023128 + lsn}, "op": op,
                               "ts_ms": 1764000000001, "transaction": None}
    if transactions and not snapshot:
        payload["transaction"] = {"id": f"{770 + lsn}:{24023128 + lsn}", "total_order": 1, "data_collection_order": 1}
    return json.dumps({"schema": ENVELOPE_SCHEMA, "payload": payload} if schemas else payload).encode()


def workload(**settings: bool) -> list[bytes | None]:
    """A snapshot read, an insert, an update, a delete with its tombstone, and a primary-key update of a row whose
    TOASTed notes it leaves unchanged (a delete of the old key, its tombstone, a create with the placeholder)."""
    return [
        event("r", None, {"id": 1, "notes": "seed"}, 0, **settings),
        event("c", None, {"id": 2, "notes": "new"}, 1, **settings),
        event("u", None, {"id": 2, "notes": "changed"}, 2, **settings),
        event("d", {"id": 2, "notes": None}, None, 3, **settings), None,
        event("d", {"id": 1, "notes": None}, None, 4, **settings), None,
        event("c", None, {"id": 5, "notes": UNAVAILABLE}, 4, **settings),
    ]


def seen(records: list[bytes | None], *, follows_schema: bool = True, keeps_transactions: bool = True,
         key: tuple[str, ...] = ("id",)) -> Counter[str]:
    counts: Counter[str] = Counter()
    decode_changes(records, None, lambda i: {"offset": i}, COLUMNS, list(key), "debezium", 0,
                   settings=SettingsSeen(follows_schema, keeps_transactions, lambda name: counts.update([name])))
    return counts


def test_the_examples_settings_show_nothing_missing() -> None:
    assert seen(workload()) == Counter()
    assert settings_verdict([("shop.customers", dict(seen(workload())))]).ok


def test_records_without_their_schema_are_counted_while_the_table_follows_it() -> None:
    """value.converter.schemas.enable=false: every event (snapshot reads too) is the bare envelope."""
    assert seen(workload(schemas=False)) == Counter({RECORDS_WITHOUT_SCHEMA: 6})
    assert seen(workload(schemas=False), follows_schema=False) == Counter()  # spec.schemaEvolution none


def test_streamed_events_without_a_transaction_block_are_counted_while_transactions_are_kept() -> None:
    """provide.transaction.metadata=false with spec.changes.transactions: the streamed events (not the snapshot's)."""
    assert seen(workload(transactions=False)) == Counter({EVENTS_WITHOUT_TRANSACTION: 5})


def test_key_moves_carrying_unsent_values_are_counted_while_triggers_may_split_transactions() -> None:
    """Without spec.changes.transactions the create of a moved key with Debezium's placeholder may be committed
    apart from the delete of its old key; an update of a TOASTed row without a move is no sign."""
    assert seen(workload(), keeps_transactions=False) == Counter({MOVES_WITHOUT_TRANSACTIONS: 1})
    update = event("u", None, {"id": 7, "notes": UNAVAILABLE}, 9)
    assert seen([update], keeps_transactions=False) == Counter()


def test_changes_without_their_old_row_are_counted() -> None:
    """REPLICA IDENTITY NOTHING: a delete without before; a table without a primary key (key []) not FULL: an
    update without before, a delete whose before lacks a TOASTed value."""
    keyed = seen([event("d", None, None, 0)])
    keyless = seen([event("u", None, {"id": 1, "notes": "x"}, 1), event("d", {"id": 1, "notes": UNAVAILABLE}, None, 2)],
                   key=())
    assert keyed == Counter({CHANGES_WITHOUT_BEFORE: 1}) and keyless == Counter({CHANGES_WITHOUT_BEFORE: 2})


@pytest.mark.parametrize("settings", [{"schemas": False}, {"transactions": False}], ids=["schemaless", "no-metadata"])
def test_records_debezium_did_not_write_owe_nothing_to_its_settings(settings: dict[str, bool]) -> None:
    """Hand-written change records (no ``source.connector``): no sign is counted, whatever they lack."""
    records = [*workload(debezium=False, **settings), event("d", None, None, 9, debezium=False)]
    assert seen(records, keeps_transactions=False) == Counter()


def test_the_verdict_names_each_missing_setting_and_its_fix() -> None:
    verdict = settings_verdict([("shop.a", {RECORDS_WITHOUT_SCHEMA: 2}), ("shop.b", None),
                                ("shop.c", {CHANGES_WITHOUT_BEFORE: 1, "lost-records": 4})])
    assert (verdict.ok, verdict.reason) == (False, "RecordsWithoutSchema")
    assert "shop.a: " in verdict.message and "value.converter.schemas.enable=true" in verdict.message
    assert "shop.c: " in verdict.message and "REPLICA IDENTITY FULL" in verdict.message
