"""Avro schemas as spec column types: every Avro type and logical type, nesting, unions and what is refused."""

from __future__ import annotations

from typing import Any

import pytest

from spark_app.decoding.registry.avro_types import AvroTypeError, record_columns


def columns(*fields: dict[str, Any], **record: Any) -> list[tuple[str, str, bool]]:
    schema = {"type": "record", "name": "Row", "namespace": "shop", "fields": list(fields), **record}
    return [(name, str(spec_type), required) for name, spec_type, required in record_columns(schema)]


@pytest.mark.parametrize(("avro", "expected"), [
    ("boolean", "boolean"), ("int", "int"), ("long", "long"), ("float", "float"), ("double", "double"),
    ("bytes", "binary"), ("string", "string"),
    ({"type": "bytes", "logicalType": "decimal", "precision": 9, "scale": 2}, "decimal(9,2)"),
    ({"type": "fixed", "name": "Money", "size": 8, "logicalType": "decimal", "precision": 18}, "decimal(18,0)"),
    ({"type": "int", "logicalType": "date"}, "date"),
    ({"type": "int", "logicalType": "time-millis"}, "int"), ({"type": "long", "logicalType": "time-micros"}, "long"),
    ({"type": "long", "logicalType": "timestamp-millis"}, "timestamptz"),
    ({"type": "long", "logicalType": "timestamp-micros"}, "timestamptz"),
    ({"type": "long", "logicalType": "timestamp-nanos"}, "timestamptz"),
    ({"type": "long", "logicalType": "local-timestamp-millis"}, "timestamp"),
    ({"type": "long", "logicalType": "local-timestamp-micros"}, "timestamp"),
    ({"type": "string", "logicalType": "uuid"}, "string"),
    ({"type": "fixed", "name": "Span", "size": 12, "logicalType": "duration"},
     "struct<months: long, days: long, milliseconds: long>"),
    ({"type": "string", "logicalType": "something-new"}, "string"),  # unknown: its underlying type
    ({"type": "enum", "name": "Color", "symbols": ["RED", "GREEN"]}, "string"),
    ({"type": "fixed", "name": "Hash", "size": 16}, "binary"),
    ({"type": "array", "items": "long"}, "array<long>"),
    ({"type": "array", "items": ["null", "string"]}, "array<string>"),
    ({"type": "map", "values": {"type": "array", "items": "int"}}, "map<string, array<int>>"),
    ({"type": "record", "name": "Item", "fields": [{"name": "sku", "type": "string"},
                                                   {"name": "qty", "type": ["null", "int"], "default": None}]},
     "struct<sku: string not null, qty: int>"),
])
def test_every_avro_type_has_its_column_type(avro: Any, expected: str) -> None:
    assert columns({"name": "c", "type": avro}) == [("c", expected, True)]
    assert columns({"name": "c", "type": ["null", avro]}) == [("c", expected, False)]


def test_named_types_are_reused_by_name_and_namespace() -> None:
    item = {"type": "record", "name": "Item", "fields": [{"name": "sku", "type": "string"}]}
    assert columns({"name": "first", "type": item}, {"name": "second", "type": "Item"},
                   {"name": "third", "type": {"type": "array", "items": "shop.Item"}}) == [
        ("first", "struct<sku: string not null>", True), ("second", "struct<sku: string not null>", True),
        ("third", "array<struct<sku: string not null>>", True)]


@pytest.mark.parametrize(("fields", "why"), [
    ([{"name": "c", "type": ["null", "int", "string"]}], "c: a union of 2 non-null types has no column type"),
    ([{"name": "next", "type": ["null", "Row"]}], "next: record shop.Row contains itself"),
    ([{"name": "c", "type": {"type": "bytes", "logicalType": "decimal", "precision": 40, "scale": 2}}],
     "c: decimal(40,2) is beyond Iceberg's decimal(38,s)"),
    ([{"name": "c", "type": "Nope"}], "c: unknown Avro type 'Nope'"),
    ([{"name": "c", "type": "null"}], "c: a field that is always null"),
    ([{"name": "o", "type": {"type": "record", "name": "Inner", "fields": [{"name": "x", "type": ["int", "long"]}]}}],
     "o.x: a union of 2 non-null types"),
])
def test_what_has_no_column_type_names_the_field(fields: list[dict[str, Any]], why: str) -> None:
    with pytest.raises(AvroTypeError) as caught:
        columns(*fields)
    assert why in str(caught.value)


def test_the_value_schema_must_be_a_record() -> None:
    with pytest.raises(AvroTypeError, match="not an Avro record"):
        record_columns("long")
