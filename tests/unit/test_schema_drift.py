"""The Connect → Iceberg type table, drift detection in decoding, and drift as schema changes."""

from __future__ import annotations

import json
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from pyiceberg.schema import Schema
from pyiceberg.types import DecimalType, ListType, LongType, NestedField, StringType, TimeType

from icebergsync.errors import IncompatibleSchemaError
from icebergsync.schema import SchemaChange, iceberg_schema, plan_evolution
from icebergsync.spec import Column
from spark_app.commit.schema_changes import new_table_columns, schema_changes, table_columns
from spark_app.decoding.changes import decode_changes
from spark_app.decoding.schema_drift.connect_types import iceberg_type_name, sends_text
from spark_app.decoding.schema_drift.drift import Fit, SchemaDrift, classify, observe
from spark_app.sources.file_lines import ChangeReading, FileReader
from spark_app.sources.units import FileUnit, UnitStats

COLUMNS = [Column(name="id", type="long", required=True), Column(name="qty", type="int"),
           Column(name="note", type="string", required=True)]


def connect(name: str, kind: str, logical: str | None = None, **parameters: str) -> dict[str, Any]:
    return {"field": name, "type": kind, **({"name": logical} if logical else {}),
            **({"parameters": parameters} if parameters else {})}


@pytest.mark.parametrize(("schema", "expected"), [
    (connect("a", "int8"), "int"), (connect("a", "int16"), "int"), (connect("a", "int32"), "int"),
    (connect("a", "int64"), "long"), (connect("a", "float32"), "float"), (connect("a", "float64"), "double"),
    (connect("a", "float"), "float"), (connect("a", "double"), "double"),  # what Kafka's JsonConverter writes
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
    ("string", "long", Fit.INCOMPATIBLE), ("long", "double", Fit.INCOMPATIBLE), ("binary", "string", Fit.FITS),
    ("string", "binary", Fit.INCOMPATIBLE), ("decimal(38,18)", "decimal(10,2)", Fit.FITS),
    ("decimal(10,3)", "decimal(10,2)", Fit.INCOMPATIBLE), ("timestamp", "timestamptz", Fit.INCOMPATIBLE),
    ("boolean", "int", Fit.INCOMPATIBLE), ("timestamp", "long", Fit.INCOMPATIBLE),
    ("timestamptz", "timestamp", Fit.FITS), ("decimal(38,18)", "string", Fit.FITS), ("long", "timestamp", Fit.FITS),
    ("array<int>", "array<int>", Fit.FITS), ("array<int>", "array<long>", Fit.WIDEN),
    ("array<long>", "array<int>", Fit.FITS), ("array<int>", "array<string>", Fit.INCOMPATIBLE),
    ("array<string>", "string", Fit.INCOMPATIBLE), ("string", "array<string>", Fit.INCOMPATIBLE),
    ("array<decimal(8,2)>", "array<decimal(10,2)>", Fit.WIDEN),
])
def test_a_source_type_fits_widens_or_is_incompatible(column: str, source: str, fit: Fit) -> None:
    assert classify(column, source) is fit


# One value of each form Debezium's settings send (docs/connectors.md "PostgreSQL types"), as the JSON converter
# writes it with the record's schema: (setting, Connect field schema, JSON value, the value it means).
ENCODINGS: list[tuple[str, dict[str, Any], Any, Any]] = [
    ("int16", connect("v", "int16"), 7, 7),
    ("int32", connect("v", "int32"), -70000, -70000),
    ("int64", connect("v", "int64"), 2**40, 2**40),
    ("real", connect("v", "float"), 1.5, 1.5),
    ("double precision", connect("v", "double"), 2.25, 2.25),
    ("boolean", connect("v", "boolean"), True, True),
    ("text", connect("v", "string"), "hi", "hi"),
    ("decimal.handling.mode=precise", connect("v", "bytes", "org.apache.kafka.connect.data.Decimal", scale="2",
                                              **{"connect.decimal.precision": "10"}), "BM4=", Decimal("12.30")),
    ("decimal.handling.mode=string", connect("v", "string"), "12.30", Decimal("12.30")),
    ("decimal.handling.mode=double", connect("v", "double"), 12.5, Decimal("12.5")),
    ("binary.handling.mode=bytes", connect("v", "bytes"), "AAEC", b"\x00\x01\x02"),
    ("binary.handling.mode=base64", connect("v", "string"), "AAEC", b"\x00\x01\x02"),
    ("io.debezium.time.Date", connect("v", "int32", "io.debezium.time.Date"), 19783, date(2024, 3, 1)),
    ("time.precision.mode=isostring date", connect("v", "string", "io.debezium.time.IsoDate"), "2024-03-01Z",
     date(2024, 3, 1)),
    ("MicroTimestamp", connect("v", "int64", "io.debezium.time.MicroTimestamp"), 1709287200000001,
     datetime(2024, 3, 1, 10, 0, 0, 1)),
    ("Timestamp (ms)", connect("v", "int64", "io.debezium.time.Timestamp"), 1709287200001,
     datetime(2024, 3, 1, 10, 0, 0, 1000)),
    ("time.precision.mode=isostring timestamp", connect("v", "string", "io.debezium.time.IsoTimestamp"),
     "2024-03-01T10:00:00.000001Z", datetime(2024, 3, 1, 10, 0, 0, 1)),
    ("ZonedTimestamp", connect("v", "string", "io.debezium.time.ZonedTimestamp"), "2024-03-01T10:00:00.000001Z",
     datetime(2024, 3, 1, 10, 0, 0, 1, tzinfo=UTC)),
]
COLUMN_TYPES = ["int", "long", "float", "double", "boolean", "string", "binary", "decimal(10,2)", "decimal(20,4)",
                "date", "timestamp", "timestamptz"]


def _as_column(meaning: Any, sent: Any, column: str) -> Any:
    """What ``meaning`` (sent as ``sent``) is in a column of type ``column`` (None: it has no value there)."""
    numeric = isinstance(meaning, int | float | Decimal) and not isinstance(meaning, bool)
    if column == "date" and type(meaning) is int and abs(meaning) < 10**6:
        return date(1970, 1, 1) + timedelta(days=meaning)  # a number in a date column is epoch days
    if column in ("int", "long") and isinstance(meaning, date) and type(sent) is int:
        return sent  # a date or timestamp in an integer column: the number as sent, in its unit
    if column in ("timestamp", "timestamptz") and isinstance(meaning, datetime):
        if column == "timestamp":
            return meaning if meaning.tzinfo is None else None  # an offset is no local time
        return meaning.replace(tzinfo=UTC)  # a local time's wall clock taken as UTC
    if column in ("float", "double") and numeric:
        return float(np.float32(meaning)) if column == "float" else float(meaning)
    if column.startswith("decimal") and numeric:
        return Decimal(str(meaning))
    if column in ("int", "long") and type(meaning) is int:
        return meaning
    if column == "string" and type(sent) is str:
        return sent  # Debezium's text of a value, kept as text
    kinds = {"boolean": bool, "string": str, "binary": bytes, "date": date}
    wanted = kinds.get(column)
    return meaning if wanted is not None and type(meaning) is wanted else None


def _decoder_reads(field: dict[str, Any], sent: Any, meaning: Any, column: str) -> bool:
    """The decoder reads ``sent`` into a ``column`` as what it means (a value out of the column's range is
    a dead letter of that value, not a refusal of its form)."""
    columns = [Column(name="id", type="long", required=True), Column(name="v", type=column)]
    record = envelope([connect("id", "int64"), field], {"id": 1, "v": sent})
    decoded = decode_changes([record], None, lambda i: {"line": i}, columns, ["id"], "debezium", 0).to_pylist()[0]
    error = decoded["_isync_error"]
    if error is not None:
        if "name" in field:  # a logical type's value out of a column's range is read as something else
            return False
        out_of_range = column in ("int", "long") and type(sent) is int and f"is not a {column}" in error
        return out_of_range or error.endswith(f"does not fit {column}")
    expected = _as_column(meaning, sent, column) if column != "string" or sends_text(field) else None
    return expected is not None and decoded["v"] == expected


def _fit(field: dict[str, Any], column: str) -> Fit:
    source, _ = iceberg_type_name(field)
    assert source is not None
    return classify(column, source, sends_text(field))


@pytest.mark.parametrize("column", COLUMN_TYPES)
@pytest.mark.parametrize(("setting", "field", "sent", "meaning"), ENCODINGS, ids=[e[0] for e in ENCODINGS])
def test_what_the_decoder_reads_fits(setting: str, field: dict[str, Any], sent: Any, meaning: Any, column: str) -> None:
    """A form the decoder reads into a column's type never stops a sync (FITS, or a widening of the column)."""
    if _decoder_reads(field, sent, meaning, column):
        assert _fit(field, column) is not Fit.INCOMPATIBLE


@pytest.mark.parametrize("column", COLUMN_TYPES)
@pytest.mark.parametrize("field", list({json.dumps(e[1], sort_keys=True): e[1] for e in ENCODINGS}.values()),
                         ids=lambda field: f"{field['type']}:{field.get('name', '')}")
def test_what_fits_the_decoder_reads(field: dict[str, Any], column: str) -> None:
    """A schema that FITS a column is one whose values, under some Debezium setting, the decoder reads into it (a
    plain Connect string is text, decimal text, base64 or ISO-8601 by the setting); a WIDEN is read into the
    source's type once the column is widened."""
    fit = _fit(field, column)
    if fit is Fit.INCOMPATIBLE:
        return
    target = column if fit is Fit.FITS else iceberg_type_name(field)[0]
    assert target is not None
    assert any(_decoder_reads(field, sent, meaning, target) for _, same, sent, meaning in ENCODINGS if same == field)


def test_a_real_into_a_double_column_keeps_its_float32_value() -> None:
    """After ``real`` was widened to ``double precision`` (PostgreSQL converts each stored float32 exactly), records
    sent before the change still say ``float``: their text is Java's shortest text of a float32, read as that float32
    (-8397.6 is -8397.599609375), not as the nearest double; in arrays alike. A ``double`` field's text stays a double."""
    columns = [Column(name="id", type="long", required=True), Column(name="v", type="double"),
               Column(name="a", type="array<double>")]
    real_array = {**connect("a", "array"), "items": {"type": "float", "optional": True}}
    double_array = {**connect("a", "array"), "items": {"type": "double", "optional": True}}
    records = [envelope([connect("id", "int64"), connect("v", "float"), real_array], {"id": 1, "v": -8397.6, "a": [0.1]}),
               envelope([connect("id", "int64"), connect("v", "double"), double_array], {"id": 2, "v": -8397.6, "a": [0.1]})]
    decoded = decode_changes(records, None, lambda i: {"line": i}, columns, ["id"], "debezium", 0).to_pylist()
    assert [(row["v"], row["a"]) for row in decoded] == [
        (float(np.float32(-8397.6)), [float(np.float32(0.1))]), (-8397.6, [0.1])]
    assert float(np.float32(-8397.6)) == -8397.599609375


def test_the_largest_float32_debezium_prints_is_a_float() -> None:
    """Java prints float32's maximum as 3.4028235E38, above it as a double: it rounds to the maximum."""
    columns = [Column(name="id", type="long", required=True), Column(name="v", type="float")]
    records = [envelope([connect("id", "int64"), connect("v", "float")], {"id": 1, "v": 0}).replace(
        '"v": 0', f'"v": {text}') for text in ("3.4028235E+38", "-3.4028235E38", "3.5E+38")]
    decoded = decode_changes(records, None, lambda i: {"line": i}, columns, ["id"], "debezium", 0).to_pylist()
    top = float(np.finfo(np.float32).max)
    assert [row["v"] for row in decoded] == [top, -top, None]
    assert decoded[2]["_isync_error"] == "field v: value 3.5E38 is not a float"


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
