"""Array columns through the job: JSON records appended and Debezium change records applied, read back by
Apache Iceberg's Spark runtime and by pyiceberg; the data files' metrics count the list elements."""

from __future__ import annotations

import base64
import json
from datetime import UTC, date, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

from pyiceberg.table import Table
from pyspark.sql import SparkSession

from spark_app.decoding.changes import UNAVAILABLE
from spark_app.job.loop import SyncJob
from tests.integration.sync_support import BackgroundJob, catalog_of, make_sync, sink_commits

SCHEMA = [{"name": "id", "type": "long", "required": True}, {"name": "tags", "type": "array<string>"},
          {"name": "scores", "type": "array<int>"}, {"name": "prices", "type": "array<decimal(8,2)>"},
          {"name": "days", "type": "array<date>"}, {"name": "seen", "type": "array<timestamptz>"}]
COLUMNS = [column["name"] for column in SCHEMA]


def _run_files(directory: Path, spark: SparkSession, files: list[list[str]], schema: list[dict[str, Any]] | None = SCHEMA,
               **spec: Any) -> Table:
    """Sync the JSON lines of ``files`` (one a trigger) into ``sales.orders``; the table once the last is committed."""
    inbox = directory / "inbox"
    inbox.mkdir()
    for number, lines in enumerate(files):
        (inbox / f"{number:04d}.json").write_text("\n".join(lines) + "\n")
    if schema is not None:
        spec["schema"] = schema
    sync = make_sync(directory, {"files": {"path": str(inbox), "maxFilesPerTrigger": 1}},
                     deadLetter={"table": "sales.orders_dlq"}, **spec)
    catalog = catalog_of(sync)
    last = {"after": f"{len(files) - 1:04d}.json"}

    def reached() -> bool:
        commits = sink_commits(catalog.load_table("sales.orders"), "test/orders")
        return bool(commits) and commits[-1].frontier == last

    with BackgroundJob(SyncJob(sync, 1, spark)) as running:
        running.wait_until(reached, "the last file committed", timeout=300)
    return catalog.load_table("sales.orders")


def _spark_rows(spark: SparkSession, table: Table) -> dict[int, dict[str, Any]]:
    frame = spark.read.format("iceberg").load(table.metadata_location)
    return {row["id"]: row.asDict() for row in frame.select(*COLUMNS).collect()}


def _pyiceberg_rows(table: Table) -> dict[int, dict[str, Any]]:
    return {row["id"]: row for row in table.scan(selected_fields=tuple(COLUMNS)).to_arrow().to_pylist()}


def _dead_letters(table: Table) -> list[str]:
    """The reasons of the dead letters of ``table``'s sync (its dead-letter table ``sales.orders_dlq``)."""
    return sorted(table.catalog.load_table("sales.orders_dlq").scan().to_arrow().column("reason").to_pylist())


def test_json_arrays_are_appended_with_their_nulls_and_bad_elements_are_dead_letters(
        tmp_path: Path, spark: SparkSession) -> None:
    good = [
        {"id": 1, "tags": ["a", None, "c"], "scores": [1, 2, 3], "prices": [1.5, None, "2.25"],
         "days": ["2024-02-29", None], "seen": ["2024-03-01T10:00:00+02:00"]},
        {"id": 2, "tags": [], "scores": None, "prices": [], "days": [], "seen": []},
        {"id": 3},
    ] + [{"id": n, "tags": [f"t{n}"] * (n % 4), "scores": list(range(n % 5))} for n in range(4, 300)]
    bad = ['{"id": 900, "scores": [1, "two"]}', '{"id": 901, "prices": [1.234]}', '{"id": 902, "days": ["2024-13-01"]}',
           '{"id": 903, "tags": "not an array"}', '{"id": 904, "scores": [4294967296]}']
    lines = [json.dumps(row) for row in good]
    table = _run_files(tmp_path, spark, [lines[:150] + bad, lines[150:]])
    expected = {
        1: {"id": 1, "tags": ["a", None, "c"], "scores": [1, 2, 3], "prices": [Decimal("1.50"), None, Decimal("2.25")],
            "days": [date(2024, 2, 29), None], "seen": [datetime(2024, 3, 1, 8, tzinfo=UTC)]},
        2: {"id": 2, "tags": [], "scores": None, "prices": [], "days": [], "seen": []},
        3: {"id": 3, "tags": None, "scores": None, "prices": None, "days": None, "seen": None},
        **{n: {"id": n, "tags": [f"t{n}"] * (n % 4), "scores": list(range(n % 5)), "prices": None, "days": None,
               "seen": None} for n in range(4, 300)},
    }
    assert _pyiceberg_rows(table) == expected
    in_spark = _spark_rows(spark, table)
    assert in_spark.keys() == expected.keys()
    assert {n: {**row, "seen": [s.astimezone(UTC) for s in row["seen"]] if row["seen"] is not None else None}
            for n, row in in_spark.items()} == expected
    reasons = _dead_letters(table)
    assert len(reasons) == len(bad)
    for field in ("scores", "prices", "days", "tags"):
        assert any(reason.startswith(f"field {field}:") for reason in reasons), reasons
    _assert_element_counts(table, expected)


def _assert_element_counts(table: Table, rows: dict[int, dict[str, Any]]) -> None:
    """Each list element's value and null counts summed over the data files are those Iceberg's own writers record
    (the Parquet column's: one value per element, and one null for each null or empty list)."""
    snapshot = table.current_snapshot()
    assert snapshot is not None
    schema = table.schema()
    totals: dict[int, list[int]] = {}
    for task in table.scan().plan_files():
        for field_id, count in (task.file.value_counts or {}).items():
            totals.setdefault(field_id, [0, 0])[0] += count
        for field_id, count in (task.file.null_value_counts or {}).items():
            totals.setdefault(field_id, [0, 0])[1] += count
    for name in COLUMNS[1:]:
        element_id = schema.find_field(f"{name}.element").field_id
        values = [item for row in rows.values() if row[name] is not None for item in row[name]]
        no_elements = sum(not row[name] for row in rows.values())
        assert totals[element_id] == [len(values) + no_elements, sum(item is None for item in values) + no_elements], name
        assert schema.find_field(name).field_id not in totals  # a list has no counts of its own (as Iceberg's)


def _decimal(unscaled: int) -> str:
    return base64.b64encode(unscaled.to_bytes(4, "big", signed=True)).decode()


_CONNECT_ROW = {"type": "struct", "optional": True, "fields": [
    {"field": "id", "type": "int64", "optional": False},
    {"field": "tags", "type": "array", "optional": True, "items": {"type": "string", "optional": True}},
    {"field": "scores", "type": "array", "optional": True, "items": {"type": "int32", "optional": True}},
    {"field": "prices", "type": "array", "optional": True, "items": {
        "type": "bytes", "optional": True, "name": "org.apache.kafka.connect.data.Decimal",
        "parameters": {"scale": "2", "connect.decimal.precision": "8"}}},
    {"field": "days", "type": "array", "optional": True,
     "items": {"type": "int32", "optional": True, "name": "io.debezium.time.Date"}},
    {"field": "seen", "type": "array", "optional": True,
     "items": {"type": "int64", "optional": True, "name": "io.debezium.time.MicroTimestamp"}},
]}
_CONNECT_SCHEMA = {"type": "struct", "name": "pg.public.orders.Envelope", "fields": [
    {**_CONNECT_ROW, "field": "before"}, {**_CONNECT_ROW, "field": "after"},
    {"field": "op", "type": "string", "optional": False}]}


def _change(op: str, before: dict[str, Any] | None, after: dict[str, Any] | None) -> str:
    return json.dumps({"schema": _CONNECT_SCHEMA, "payload": {"op": op, "before": before, "after": after}})


def test_debezium_arrays_are_applied_and_unsent_toasted_arrays_keep_their_values(
        tmp_path: Path, spark: SparkSession) -> None:
    """Connect ARRAY fields with Decimal, Date and MicroTimestamp items, null elements, empty and null arrays; an
    update whose TOASTed arrays Debezium did not send keeps them, from the same trigger or from the table."""
    first = {"id": 1, "tags": ["x", None], "scores": [7, None, 9], "prices": [_decimal(1999), None],
             "days": [19782, None], "seen": [1709287200000000]}
    second = {"id": 2, "tags": [], "scores": None, "prices": [], "days": [], "seen": None}
    unsent = {"id": 1, "tags": [UNAVAILABLE], "scores": list(UNAVAILABLE.encode()), "prices": [_decimal(5)],
              "days": None, "seen": []}
    files = [
        [_change("c", None, first), _change("c", None, second), _change("c", None, {"id": 3, "tags": ["gone"]}),
         _change("c", None, {"id": 4, "scores": [1, "two"]})],
        [_change("u", first, unsent), _change("d", {"id": 3}, None),
         _change("u", second, {**second, "tags": ["now"], "scores": [1]}),
         _change("u", {**second, "tags": ["now"]}, {**second, "tags": [UNAVAILABLE], "scores": [2]})],
    ]
    table = _run_files(tmp_path, spark, files, table={"key": ["id"]}, changes={"format": "debezium"})
    expected = {
        1: {"id": 1, "tags": ["x", None], "scores": [7, None, 9], "prices": [Decimal("0.05")], "days": None,
            "seen": []},
        2: {"id": 2, "tags": ["now"], "scores": [2], "prices": [], "days": [], "seen": None},
    }
    assert _spark_rows(spark, table) == expected
    assert _pyiceberg_rows(table) == expected
    reasons = _dead_letters(table)
    assert len(reasons) == 1 and reasons[0].startswith("field scores:") and "array<int>" in reasons[0], reasons


def _evolving_change(row_fields: list[dict[str, Any]], after: dict[str, Any]) -> str:
    row = {"type": "struct", "optional": True, "fields": [{"field": "id", "type": "int64", "optional": False},
                                                          *row_fields]}
    schema = {"type": "struct", "fields": [{**row, "field": "before"}, {**row, "field": "after"},
                                           {"field": "op", "type": "string", "optional": False}]}
    return json.dumps({"schema": schema, "payload": {"op": "c", "before": None, "after": after}})


def test_without_spec_schema_arrays_are_created_widened_by_element_and_added(tmp_path: Path,
                                                                            spark: SparkSession) -> None:
    """The table is created from the first records' Connect ARRAY fields; a later schema widens an array's items
    (int32 to int64: the element is widened) and adds an array of Connect Decimals."""
    tags = {"field": "tags", "type": "array", "optional": True, "items": {"type": "string", "optional": True}}
    scores = {"field": "scores", "type": "array", "optional": True, "items": {"type": "int32", "optional": True}}
    wide = {**scores, "items": {"type": "int64", "optional": True}}
    first = [_evolving_change([tags, scores], {"id": 1, "tags": ["a", None], "scores": [1, None]})]
    later = [_evolving_change([tags, wide, _CONNECT_ROW["fields"][3]],
                              {"id": 2, "tags": [], "scores": [2**40], "prices": [_decimal(150), None]})]
    table = _run_files(tmp_path, spark, [first, later], schema=None, table={"key": ["id"]},
                       changes={"format": "debezium"})
    assert [(f.name, str(f.field_type)) for f in table.schema().fields] == [
        ("id", "long"), ("tags", "list<string>"), ("scores", "list<long>"), ("prices", "list<decimal(8, 2)>")]
    frame = spark.read.format("iceberg").load(table.metadata_location)
    assert {row["id"]: row.asDict() for row in frame.collect()} == {
        1: {"id": 1, "tags": ["a", None], "scores": [1, None], "prices": None},
        2: {"id": 2, "tags": [], "scores": [2**40], "prices": [Decimal("1.50"), None]}}
