"""Avro schemas as spec column types (docs/formats.md, "Avro"): a record's fields become the table's columns.

A field's type maps as Iceberg's Avro readers map it: ``null``-unions are optional, records are structs (to any
depth), arrays and maps (string keys) nest, enums are strings, fixed and bytes binary, and logical types take their
Iceberg type: ``decimal`` → ``decimal(p,s)``, ``date`` → ``date``, ``timestamp-*`` (an instant) → ``timestamptz``,
``local-timestamp-*`` → ``timestamp``, ``uuid`` → ``string``, ``time-millis`` → ``int`` (ms since midnight),
``time-micros`` → ``long`` (µs since midnight, as a Debezium ``MicroTime``), ``duration`` → ``struct<months: long,
days: long, milliseconds: long>``. A union of several non-null types and a recursive record have no column type:
:class:`AvroTypeError` names the field.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from icebergsync.types.grammar import (
    MAX_DECIMAL_PRECISION,
    ArrayOf,
    Decimal,
    MapOf,
    Primitive,
    SpecType,
    StructField,
    StructOf,
)

_PRIMITIVES = {"boolean": "boolean", "int": "int", "long": "long", "float": "float", "double": "double",
               "bytes": "binary", "string": "string"}
_LOGICAL = {"date": "date", "timestamp-millis": "timestamptz", "timestamp-micros": "timestamptz",
            "timestamp-nanos": "timestamptz", "local-timestamp-millis": "timestamp",
            "local-timestamp-micros": "timestamp", "local-timestamp-nanos": "timestamp", "uuid": "string",
            "time-millis": "int", "time-micros": "long"}
DURATION = StructOf((StructField("months", Primitive("long")), StructField("days", Primitive("long")),
                     StructField("milliseconds", Primitive("long"))))


class AvroTypeError(ValueError):
    """An Avro schema with no spec column type; the message names the field's path and why."""


def record_columns(schema: Any) -> list[tuple[str, SpecType, bool]]:
    """The columns of a top-level Avro record schema: (name, type, required), in field order."""
    if not isinstance(schema, Mapping) or schema.get("type") != "record":
        raise AvroTypeError("the value schema is not an Avro record (a table's rows are records)")
    struct = _AvroTypes().record(schema, "")
    return [(field.name, field.type, field.required) for field in struct.fields]


class _AvroTypes:
    """One schema's conversion: named types seen so far, and the records being converted (recursion)."""

    def __init__(self) -> None:
        self.named: dict[str, SpecType] = {}
        self.open: set[str] = set()

    def convert(self, schema: Any, path: str, namespace: str = "") -> tuple[SpecType, bool]:
        """(the type, required) of an Avro schema at ``path``."""
        if isinstance(schema, list):
            return self.union(schema, path, namespace)
        if isinstance(schema, str):
            if schema in _PRIMITIVES:
                return Primitive(_PRIMITIVES[schema]), True
            if schema == "null":
                raise AvroTypeError(f"{path or 'the value'}: a field that is always null has no column type")
            full = schema if "." in schema or not namespace else f"{namespace}.{schema}"
            for name in (full, schema):
                if name in self.open:
                    raise AvroTypeError(f"{path}: record {name} contains itself (a recursive schema has no "
                                        "column type)")
                if name in self.named:
                    return self.named[name], True
            raise AvroTypeError(f"{path}: unknown Avro type {schema!r}")
        if not isinstance(schema, Mapping):
            raise AvroTypeError(f"{path}: {schema!r} is not an Avro schema")
        logical = self.logical(schema, path)
        if logical is not None:
            return logical, True
        kind = schema.get("type")
        if kind == "record":
            return self.record(schema, path, namespace), True
        if kind == "enum":
            return self.define(schema, namespace, Primitive("string")), True
        if kind == "fixed":
            return self.define(schema, namespace, Primitive("binary")), True
        if kind == "array":
            element, _ = self.convert(schema.get("items"), f"{path}[]", namespace)
            return ArrayOf(element), True
        if kind == "map":
            value, _ = self.convert(schema.get("values"), f"{path}{{}}", namespace)
            return MapOf(Primitive("string"), value), True
        return self.convert(kind, path, namespace)  # {"type": "long"} and the like

    def logical(self, schema: Mapping[str, Any], path: str) -> SpecType | None:
        logical = schema.get("logicalType")
        if logical == "decimal" and schema.get("type") in ("bytes", "fixed"):
            precision, scale = schema.get("precision"), schema.get("scale", 0)
            if not isinstance(precision, int) or not isinstance(scale, int) or \
                    not 0 <= scale <= precision <= MAX_DECIMAL_PRECISION:
                raise AvroTypeError(f"{path}: decimal({precision},{scale}) is beyond Iceberg's decimal(38,s)")
            return Decimal(precision, scale)
        if logical == "duration" and schema.get("type") == "fixed" and schema.get("size") == 12:
            return DURATION
        if isinstance(logical, str) and logical in _LOGICAL:
            return Primitive(_LOGICAL[logical])
        return None  # an unknown logical type is its underlying type (the Avro specification)

    def union(self, members: Sequence[Any], path: str, namespace: str) -> tuple[SpecType, bool]:
        others = [member for member in members if member != "null"]
        if len(others) != 1:
            raise AvroTypeError(f"{path or 'the value'}: a union of {len(others)} non-null types has no column "
                                "type (only [\"null\", T] unions: optional T)")
        member, _ = self.convert(others[0], path, namespace)
        return member, len(others) == len(members)

    def record(self, schema: Mapping[str, Any], path: str, namespace: str = "") -> StructOf:
        name, space = self.full_name(schema, namespace)
        self.open.add(name)
        fields = []
        for field in schema.get("fields") or []:
            field_name = field.get("name") if isinstance(field, Mapping) else None
            if not isinstance(field_name, str) or "." in field_name or "`" in field_name:
                raise AvroTypeError(f"{path}: a field named {field_name!r}")
            field_type, required = self.convert(field.get("type"), f"{path}.{field_name}".lstrip("."), space)
            fields.append(StructField(field_name, field_type, required))
        self.open.discard(name)
        if not fields:
            raise AvroTypeError(f"{path or 'the value'}: record {name} has no fields")
        struct = StructOf(tuple(fields))
        self.named[name] = struct
        return struct

    def define(self, schema: Mapping[str, Any], namespace: str, spec_type: SpecType) -> SpecType:
        self.named[self.full_name(schema, namespace)[0]] = spec_type
        return spec_type

    @staticmethod
    def full_name(schema: Mapping[str, Any], namespace: str) -> tuple[str, str]:
        """(the named type's full name, the namespace its fields' names resolve in)."""
        name = str(schema.get("name", ""))
        if "." in name:
            return name, name.rsplit(".", 1)[0]
        space = str(schema.get("namespace", namespace) or "")
        return (f"{space}.{name}" if space else name), space
