"""JSON Schemas as spec column types: every type and format, nesting, references, nullability, what is refused."""

from __future__ import annotations

from typing import Any

import pytest

from spark_app.decoding.registry.json_schema_types import JsonSchemaTypeError, object_columns


def columns(properties: dict[str, Any], required: list[str] | None = None, **extra: Any) -> list[tuple[str, str, bool]]:
    schema = {"type": "object", "properties": properties, "required": required or [], **extra}
    return [(name, str(spec_type), is_required) for name, spec_type, is_required in object_columns(schema)]


@pytest.mark.parametrize(("schema", "expected"), [
    ({"type": "integer"}, "long"), ({"type": "integer", "connect.type": "int32"}, "int"),
    ({"type": "integer", "connect.type": "int64"}, "long"), ({"type": "number"}, "double"),
    ({"type": "number", "connect.type": "float32"}, "float"), ({"type": "boolean"}, "boolean"),
    ({"type": "string"}, "string"), ({"type": "string", "format": "date"}, "date"),
    ({"type": "string", "format": "date-time"}, "timestamptz"), ({"type": "string", "format": "uuid"}, "string"),
    ({"type": "string", "contentEncoding": "base64"}, "binary"), ({"type": "string", "connect.type": "bytes"}, "binary"),
    ({"enum": ["RED", "GREEN"]}, "string"),
    ({"type": "array", "items": {"type": "integer"}}, "array<long>"),
    ({"type": "object", "additionalProperties": {"type": "number"}}, "map<string, double>"),
    ({"type": "object", "properties": {"sku": {"type": "string"}, "qty": {"type": "integer"}}, "required": ["sku"]},
     "struct<sku: string not null, qty: long>"),
    ({"type": "array", "items": {"type": "object", "properties": {"at": {"type": "string", "format": "date"}}}},
     "array<struct<at: date>>"),
])
def test_every_json_schema_type_has_its_column_type(schema: dict[str, Any], expected: str) -> None:
    assert columns({"c": schema}, ["c"]) == [("c", expected, True)]
    assert columns({"c": schema}) == [("c", expected, False)]


@pytest.mark.parametrize("nullable", [
    {"type": ["null", "integer"]}, {"oneOf": [{"type": "null"}, {"type": "integer"}]},
    {"anyOf": [{"type": "integer"}, {"type": "null"}]},
])
def test_a_null_member_makes_a_required_property_optional(nullable: dict[str, Any]) -> None:
    assert columns({"c": nullable}, ["c"]) == [("c", "long", False)]


def test_references_resolve_within_the_schema() -> None:
    item = {"type": "object", "properties": {"sku": {"type": "string"}}, "required": ["sku"]}
    assert columns({"a": {"$ref": "#/definitions/Item"}, "b": {"type": "array", "items": {"$ref": "#/$defs/Item"}}},
                   definitions={"Item": item}, **{"$defs": {"Item": item}}) == [
        ("a", "struct<sku: string not null>", False), ("b", "array<struct<sku: string not null>>", False)]


@pytest.mark.parametrize(("properties", "extra", "why"), [
    ({"c": {"type": ["integer", "string"]}}, {}, "c: a type of ['integer', 'string'] has no column type"),
    ({"c": {"oneOf": [{"type": "integer"}, {"type": "string"}]}}, {}, "c: oneOf of 2 non-null schemas"),
    ({"next": {"$ref": "#/definitions/Node"}},
     {"definitions": {"Node": {"type": "object", "properties": {"next": {"$ref": "#/definitions/Node"}}}}},
     "next.next: #/definitions/Node refers to itself"),
    ({"c": {"$ref": "other.json#/x"}}, {}, "c: reference 'other.json#/x' is outside the schema"),
    ({"c": {"$ref": "#/definitions/Nope"}}, {}, "c: reference '#/definitions/Nope' names nothing"),
    ({"c": {"type": "object"}}, {}, "c: an object without properties has no column type"),
    ({"c": {}}, {}, "c: a schema of type None has no column type"),
])
def test_what_has_no_column_type_names_the_property(properties: dict[str, Any], extra: dict[str, Any],
                                                     why: str) -> None:
    with pytest.raises(JsonSchemaTypeError) as caught:
        columns(properties, **extra)
    assert why in str(caught.value)


def test_the_value_schema_must_be_an_object_with_properties() -> None:
    with pytest.raises(JsonSchemaTypeError, match="not an object with properties"):
        object_columns({"type": "array", "items": {"type": "string"}})
