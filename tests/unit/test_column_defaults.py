"""The default a source column's Connect schema carries (as Debezium 3.6.1's PostgreSQL connector
sends it through Kafka's JsonConverter; every field schema below was seen in a real event) as the initial-default
of a column the sync adds on a format-version 3 table; what is refused, with a WARNING naming the column."""

from __future__ import annotations

import json
import logging
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from pyiceberg.types import DateType, IntegerType, StringType

from icebergsync.schema import SchemaChange
from icebergsync.spec import Column
from spark_app.commit.schema_changes import connect_default, default_value, schema_changes
from spark_app.decoding.changes import Logical, decode_value
from spark_app.decoding.schema_drift.connect_types import CONNECT_DECIMAL
from spark_app.decoding.schema_drift.drift import SchemaDrift, observe


def field(text: str) -> dict[str, Any]:
    """A field schema parsed as the decoder parses records (numbers with a fraction as Decimal)."""
    parsed: dict[str, Any] = json.loads(text, parse_float=Decimal)
    return parsed


DECIMAL = '"type": "bytes", "optional": true, "name": "org.apache.kafka.connect.data.Decimal", "version": 1'


@pytest.mark.parametrize(("type_name", "schema", "expected"), [
    ("int", '{"type": "int32", "optional": true, "default": 7, "field": "i"}', 7),
    ("int", '{"type": "int16", "optional": true, "default": -3, "field": "s"}', -3),
    ("long", '{"type": "int64", "optional": true, "default": 9000000000, "field": "b"}', 9000000000),
    ("string", '{"type": "string", "optional": true, "default": "hello", "field": "t"}', "hello"),
    ("string", '{"type": "string", "optional": false, "default": "req", "field": "tnn"}', "req"),
    ("string", '{"type": "string", "optional": true, "name": "io.debezium.data.Uuid", "version": 1, '
               '"default": "6ba7b810-9dad-11d1-80b4-00c04fd430c8", "field": "u"}', "6ba7b810-9dad-11d1-80b4-00c04fd430c8"),
    ("string", '{"type": "string", "optional": true, "name": "io.debezium.data.Json", "version": 1, '
               '"default": "{\\"a\\": 1}", "field": "j"}', '{"a": 1}'),
    ("boolean", '{"type": "boolean", "optional": true, "default": true, "field": "bo"}', True),
    ("float", '{"type": "float", "optional": true, "default": 1.5, "field": "r"}', 1.5),
    ("double", '{"type": "double", "optional": true, "default": 0.1, "field": "dp"}', 0.1),
    ("date", '{"type": "int32", "optional": true, "name": "io.debezium.time.Date", "version": 1, "default": 19783, '
             '"field": "dt"}', 19783),  # 2024-03-01 as epoch days
    ("timestamp", '{"type": "int64", "optional": true, "name": "io.debezium.time.MicroTimestamp", "version": 1, '
                  '"default": 1709287200123456, "field": "ts"}', 1709287200123456),
    ("timestamptz", '{"type": "string", "optional": true, "name": "io.debezium.time.ZonedTimestamp", "version": 1, '
                    '"default": "2024-03-01T08:00:00.000000Z", "field": "tz"}', 1709280000000000),
    ("long", '{"type": "int64", "optional": true, "name": "io.debezium.time.MicroTime", "version": 1, '
             '"default": 36900000000, "field": "tp"}', 36900000000),
    # Connect Decimal: base64 of the unscaled value at the schema's scale, given at the column's scale
    ("decimal(10,2)", '{' + DECIMAL + ', "parameters": {"scale": "2", "connect.decimal.precision": "10"}, '
                      '"default": "BOI=", "field": "n"}', Decimal("12.50")),
    ("decimal(10,2)", '{' + DECIMAL + ', "parameters": {"scale": "2", "connect.decimal.precision": "10"}, '
                      '"default": "+w==", "field": "nz"}', Decimal("-0.05")),
    ("decimal(38,0)", '{' + DECIMAL + ', "parameters": {"scale": "0", "connect.decimal.precision": "38"}, '
                      '"default": "J+QbMka+ybFuOYEV", "field": "big"}', Decimal("12345678901234567890123456789")),
    ("decimal(12,4)", '{' + DECIMAL + ', "parameters": {"scale": "2", "connect.decimal.precision": "10"}, '
                      '"default": "BOI=", "field": "n"}', Decimal("12.5000")),
])
def test_a_default_converts_as_the_fields_values_do(type_name: str, schema: str, expected: Any) -> None:
    value = default_value(type_name, field(schema))
    assert value == expected and type(value) is type(expected)
    if isinstance(expected, Decimal):
        assert value.as_tuple().exponent == expected.as_tuple().exponent  # the column's scale, as Iceberg's JSON needs


@pytest.mark.parametrize(("type_name", "schema", "why"), [
    # Debezium's placeholders for a default it cannot evaluate, seen in real events: nextval() / serial -> 0,
    # md5(random()::text) -> "", (random() > 0.5) -> false, now() / current_timestamp / current_date -> the epoch,
    # gen_random_uuid() -> the nil UUID, random() into numeric -> 0
    ("int", '{"type": "int32", "optional": true, "default": 0, "field": "q"}', "zero of its type"),
    ("string", '{"type": "string", "optional": true, "default": "", "field": "md"}', "zero of its type"),
    ("boolean", '{"type": "boolean", "optional": true, "default": false, "field": "rb"}', "zero of its type"),
    ("timestamptz", '{"type": "string", "optional": true, "name": "io.debezium.time.ZonedTimestamp", "version": 1, '
                    '"default": "1970-01-01T00:00:00.000000Z", "field": "fnow"}', "zero of its type"),
    ("timestamp", '{"type": "int64", "optional": true, "name": "io.debezium.time.MicroTimestamp", "version": 1, '
                  '"default": 0, "field": "ts0"}', "zero of its type"),
    ("date", '{"type": "int32", "optional": true, "name": "io.debezium.time.Date", "version": 1, "default": 0, '
             '"field": "fdate"}', "zero of its type"),
    ("string", '{"type": "string", "optional": true, "name": "io.debezium.data.Uuid", "version": 1, '
               '"default": "00000000-0000-0000-0000-000000000000", "field": "gu"}', "zero of its type"),
    ("double", '{"type": "double", "optional": true, "default": 0.0, "field": "z"}', "zero of its type"),
    # does not convert exactly: PostgreSQL's 'NaN' (text in the schema), 'infinity' (beyond any timestamp)
    ("float", '{"type": "float", "optional": true, "default": "NaN", "field": "ft"}', "does not convert exactly"),
    ("timestamp", '{"type": "int64", "optional": true, "name": "io.debezium.time.MicroTimestamp", "version": 1, '
                  '"default": -9223372036853775810, "field": "inf"}', "does not convert exactly"),
    ("int", '{"type": "int32", "optional": true, "default": "seven", "field": "i"}', "does not convert exactly"),
    ("array<int>", '{"type": "array", "items": {"type": "int32", "optional": true}, "optional": true, '
                   '"default": [1, 2], "field": "ia"}', "array, map and struct columns take no default"),
    # converts (12.50), but Spark's vectorized reader fails on a decimal column with a default
    ("decimal(10,2)", '{' + DECIMAL + ', "parameters": {"scale": "2", "connect.decimal.precision": "10"}, '
                      '"default": "BOI=", "field": "n"}', "apache/iceberg#16502"),
    ("int", '{"type": "int32", "optional": true, "field": "i"}', "sends no default"),
])
def test_a_default_that_may_be_wrong_or_unreadable_is_not_used(type_name: str, schema: str, why: str) -> None:
    value, reason = connect_default(type_name, field(schema))
    assert value is None and why in reason


def test_the_drift_keeps_the_connect_schema_of_an_added_columns_default() -> None:
    fields = [field('{"type": "int64", "optional": false, "field": "id", "default": 5}'),
              field('{"type": "int32", "optional": true, "default": 7, "field": "c"}'),
              field('{"type": "string", "optional": true, "field": "plain"}')]
    drift = observe(fields, {"id": "long"}, frozenset({"id"}), frozenset({"id"}), True)
    assert drift.adds == {"c": "int", "plain": "string"}
    assert drift.defaults == {"c": fields[1]}  # an existing column's default is not a change
    merged = SchemaDrift()
    merged.merge(drift)
    merged.merge(observe([fields[0], field('{"type": "int32", "default": 8, "field": "c"}')], {"id": "long"},
                         frozenset({"id"}), frozenset({"id"}), True))
    assert merged.defaults == {"c": fields[1]}  # the first schema seen decides


def test_on_format_3_an_added_column_takes_the_default(caplog: pytest.LogCaptureFixture) -> None:
    drift = SchemaDrift(adds={"c": "int", "t": "string", "d": "date", "n": "int"},
                        defaults={"c": field('{"type": "int32", "default": 7, "field": "c"}'),
                                  "t": field('{"type": "string", "default": "hello", "field": "t"}'),
                                  "d": field('{"type": "int32", "name": "io.debezium.time.Date", "default": 0, '
                                             '"field": "d"}')})
    with caplog.at_level(logging.WARNING, "icebergsync.job"):
        changes = schema_changes(drift, "shop.t", format_version=3)
    assert changes == [SchemaChange("add", "c", IntegerType(), 7), SchemaChange("add", "t", StringType(), "hello"),
                       SchemaChange("add", "d", DateType()), SchemaChange("add", "n", IntegerType())]
    assert changes[0].describe() == "add c -> int default 7"
    [warning] = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert "shop.t: new column 'd'" in warning and "zero of its type" in warning


def test_on_format_2_an_added_column_takes_no_default(caplog: pytest.LogCaptureFixture) -> None:
    drift = SchemaDrift(adds={"c": "int"}, defaults={"c": field('{"type": "int32", "default": 7, "field": "c"}')})
    with caplog.at_level(logging.WARNING, "icebergsync.job"):
        assert schema_changes(drift, "shop.t") == [SchemaChange("add", "c", IntegerType())]
    [warning] = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert "new column 'c'" in warning and "format-version 2" in warning and "read null" in warning


def test_the_postgres_example_keeps_explicit_nulls_null() -> None:
    """Part 4: Kafka's JsonConverter writes a column's default for an explicit NULL unless told not to; the example
    connector tells both converters (docs/connectors.md, "NULL and DEFAULT"; the real run:
    tests/integration/test_postgres_defaults.py)."""
    example = Path(__file__).resolve().parents[2] / "examples" / "postgres-debezium" / "debezium-connector.json"
    config = json.loads(example.read_text())["config"]
    assert config["key.converter"] == config["value.converter"] == "org.apache.kafka.connect.json.JsonConverter"
    assert config["key.converter.replace.null.with.default"] == "false"
    assert config["value.converter.replace.null.with.default"] == "false"


@pytest.mark.parametrize(("type_name", "value", "logical", "expected"), [
    ("decimal(38,0)", "J+QbMka+ybFuOYEV", Logical(CONNECT_DECIMAL, {"scale": "0"}), Decimal("12345678901234567890123456789")),
    ("decimal(38,2)", {"scale": 2, "value": "J+QbMka+ybFuOYEV"}, None, Decimal("123456789012345678901234567.89")),
    # trailing zeros beyond the column's scale on a number of more than 28 digits
    ("decimal(38,0)", {"scale": 2, "value": "AJvTCjxkWUPdFpCgOgg="}, None, Decimal("123456789012345678901234567890")),
])
def test_decimals_of_more_than_28_digits_decode_exactly(type_name: str, value: Any, logical: Logical | None,
                                                        expected: Decimal) -> None:
    """Python's default decimal context keeps 28 digits; Iceberg's decimals have up to 38 (these were rounded)."""
    decoded = decode_value(Column(name="x", type=type_name), value, logical)
    assert decoded == expected  # Decimal equality is exact, whatever the context


def test_a_source_column_name_that_is_no_spec_name_still_converts() -> None:
    assert default_value("int", field('{"type": "int32", "default": 7, "field": "weird name-ü"}')) == 7
