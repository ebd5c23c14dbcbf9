"""JSON Schemas as spec column types (docs/formats.md, "JSON Schema"): an object schema's properties become the
table's columns.

``object`` with ``properties`` is a struct (a property in ``required`` is not null), an ``object`` with only
``additionalProperties`` a ``map<string, V>``, ``array`` an array of its ``items``; ``integer`` is ``long``
(``int`` where Kafka Connect's ``connect.type`` says int8/16/32), ``number`` ``double`` (``float`` for
``float32``), ``string`` with ``format: date`` a ``date``, ``date-time`` a ``timestamptz``, base64
(``contentEncoding``, or ``connect.type: bytes``) ``binary``; a ``null`` member of ``type``, ``oneOf`` or
``anyOf`` makes it optional; ``$ref`` resolves within the schema (``#/definitions/…``, ``#/$defs/…``). A
recursive reference, an unbounded union or a schema without a type has no column type: :class:`JsonSchemaTypeError`
names the property.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from icebergsync.types.grammar import ArrayOf, MapOf, Primitive, SpecType, StructField, StructOf

_CONNECT_INTEGERS = {"int8": "int", "int16": "int", "int32": "int", "int64": "long"}


class JsonSchemaTypeError(ValueError):
    """A JSON Schema with no spec column type; the message names the property's path and why."""


def object_columns(schema: Any) -> list[tuple[str, SpecType, bool]]:
    """The columns of a top-level object schema: (name, type, required), in the order of its properties."""
    converted, _ = _JsonSchemaTypes(schema).convert(schema, "", frozenset())
    if not isinstance(converted, StructOf):
        raise JsonSchemaTypeError("the value schema is not an object with properties (a table's rows are objects)")
    return [(field.name, field.type, field.required) for field in converted.fields]


class _JsonSchemaTypes:
    def __init__(self, root: Any) -> None:
        self.root = root

    def resolve(self, reference: str, path: str) -> Any:
        if not reference.startswith("#/"):
            raise JsonSchemaTypeError(f"{path or 'the value'}: reference {reference!r} is outside the schema")
        target = self.root
        for part in reference[2:].split("/"):
            part = part.replace("~1", "/").replace("~0", "~")
            if not isinstance(target, Mapping) or part not in target:
                raise JsonSchemaTypeError(f"{path or 'the value'}: reference {reference!r} names nothing")
            target = target[part]
        return target

    def convert(self, schema: Any, path: str, seen: frozenset[str]) -> tuple[SpecType, bool]:
        """(the type, whether a value may be null) of ``schema`` at ``path``."""
        where = path or "the value"
        if not isinstance(schema, Mapping):
            raise JsonSchemaTypeError(f"{where}: {schema!r} is not a schema")
        if "$ref" in schema:
            reference = str(schema["$ref"])
            if reference in seen:
                raise JsonSchemaTypeError(f"{where}: {reference} refers to itself (a recursive schema has no "
                                          "column type)")
            return self.convert(self.resolve(reference, path), path, seen | {reference})
        for combinator in ("oneOf", "anyOf"):
            if combinator in schema:
                members = [m for m in schema[combinator] if not (isinstance(m, Mapping) and m.get("type") == "null")]
                if len(members) != 1:
                    raise JsonSchemaTypeError(f"{where}: {combinator} of {len(members)} non-null schemas has no "
                                              "column type (only a schema or null: optional)")
                member, _ = self.convert(members[0], path, seen)
                return member, len(members) != len(schema[combinator])
        kinds = schema.get("type")
        if isinstance(kinds, list):
            others = [kind for kind in kinds if kind != "null"]
            if len(others) != 1:
                raise JsonSchemaTypeError(f"{where}: a type of {others} has no column type")
            converted, _ = self.convert({**schema, "type": others[0]}, path, seen)
            return converted, len(others) != len(kinds)
        if "enum" in schema and kinds in (None, "string"):
            return Primitive("string"), False
        return self.typed(schema, kinds, path, seen), False

    def typed(self, schema: Mapping[str, Any], kind: Any, path: str, seen: frozenset[str]) -> SpecType:
        connect = schema.get("connect.type")
        if kind == "object":
            return self.object(schema, path, seen)
        if kind == "array":
            element, _ = self.convert(schema.get("items"), f"{path}[]", seen)
            return ArrayOf(element)
        if kind == "integer":
            return Primitive(_CONNECT_INTEGERS.get(str(connect), "long"))
        if kind == "number":
            return Primitive("float" if connect == "float32" else "double")
        if kind == "boolean":
            return Primitive("boolean")
        if kind == "string":
            if connect == "bytes" or schema.get("contentEncoding") == "base64":
                return Primitive("binary")
            return Primitive({"date": "date", "date-time": "timestamptz"}.get(str(schema.get("format")), "string"))
        raise JsonSchemaTypeError(f"{path or 'the value'}: a schema of type {kind!r} has no column type")

    def object(self, schema: Mapping[str, Any], path: str, seen: frozenset[str]) -> SpecType:
        properties = schema.get("properties")
        extra = schema.get("additionalProperties")
        if not properties and isinstance(extra, Mapping):
            value, _ = self.convert(extra, f"{path}{{}}", seen)
            return MapOf(Primitive("string"), value)
        if not isinstance(properties, Mapping) or not properties:
            raise JsonSchemaTypeError(f"{path or 'the value'}: an object without properties has no column type")
        required = set(schema.get("required") or [])
        fields = []
        for name, member in properties.items():
            if "." in name or "`" in name:
                raise JsonSchemaTypeError(f"{path}: a property named {name!r}")
            member_type, nullable = self.convert(member, f"{path}.{name}".lstrip("."), seen)
            fields.append(StructField(name, member_type, name in required and not nullable))
        return StructOf(tuple(fields))
