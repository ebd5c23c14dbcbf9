"""Nested columns (struct, map, arrays of them) through the job, as a user declares them: JSON records appended from
files and from Kafka through a kill -9, bad nested values as dead letters naming their path, the table read back
by Apache Iceberg's Spark runtime and by pyiceberg equal to what was produced."""

from __future__ import annotations

import base64
import json
from datetime import UTC, date, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

from pyiceberg.table import Table
from pyspark.sql import SparkSession

from spark_app.job.loop import SyncJob
from tests.infra.services import KafkaBroker
from tests.integration.kafka_support import frontier_reached, kafka_source, new_topic
from tests.integration.sync_support import (
    BackgroundJob,
    catalog_of,
    kill_after_first_commit,
    make_sync,
    run_job_process,
    sink_commits,
    sync_document,
    write_spec,
)

SCHEMA = [
    {"name": "id", "type": "long", "required": True},
    {"name": "user", "type": "struct<id: long not null, name: string, `user-agent`: string>"},
    {"name": "items", "type": "array<struct<sku: string not null, qty: int, price: decimal(9,2)>>"},
    {"name": "attrs", "type": "map<string, long>"},
    {"name": "event", "type": "struct<ts: timestamptz, day: date, tags: array<string>, "
                              "where: struct<lat: double, lon: double>>"},
    {"name": "matrix", "type": "array<array<int>>"},
    {"name": "extra", "type": "string", "jsonText": True},  # any JSON value kept as its text
]
COLUMNS = [column["name"] for column in SCHEMA]


def record(n: int) -> dict[str, Any]:
    """A nested record; every seventh has null or empty nested values."""
    if n % 7 == 0:
        return {"id": n, "user": None, "items": [], "attrs": {}, "event": {"ts": None, "tags": None}, "matrix": None,
                "extra": None}
    return {
        "id": n,
        "user": {"id": n * 10, "name": f"u{n}", "user-agent": "curl/8" if n % 2 else None},
        "items": [{"sku": f"s{n}-{i}", "qty": i, "price": f"{n}.{i:02d}"} for i in range(n % 4)],
        "attrs": {f"k{i}": n * i for i in range(n % 3)},
        "event": {"ts": f"2024-03-01T10:{n % 60:02d}:00+02:00", "day": "2024-02-29", "tags": ["a", None],
                  "where": {"lat": 52.5, "lon": 13.4}},
        "matrix": [[n, None], [], None],
        "extra": {"k": [n, 1.50], "s": "x"} if n % 2 else f"plain {n}",
    }


def expected_row(n: int) -> dict[str, Any]:
    """``record(n)`` as a reader gives it back: every declared struct field present, absent ones null."""
    raw = record(n)
    if n % 7 == 0:
        return {"id": n, "user": None, "items": [], "attrs": {},
                "event": {"ts": None, "day": None, "tags": None, "where": None}, "matrix": None, "extra": None}
    return {
        "id": n,
        "user": raw["user"],
        "items": [{"sku": item["sku"], "qty": item["qty"], "price": Decimal(item["price"])} for item in raw["items"]],
        "attrs": raw["attrs"],
        "event": {"ts": datetime(2024, 3, 1, 8, n % 60, tzinfo=UTC), "day": date(2024, 2, 29), "tags": ["a", None],
                  "where": {"lat": 52.5, "lon": 13.4}},
        "matrix": [[n, None], [], None],
        "extra": f'{{"k":[{n},1.5],"s":"x"}}' if n % 2 else f"plain {n}",
    }


BAD = {
    '{"id": 900, "items": [{"sku": "a"}, {"sku": 5}]}': "field items[1].sku: ",
    '{"id": 901, "user": {"id": 1, "nick": "x"}}': "field user: unknown field(s) not in its struct: nick",
    '{"id": 902, "user": {"name": "no id"}}': "required field user.id is missing or null",
    '{"id": 903, "attrs": {"k": "not a long"}}': 'field attrs["k"]: ',
    '{"id": 904, "event": {"where": {"lat": "north"}}}': "field event.where.lat: ",
    '{"id": 905, "items": {"sku": "not an array"}}': "field items: ",
    '{"id": 906, "matrix": [[1], ["x"]]}': "field matrix[1]: value x is not a int (an element of array<int>)",
    '{"id": 907, "items": [{"sku": "a", "price": 1.234}]}': "field items[0].price: value 1.234 does not fit decimal(9,2) "
                                                            "without rounding",
}


def _spark_rows(spark: SparkSession, table: Table) -> dict[int, dict[str, Any]]:
    frame = spark.read.format("iceberg").load(table.metadata_location)
    rows = {}
    for row in frame.select(*COLUMNS).collect():
        value = row.asDict(recursive=True)
        if value["event"] is not None and value["event"]["ts"] is not None:
            value["event"]["ts"] = value["event"]["ts"].astimezone(UTC)
        rows[value["id"]] = value
    return rows


def _pyiceberg_rows(table: Table) -> dict[int, dict[str, Any]]:
    rows = {}
    for row in table.scan(selected_fields=tuple(COLUMNS)).to_arrow().to_pylist():
        if row["attrs"] is not None:
            row["attrs"] = dict(row["attrs"])
        rows[row["id"]] = row
    return rows


def _reasons(table: Table) -> list[str]:
    return sorted(table.catalog.load_table("sales.orders_dlq").scan().to_arrow().column("reason").to_pylist())


def _assert_dead_letters(table: Table) -> None:
    reasons = _reasons(table)
    assert len(reasons) == len(BAD), reasons
    for prefix in BAD.values():
        assert any(reason.startswith(prefix) for reason in reasons), (prefix, reasons)


def test_nested_json_files_are_appended_and_bad_nested_values_name_their_path(tmp_path: Path,
                                                                                spark: SparkSession) -> None:
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    lines = [json.dumps(record(n)) for n in range(1, 200)]
    (inbox / "0000.json").write_text("\n".join(lines[:100] + list(BAD)) + "\n")
    (inbox / "0001.json").write_text("\n".join(lines[100:]) + "\n")
    sync = make_sync(tmp_path, {"files": {"path": str(inbox), "maxFilesPerTrigger": 1}}, schema=SCHEMA,
                     deadLetter={"table": "sales.orders_dlq"}, table={"partitionBy": ["day(event.ts)"]})
    catalog = catalog_of(sync)

    def reached() -> bool:
        commits = sink_commits(catalog.load_table("sales.orders"), "test/orders")
        return bool(commits) and commits[-1].frontier == {"after": "0001.json"}

    with BackgroundJob(SyncJob(sync, 1, spark)) as running:
        running.wait_until(reached, "the last file committed", timeout=300)
    table = catalog.load_table("sales.orders")
    expected = {n: expected_row(n) for n in range(1, 200)}
    assert _pyiceberg_rows(table) == expected
    assert _spark_rows(spark, table) == expected
    _assert_dead_letters(table)


def test_a_nested_kafka_topic_syncs_exactly_once_through_a_kill(tmp_path: Path, spark: SparkSession,
                                                                 kafka_broker: KafkaBroker) -> None:
    kafka = kafka_broker
    topic = new_topic(kafka, partitions=2)
    kafka.produce(topic, [(str(n), json.dumps(record(n)), None) for n in range(1, 301)]
                  + [("bad", text, None) for text in BAD])
    document = sync_document(tmp_path, kafka_source(kafka, topic, maxRecordsPerTrigger=60), schema=SCHEMA,
                             deadLetter={"table": "sales.orders_dlq"})
    spec_path = write_spec(tmp_path, document)
    sync = make_sync(tmp_path, kafka_source(kafka, topic), schema=SCHEMA)
    catalog = catalog_of(sync)

    def committed() -> bool:
        return any(c.kind == "data" for c in sink_commits(catalog.load_table("sales.orders"), "test/orders"))

    kill_after_first_commit(spec_path, committed)
    kafka.produce(topic, [(str(n), json.dumps(record(n)), None) for n in range(301, 400)])
    ends = kafka.end_offsets(topic)

    caught_up = frontier_reached(catalog, topic, ends)

    status, output = run_job_process(spec_path, 2, stop_when=caught_up, timeout=300)
    assert status == 0, output[-3000:]
    table = catalog.load_table("sales.orders")
    expected = {n: expected_row(n) for n in range(1, 400)}
    assert _spark_rows(spark, table) == expected
    assert _pyiceberg_rows(table) == expected
    _assert_dead_letters(table)


def _decimal(unscaled: int) -> str:
    return base64.b64encode(unscaled.to_bytes(4, "big", signed=True)).decode()


def _row_schema(item_fields: list[dict[str, Any]]) -> dict[str, Any]:
    """A Debezium row with a struct column (holding a Connect Decimal and a Date) and a map column."""
    return {"type": "struct", "optional": True, "fields": [
        {"field": "id", "type": "int64", "optional": False},
        {"field": "item", "type": "struct", "optional": True, "fields": item_fields},
        {"field": "attrs", "type": "map", "optional": True, "keys": {"type": "string", "optional": False},
         "values": {"type": "int32", "optional": True}},
    ]}


_ITEM = [{"field": "qty", "type": "int32", "optional": True},
         {"field": "price", "type": "bytes", "optional": True, "name": "org.apache.kafka.connect.data.Decimal",
          "parameters": {"scale": "2", "connect.decimal.precision": "9"}},
         {"field": "at", "type": "int32", "optional": True, "name": "io.debezium.time.Date"}]
_ITEM_LATER = [{**_ITEM[0], "type": "int64"}, *_ITEM[1:], {"field": "note", "type": "string", "optional": True}]


def _debezium(row_schema: dict[str, Any], op: str, before: dict[str, Any] | None, after: dict[str, Any] | None) -> str:
    schema = {"type": "struct", "name": "pg.public.orders.Envelope", "fields": [
        {**row_schema, "field": "before"}, {**row_schema, "field": "after"},
        {"field": "op", "type": "string", "optional": False}]}
    return json.dumps({"schema": schema, "payload": {"op": op, "before": before, "after": after}})


def test_debezium_structs_and_maps_create_evolve_and_update_a_keyed_table(tmp_path: Path, spark: SparkSession) -> None:
    """Without spec.schema the table's nested columns come from the Connect schema; a later schema widens a struct's
    field and adds one (changes of ``item.qty`` and ``item.note``, the struct's other fields kept); Connect logical
    types inside the struct (Decimal, Date) are read as at the top level."""
    first, later = _row_schema(_ITEM), _row_schema(_ITEM_LATER)
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    one = {"id": 1, "item": {"qty": 2, "price": _decimal(1999), "at": 19782}, "attrs": {"a": 1}}
    two = {"id": 2, "item": None, "attrs": None}
    (inbox / "0000.json").write_text("\n".join([_debezium(first, "c", None, one), _debezium(first, "c", None, two)]) + "\n")
    updated = {"id": 1, "item": {"qty": 2**40, "price": _decimal(5), "at": None, "note": "big"}, "attrs": {}}
    (inbox / "0001.json").write_text("\n".join([_debezium(later, "u", one, updated),
                                                _debezium(later, "d", {"id": 2}, None)]) + "\n")
    sync = make_sync(tmp_path, {"files": {"path": str(inbox), "maxFilesPerTrigger": 1}},
                     table={"key": ["id"]}, changes={"format": "debezium"})
    catalog = catalog_of(sync)

    def reached() -> bool:
        commits = sink_commits(catalog.load_table("sales.orders"), "test/orders")
        return bool(commits) and commits[-1].frontier == {"after": "0001.json"}

    with BackgroundJob(SyncJob(sync, 1, spark)) as running:
        running.wait_until(reached, "the last file committed", timeout=300)
    table = catalog.load_table("sales.orders")
    item = table.schema().find_field("item").field_type
    assert [(f.name, str(f.field_type)) for f in item.fields] == [
        ("qty", "long"), ("price", "decimal(9, 2)"), ("at", "date"), ("note", "string")]
    frame = spark.read.format("iceberg").load(table.metadata_location)
    assert [row.asDict(recursive=True) for row in frame.collect()] == [
        {"id": 1, "item": {"qty": 2**40, "price": Decimal("0.05"), "at": None, "note": "big"}, "attrs": {}}]
