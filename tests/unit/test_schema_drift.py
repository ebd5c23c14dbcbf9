"""The Connect → Iceberg type table, drift detection in decoding, and drift as schema changes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pyiceberg.schema import Schema
from pyiceberg.types import DecimalType, ListType, LongType, NestedField, StringType, TimeType

from icebergsync.errors import IncompatibleSchemaError
from icebergsync.schema import SchemaChange, iceberg_schema, plan_evolution
from icebergsync.spec import Column
from spark_app.changes import decode_changes
from spark_app.schema_drift.connect_types import iceberg_type_name
from spark_app.schema_drift.drift import Fit, SchemaDrift, classify, observe
from spark_app.schema_drift.plan import new_table_columns, schema_changes, table_columns
from spark_app.sources.file_lines import ChangeReading, FileReader
from spark_app.units import FileUnit, UnitStats

COLUMNS = [Column(name="id", type="long", required=True), Column(name="qty", type="int"),
           Column(name="note", type="string", required=True)]


def connect(name: str, kind: str, logical: str | None = None, **parameters: str) -> dict[str, Any]:
    return {"field": name, "type": kind, **({"name": logical} if logical else {}),
            **({"parameters": parameters} if parameters else {})}


@pytest.mark.parametrize(("schema", "expected"), [
    (connect("a", "int8"), "int"), (connect("a", "int16"), "int"), (connect("a", "int32"), "int"),
    (connect("a", "int64"), "long"), (connect("a", "float32"), "float"), (connect("a", "float64"), "double"),
    (connect("a", "boolean"), "boolean"), (connect("a", "string"), "string"), (connect("a", "bytes"), "binary"),
    (connect("a", "bytes", "org.apache.kafka.connect.data.Decimal", scale="2", **{"connect.decimal.precision": "12"}),
     "decimal(12,2)"),
    (connect("a", "bytes", "org.apache.kafka.connect.data.Decimal", scale="3"), "decimal(38,3)"),
    (connect("a", "int32", "io.debezium.time.Date"), "date"),
    (connect("a", "int32", "org.apache.kafka.connect.data.Date"), "date"),
    (connect("a", "int64", "io.debezium.time.Timestamp"), "timestamp"),
    (connect("a", "int64", "io.debezium.time.MicroTimestamp"), "timestamp"),
    (connect("a", "int64", "io.debezium.time.NanoTimestamp"), "timestamp"),
    (connect("a", "int64", "org.apache.kafka.connect.data.Timestamp"), "timestamp"),
    (connect("a", "string", "io.debezium.time.IsoTimestamp"), "timestamp"),
    (connect("a", "string", "io.debezium.time.ZonedTimestamp"), "timestamptz"),
    (connect("a", "int64", "io.debezium.time.MicroTime"), "long"),
    (connect("a", "string", "io.debezium.data.Uuid"), "string"),
    (connect("a", "string", "io.debezium.data.Json"), "string"),
    (connect("a", "string", "io.debezium.data.Enum"), "string"),
    ({**connect("a", "array"), "items": {"type": "string", "optional": True}}, "array<string>"),
    ({**connect("a", "array"), "items": {"type": "int32", "name": "io.debezium.time.Date"}}, "array<date>"),
    ({**connect("a", "array"), "items": {"type": "bytes", "name": "org.apache.kafka.connect.data.Decimal",
                                         "parameters": {"scale": "2", "connect.decimal.precision": "8"}}},
     "array<decimal(8,2)>"),
])
def test_connect_types_map_to_iceberg_types(schema: dict[str, Any], expected: str) -> None:
    assert iceberg_type_name(schema) == (expected, "")


@pytest.mark.parametrize(("schema", "why"), [
    (connect("a", "struct", "io.debezium.data.VariableScaleDecimal"), "VariableScaleDecimal"),
    (connect("a", "bytes", "org.apache.kafka.connect.data.Decimal", scale="2", **{"connect.decimal.precision": "40"}),
     "beyond Iceberg's decimal(38,s)"),
    (connect("a", "array"), "'array'"),
    ({**connect("a", "array"), "items": {"type": "struct", "name": "io.debezium.data.VariableScaleDecimal"}},
     "an array whose elements have no column type here (a numeric without a fixed scale"),
    ({**connect("a", "array"), "items": {"type": "array", "items": {"type": "int32"}}}, "(arrays of arrays)"),
    ({**connect("a", "array"), "items": {"type": "map"}}, "(Connect type 'map' has no"),
])
def test_types_without_an_iceberg_column_say_why(schema: dict[str, Any], why: str) -> None:
    type_name, reason = iceberg_type_name(schema)
    assert type_name is None and why in reason


@pytest.mark.parametrize(("column", "source", "fit"), [
    ("int", "int", Fit.FITS), ("long", "int", Fit.FITS), ("int", "long", Fit.WIDEN), ("float", "double", Fit.WIDEN),
    ("decimal(10,2)", "decimal(12,2)", Fit.WIDEN), ("decimal(12,2)", "decimal(10,2)", Fit.FITS),
    ("decimal(10,2)", "decimal(10,3)", Fit.INCOMPATIBLE), ("int", "string", Fit.INCOMPATIBLE),
    ("string", "long", Fit.INCOMPATIBLE), ("long", "double", Fit.INCOMPATIBLE), ("binary", "string", Fit.INCOMPATIBLE),
    ("timestamptz", "timestamp", Fit.FITS), ("decimal(38,18)", "string", Fit.FITS), ("long", "timestamp", Fit.FITS),
    ("array<int>", "array<int>", Fit.FITS), ("array<int>", "array<long>", Fit.WIDEN),
    ("array<long>", "array<int>", Fit.FITS), ("array<int>", "array<string>", Fit.INCOMPATIBLE),
    ("array<string>", "string", Fit.INCOMPATIBLE), ("string", "array<string>", Fit.INCOMPATIBLE),
    ("array<decimal(8,2)>", "array<decimal(10,2)>", Fit.WIDEN),
])
def test_a_source_type_fits_widens_or_is_incompatible(column: str, source: str, fit: Fit) -> None:
    assert classify(column, source) is fit


def test_a_struct_asks_to_add_widen_make_optional_or_names_what_cannot_be() -> None:
    types = {c.name: c.type for c in COLUMNS}
    fields = [connect("id", "int64"), connect("qty", "int64"), connect("born", "int32", "io.debezium.time.Date")]
    drift = observe(fields, types, frozenset({"id", "note"}), frozenset({"id"}), whole_row=True)
    assert (drift.adds, drift.widens, drift.optional, drift.problems) == ({"born": "date"}, {"qty": "long"}, {"note"}, {})
    # A delete's before may hold the key alone: nothing there was dropped.
    assert not observe([connect("id", "int64")], types, frozenset({"id", "note"}), frozenset({"id"}), whole_row=False)
    lost_key = observe([connect("qty", "int32")], types, frozenset(), frozenset({"id"}), whole_row=True)
    assert lost_key.problems == {"id": "key column 'id' is no longer in the source's rows"}


def test_drift_merges_to_the_widest_type_and_refuses_two_incompatible_ones() -> None:
    drift = SchemaDrift(adds={"a": "int"})
    drift.merge(SchemaDrift(adds={"a": "long", "b": "string"}))
    drift.merge(SchemaDrift(adds={"a": "int"}))
    assert drift.adds == {"a": "long", "b": "string"} and not drift.problems
    drift.merge(SchemaDrift(adds={"b": "int"}))
    assert drift.problems == {"b": "column 'b' is sent as both string and int"}


def envelope(fields: list[dict[str, Any]], after: dict[str, Any]) -> str:
    row = {"type": "struct", "fields": fields}
    return json.dumps({"schema": {"type": "struct", "fields": [{**row, "field": "before"}, {**row, "field": "after"}]},
                       "payload": {"op": "c", "before": None, "after": after}})


def test_decoding_collects_the_drift_of_each_distinct_schema_once() -> None:
    first = [connect("id", "int64"), connect("qty", "int32"), connect("note", "string")]
    later = [*first, connect("extra", "string")]
    records = [envelope(first, {"id": 1, "qty": 2, "note": "a"}), envelope(later, {"id": 2, "note": "b", "extra": "x"}),
               envelope(later, {"id": 3, "note": "c", "extra": "y"})]
    drift = SchemaDrift()
    decode_changes(records, None, lambda i: {"line": i}, COLUMNS, ["id"], "debezium", 0, drift)
    assert drift.adds == {"extra": "string"} and not drift.widens and not drift.problems
    # Without a collector (schemaEvolution none) the same records are dead letters, as before.
    decoded = decode_changes(records, None, lambda i: {"line": i}, COLUMNS, ["id"], "debezium", 0)
    assert decoded.column("_isync_error").null_count == 1


def test_the_upsert_formats_delete_flag_is_not_a_column() -> None:
    fields = [connect("id", "int64"), connect("qty", "int32"), connect("note", "string"), connect("__deleted", "string")]
    record = json.dumps({"schema": {"type": "struct", "fields": fields},
                         "payload": {"id": 1, "qty": None, "note": "n", "__deleted": "false"}})
    drift = SchemaDrift()
    decode_changes([record], None, lambda i: {"line": i}, COLUMNS, ["id"], "upsert", 0, drift)
    assert not drift


def test_drift_becomes_schema_changes_or_an_error_naming_table_and_columns() -> None:
    changes = schema_changes(SchemaDrift(adds={"p": "decimal(10,2)"}, widens={"qty": "long"}, optional={"note"}),
                             "sales.orders")
    assert changes == [SchemaChange("add", "p", DecimalType(10, 2)), SchemaChange("widen", "qty", LongType()),
                       SchemaChange("make-optional", "note")]
    with pytest.raises(IncompatibleSchemaError, match=r"sales.orders cannot follow: column 'qty' is int"):
        schema_changes(SchemaDrift(problems={"qty": "column 'qty' is int in the table and the source now sends string"}),
                       "sales.orders")


def test_an_arrays_element_widens_as_the_element_column() -> None:
    """A Connect array whose items widen becomes a change of ``<column>.element`` (what Iceberg updates)."""
    fields = [connect("id", "int64"), {**connect("tags", "array"), "items": {"type": "int64"}}]
    drift = observe(fields, {"id": "long", "tags": "array<int>"}, frozenset({"id"}), frozenset({"id"}), whole_row=True)
    assert drift.widens == {"tags": "array<long>"}
    assert schema_changes(drift, "t") == [SchemaChange("widen", "tags.element", LongType())]
    with pytest.raises(IncompatibleSchemaError, match="key column 'tags' is array<string>; a key column cannot"):
        new_table_columns(SchemaDrift(adds={"tags": "array<string>"}), "t", ["tags"])


def test_a_new_tables_columns_come_from_its_first_records_with_the_key_required() -> None:
    drift = SchemaDrift(adds={"id": "long", "note": "string"})
    assert new_table_columns(drift, "t", ["id"]) == [Column(name="id", type="long", required=True),
                                                      Column(name="note", type="string")]
    with pytest.raises(IncompatibleSchemaError, match=r"key column 'sku' .* is not in the records"):
        new_table_columns(drift, "t", ["sku"])
    with pytest.raises(IncompatibleSchemaError, match="carry no Kafka Connect schema"):
        new_table_columns(SchemaDrift(), "t", ["id"])


def test_a_tables_columns_as_spec_columns() -> None:
    """Another engine's optional column of a type the sync does not write stays null in the sync's rows;
    a required one stops the sync, naming it."""
    assert table_columns(iceberg_schema(COLUMNS), "t") == COLUMNS
    arrays = [*COLUMNS, Column(name="tags", type="array<string>"), Column(name="p", type="array<decimal(8,2)>")]
    assert table_columns(iceberg_schema(arrays), "t") == arrays
    required_elements = NestedField(98, "ids", ListType(97, LongType(), element_required=True), required=False)
    assert table_columns(Schema(*iceberg_schema(COLUMNS).fields, required_elements), "t") == COLUMNS
    foreign = Schema(*iceberg_schema(COLUMNS).fields, NestedField(99, "at", TimeType(), required=False))
    assert table_columns(foreign, "t") == COLUMNS
    with pytest.raises(IncompatibleSchemaError,
                       match=r"t has required column\(s\) of types IcebergSync does not write: at"):
        table_columns(Schema(NestedField(1, "at", TimeType(), required=True)), "t")


def test_a_followed_table_may_be_wider_and_more_optional_than_the_spec() -> None:
    table = Schema(NestedField(1, "id", LongType(), required=True), NestedField(2, "qty", LongType()),
                   NestedField(3, "note", StringType()))
    assert plan_evolution(table, COLUMNS, "t", followed=True) == []
    with pytest.raises(IncompatibleSchemaError, match="cannot change to int"):
        plan_evolution(table, COLUMNS, "t")


def test_a_change_file_reader_reports_drift_in_its_stats_only_when_following(tmp_path: Path) -> None:
    first = [connect("id", "int64"), connect("qty", "int32"), connect("note", "string")]
    path = tmp_path / "changes.json"
    path.write_text(envelope(first, {"id": 1, "qty": 2, "note": "a"}) + "\n"
                    + envelope([*first, connect("extra", "int16")], {"id": 2, "note": "b", "extra": 3}) + "\n")
    for follow, adds in ((True, {"extra": "int"}), (False, {})):
        reading = ChangeReading(tuple(COLUMNS), ("id",), "debezium", follow_schema=follow)
        stats = UnitStats()
        list(FileReader({}, "json", None, tuple(COLUMNS), reading)(FileUnit(0, path.as_uri()), stats))
        assert stats.drift.adds == adds
