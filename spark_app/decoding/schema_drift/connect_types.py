"""Kafka Connect / Debezium field schemas as Iceberg column types (spec type names: ``long``, ``decimal(10,2)``).

One table, documented in docs/connectors.md: a logical type (the field schema's ``name``) decides
first, then the Connect base type; an ``array`` of a type with a column type is ``array<T>``, a ``map`` with
primitive keys ``map<K, V>``, a ``struct`` ``struct<name: T, …>`` (to any depth). A field without an Iceberg
equivalent maps to None with the reason.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from icebergsync.types.grammar import StructField, is_primitive, parse_type

MAX_DECIMAL_PRECISION = 38
CONNECT_DECIMAL = "org.apache.kafka.connect.data.Decimal"

_LOGICAL_TYPES: dict[str, str] = {
    "org.apache.kafka.connect.data.Date": "date",
    "io.debezium.time.Date": "date",
    "io.debezium.time.IsoDate": "date",
    "org.apache.kafka.connect.data.Timestamp": "timestamp",
    "io.debezium.time.Timestamp": "timestamp",
    "io.debezium.time.MicroTimestamp": "timestamp",
    "io.debezium.time.NanoTimestamp": "timestamp",
    "io.debezium.time.IsoTimestamp": "timestamp",
    "io.debezium.time.ZonedTimestamp": "timestamptz",
}
_BASE_TYPES: dict[str, str] = {
    "int8": "int", "int16": "int", "int32": "int", "int64": "long",
    # Kafka's JsonConverter names FLOAT32 and FLOAT64 "float" and "double" in a record's schema.
    "float": "float", "double": "double", "float32": "float", "float64": "double", "boolean": "boolean", "string": "string", "bytes": "binary",
}
# Logical types with no column type of their own: what they are stored as (e.g. io.debezium.time.MicroTime,
# io.debezium.data.Uuid, Json, Xml, Enum) follows their base type; these are refused with a reason.
_REFUSED: dict[str, str] = {
    "io.debezium.data.VariableScaleDecimal": "a numeric without a fixed scale (Debezium's VariableScaleDecimal) "
    "has no Iceberg decimal type; declare the column in spec.schema as decimal(p,s), or give the PostgreSQL "
    "column a precision and scale",
}


def iceberg_type_name(field: Mapping[str, Any]) -> tuple[str | None, str]:
    """(spec type name, "") of a Connect field schema, or (None, why it has none)."""
    name, base = field.get("name"), field.get("type")
    if name == CONNECT_DECIMAL:
        given = field.get("parameters")
        parameters: Mapping[str, Any] = given if isinstance(given, dict) else {}
        try:
            scale = int(parameters["scale"])
            precision = int(parameters.get("connect.decimal.precision", MAX_DECIMAL_PRECISION))
        except (KeyError, TypeError, ValueError):
            return None, "a Connect Decimal without a scale parameter"
        if not 0 <= scale <= precision <= MAX_DECIMAL_PRECISION:
            return None, f"decimal({precision},{scale}) is beyond Iceberg's decimal(38,s)"
        return f"decimal({precision},{scale})", ""
    if isinstance(name, str) and name in _REFUSED:
        return None, _REFUSED[name]
    if isinstance(name, str) and name in _LOGICAL_TYPES:
        return _LOGICAL_TYPES[name], ""
    if base == "array" and isinstance(items := field.get("items"), dict):
        element, why = iceberg_type_name(items)
        if element is None:
            return None, f"an array whose elements have no column type here ({why})"
        return f"array<{element}>", ""
    if base == "map" and isinstance(keys := field.get("keys"), dict) and isinstance(values := field.get("values"), dict):
        key, why = iceberg_type_name(keys)
        if key is None or not is_primitive(key):
            return None, f"a map whose keys have no primitive column type here ({why or key})"
        value, why = iceberg_type_name(values)
        if value is None:
            return None, f"a map whose values have no column type here ({why})"
        return f"map<{key}, {value}>", ""
    if base == "struct" and isinstance(fields := field.get("fields"), list):
        return _struct_type_name(fields)
    if isinstance(base, str) and base in _BASE_TYPES:
        return _BASE_TYPES[base], ""
    return None, f"Connect type {base!r}{f' ({name})' if name else ''} has no Iceberg column type here"


def _struct_type_name(fields: list[Any]) -> tuple[str | None, str]:
    """``struct<…>`` of a Connect struct's fields (optional unless ``"optional": false``), or (None, why)."""
    parts = []
    for nested in fields:
        name = nested.get("field") if isinstance(nested, dict) else None
        if not isinstance(name, str) or not name or "." in name or "`" in name:
            return None, f"a struct field named {name!r} (a field name is text without . or `)"
        type_name, why = iceberg_type_name(nested)
        if type_name is None:
            return None, f"struct field {name!r}: {why}"
        parts.append(str(StructField(name, parse_type(type_name), nested.get("optional") is False)))
    if not parts:
        return None, "a struct without fields"
    return f"struct<{', '.join(parts)}>", ""


def sends_text(field: Mapping[str, Any]) -> bool:
    """The field's values (an array's elements) are JSON text: a Connect ``string``, whatever its logical type."""
    items = field.get("items")
    return sends_text(items) if field.get("type") == "array" and isinstance(items, dict) else field.get("type") == "string"
