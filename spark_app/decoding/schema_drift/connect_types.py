"""Kafka Connect / Debezium field schemas as Iceberg column types (spec type names: ``long``, ``decimal(10,2)``).

One table, documented in docs/connectors.md: a logical type (the field schema's ``name``) decides
first, then the Connect base type; an ``array`` of a type with a column type is ``array<T>``. A field
without an Iceberg equivalent maps to None with the reason.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from icebergsync.spec import element_type

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
        if element is None or element_type(element) is not None:
            return None, f"an array whose elements have no column type here ({why or 'arrays of arrays'})"
        return f"array<{element}>", ""
    if isinstance(base, str) and base in _BASE_TYPES:
        return _BASE_TYPES[base], ""
    return None, f"Connect type {base!r}{f' ({name})' if name else ''} has no Iceberg column type here"


def sends_text(field: Mapping[str, Any]) -> bool:
    """The field's values (an array's elements) are JSON text: a Connect ``string``, whatever its logical type."""
    items = field.get("items")
    return sends_text(items) if field.get("type") == "array" and isinstance(items, dict) else field.get("type") == "string"
