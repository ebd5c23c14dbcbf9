"""Avro data read with fastavro into rows in the columns' form (docs/formats.md, "Avro with a Schema Registry")."""

from __future__ import annotations

import datetime
import io
import uuid
from collections.abc import Callable
from typing import Any

_NEEDS_NORMALIZING = ("time-millis", "time-micros", "uuid", "duration")


def avro_reader(schema: Any, text: str) -> Callable[[bytes], Any]:
    """Read one datum of ``schema`` (its registered ``text``) from a record's payload: fastavro's value with a few
    logical types given the column's form (a time as its integer, a uuid as text, a duration as its three
    counts); ``ValueError`` when the bytes are not exactly one datum of it."""
    from fastavro import parse_schema, schemaless_reader

    parsed = parse_schema(schema)
    normalize = _normalizer(schema) if any(word in text for word in _NEEDS_NORMALIZING) else None

    def read(payload: bytes) -> Any:
        stream = io.BytesIO(payload)
        try:
            datum = schemaless_reader(stream, parsed, None)
        except Exception as error:  # what fastavro's readers meet: EOFError, ValueError, UnicodeDecodeError...
            raise ValueError(f"{type(error).__name__}: {error}") from error
        if stream.tell() != len(payload):
            raise ValueError(f"{len(payload) - stream.tell()} byte(s) after it")
        return normalize(datum) if normalize is not None else datum

    return read


def _normalizer(schema: Any) -> Callable[[Any], Any]:
    """The function giving fastavro's values of ``schema`` the columns' form: times as integers, uuids as text,
    durations as their counts (records, arrays, maps and unions walked)."""
    named: dict[str, Any] = {}

    def convert(value: Any, node: Any) -> Any:
        if value is None:
            return None
        if isinstance(node, str):
            node = named.get(node, node)
        if isinstance(node, list):  # a union: the member whose Python type the value has
            members = [member for member in node if member != "null"]
            return convert(value, members[0]) if len(members) == 1 else value
        if not isinstance(node, dict):
            return value
        logical, kind = node.get("logicalType"), node.get("type")
        if logical in ("time-millis", "time-micros") and isinstance(value, datetime.time):
            micros = ((value.hour * 60 + value.minute) * 60 + value.second) * 1_000_000 + value.microsecond
            return micros // 1000 if logical == "time-millis" else micros
        if logical == "uuid" and isinstance(value, uuid.UUID):
            return str(value)
        if logical == "duration" and isinstance(value, bytes) and len(value) == 12:
            months, days, millis = (int.from_bytes(value[i:i + 4], "little") for i in (0, 4, 8))
            return {"months": months, "days": days, "milliseconds": millis}
        if kind == "record":
            named[str(node.get("name"))] = node
            return {field["name"]: convert(value.get(field["name"]), field["type"]) for field in node["fields"]}
        if kind == "array":
            return [convert(item, node["items"]) for item in value]
        if kind == "map":
            return {key: convert(item, node["values"]) for key, item in value.items()}
        return convert(value, kind) if isinstance(kind, dict | list) else value

    return lambda datum: convert(datum, schema)
