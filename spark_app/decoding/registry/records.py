"""Records in the Confluent wire format decoded into the table's columns (docs/formats.md): Avro and JSON Schema.

A record is magic byte 0, its schema's id (4 bytes, big-endian), then the datum written with that schema (the
writer schema, fetched from the registry once per process: :mod:`.client`): Avro's binary encoding, or a JSON
document for JSON Schema. Each writer schema is compared with the table's columns once, by the rules of schema
drift (:func:`~spark_app.decoding.schema_drift.drift.observe_fields`): when the table follows the records' schema
(``schemaEvolution: evolve``) what the schema asks of the table becomes the trigger's drift (the job commits it and
stages the records again); otherwise a record whose schema the table cannot take is a dead letter saying why.
Records whose schema fits are read: Avro with fastavro, handed to Arrow as they are after a few logical types are
given the column's form (a time as its integer, a uuid as text, a duration as its three counts); JSON by the
strict JSON decoder (:func:`~spark_app.decoding.arrow_decode.decode_json_values`), its rules and reasons.

Dead letters: a null value, a value not in the wire format, a schema id the registry does not know or of another
format, bytes that are not a datum of their schema (or hold more), a schema with no column type, a required column
missing or null. The raw payload of a dead letter is its bytes in base64.
"""

from __future__ import annotations

import base64
import datetime
import io
import json
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from spark_app.decoding.arrow_decode import decode_json_values
from spark_app.decoding.deadletter import ERROR_COLUMN, POSITION_COLUMN, RAW_COLUMN, encode_position
from spark_app.decoding.registry.avro_types import AvroTypeError, record_columns
from spark_app.decoding.registry.client import RegistrySettings, registered_schema
from spark_app.decoding.registry.json_schema_types import JsonSchemaTypeError, object_columns
from spark_app.decoding.schema_drift.drift import SchemaDrift, SentField, observe_fields

EMPTY_RECORD = "empty record (null value)"
NOT_WIRE_FORMAT = "not in the Confluent wire format (magic byte 0, then a 4-byte schema id)"
_REQUIRED = b"icebergsync.required"
_CONTROL = [pa.field(ERROR_COLUMN, pa.string()), pa.field(RAW_COLUMN, pa.string()),
            pa.field(POSITION_COLUMN, pa.string())]
_NEEDS_NORMALIZING = ("time-millis", "time-micros", "uuid", "duration")
# The registry's schema type of each kafka format, and how its schema's columns are found.
SCHEMA_TYPES = {"avro": "AVRO", "jsonschema": "JSON"}
_COLUMNS: dict[str, Callable[[Any], list[tuple[str, Any, bool]]]] = {"AVRO": record_columns, "JSON": object_columns}


@dataclass(frozen=True)
class TableColumns:
    """The table's columns as a decoder of the records' schema compares them: name -> spec type, the required
    ones, the key, and whether the table follows the records' schema."""

    types: Mapping[str, str]
    required: frozenset[str]
    key: frozenset[str]
    follow: bool


@dataclass
class _Writer:
    """One writer schema, as this call decodes its records: for Avro fastavro's parsed schema and how its values are
    normalized (None for JSON: the JSON decoder reads them), or the reason every record of it is a dead letter."""

    parsed: Any = None
    normalize: Callable[[Any], Any] | None = None
    refusal: str | None = None


def decode_registry_values(values: pa.Array | pa.ChunkedArray, schema: pa.Schema, table: TableColumns,
                           registry: RegistrySettings, kafka_format: str, positions: Callable[[int], dict[str, Any]],
                           drift: SchemaDrift | None) -> pa.Table:
    """Decode Kafka values in the Confluent wire format (``kafka_format``: avro or jsonschema) into ``schema``'s
    columns plus the control columns (a dead letter's reason, raw payload and position), one row per value in
    order; the writer schemas' drift is merged into ``drift``."""
    raws = values.to_pylist()
    writers: dict[int, _Writer] = {}
    rows: list[dict[str, Any] | None] = []
    errors: list[str | None] = []
    documents: list[int] = []  # JSON Schema records to read with the JSON decoder
    for index, raw in enumerate(raws):
        writer, error = _writer_of(raw, writers, table, registry, SCHEMA_TYPES[kafka_format], drift)
        if writer is not None and writer.parsed is None:
            documents.append(index)
            rows.append(None)
            errors.append(None)
            continue
        row, error = _datum(raw, writer) if writer is not None else (None, error)
        rows.append(row)
        errors.append(error)
    decoded = _assemble(schema, rows, errors, raws, positions, skip=set(documents))
    if not documents:
        return decoded
    read = decode_json_values(pa.array([(raws[index] or b"")[5:] for index in documents], pa.binary()),
                              schema, lambda k: positions(documents[k]))
    order = list(range(len(raws)))
    for k, index in enumerate(documents):
        order[index] = len(raws) + k
    return pa.concat_tables([decoded, read.cast(decoded.schema)]).take(pa.array(order, pa.int64()))


def _writer_of(raw: bytes | None, writers: dict[int, _Writer], table: TableColumns, registry: RegistrySettings,
               schema_type: str, drift: SchemaDrift | None) -> tuple[_Writer | None, str | None]:
    """(the writer schema of a record, None) or (None, why the record is a dead letter before its datum is read)."""
    if raw is None:
        return None, EMPTY_RECORD
    if len(raw) < 5 or raw[0] != 0:
        return None, NOT_WIRE_FORMAT
    schema_id = int.from_bytes(raw[1:5], "big")
    writer = writers.get(schema_id)
    if writer is None:
        writer = writers[schema_id] = _writer(schema_id, schema_type, table, registry, drift)
    return (None, writer.refusal) if writer.refusal is not None else (writer, None)


def _datum(raw: bytes | None, writer: _Writer) -> tuple[dict[str, Any] | None, str | None]:
    """An Avro record's row (None and why, when its bytes are not a datum of its schema)."""
    from fastavro import schemaless_reader

    assert raw is not None
    schema_id = int.from_bytes(raw[1:5], "big")
    stream = io.BytesIO(raw)
    stream.seek(5)
    try:
        datum = schemaless_reader(stream, writer.parsed, None)
    except Exception as error:  # fastavro raises what its readers meet: EOFError, ValueError, UnicodeDecodeError...
        return None, f"bytes are not a datum of schema id {schema_id} ({type(error).__name__}: {error})"
    if stream.tell() != len(raw):
        return None, f"bytes are not a datum of schema id {schema_id} ({len(raw) - stream.tell()} byte(s) after it)"
    if not isinstance(datum, dict):
        return None, f"schema id {schema_id} is not a record schema"
    return (writer.normalize(datum) if writer.normalize is not None else datum), None


def _writer(schema_id: int, schema_type: str, table: TableColumns, registry: RegistrySettings,
            drift: SchemaDrift | None) -> _Writer:
    """How the records of ``schema_id`` are decoded: its schema parsed and compared with the table's columns."""
    from fastavro import parse_schema

    registered = registered_schema(registry, schema_id)
    if registered is None:
        return _Writer(refusal=f"schema id {schema_id} is not in the schema registry")
    if registered.schema_type.upper() != schema_type:
        return _Writer(refusal=f"schema id {schema_id} is a {registered.schema_type} schema, not {schema_type}")
    schema = json.loads(registered.text)
    try:
        sent = [SentField(name, str(spec_type)) for name, spec_type, _ in _COLUMNS[schema_type](schema)]
    except (AvroTypeError, JsonSchemaTypeError) as error:
        if table.follow and drift is not None:
            drift.problems[f"schema id {schema_id}"] = f"schema id {schema_id} has no table columns: {error}"
        return _Writer(refusal=f"schema id {schema_id} has no table columns: {error}")
    asked = observe_fields(sent, table.types, table.required, table.key, whole_row=True)
    changes = bool(asked.adds or asked.widens or asked.problems)
    if changes and table.follow and drift is not None:
        drift.merge(asked)
    if changes:
        return _Writer(refusal=_refusal(schema_id, asked))
    if schema_type != "AVRO":
        return _Writer()
    return _Writer(parse_schema(schema), _normalizer(schema) if any(
        word in registered.text for word in _NEEDS_NORMALIZING) else None)


def _refusal(schema_id: int, asked: SchemaDrift) -> str:
    """Why a record of a schema the table cannot take as it is (and does not follow) is a dead letter."""
    parts = []
    if asked.adds:
        parts.append(f"field(s) {', '.join(sorted(asked.adds))} not in the table's columns")
    parts += [f"field {name} is {kind}, which the column cannot hold" for name, kind in sorted(asked.widens.items())]
    parts += [asked.problems[name] for name in sorted(asked.problems)]
    return f"schema id {schema_id}: " + "; ".join(parts)


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


def _assemble(schema: pa.Schema, rows: list[dict[str, Any] | None], errors: list[str | None],
              raws: list[bytes | None], positions: Callable[[int], dict[str, Any]], skip: set[int]) -> pa.Table:
    """The decoded rows in ``schema``'s columns (a dead letter's null), a required column's null made a dead letter,
    then the control columns (``skip``: rows read elsewhere, placeholders here)."""
    required = [field.name for field in schema if field.metadata and field.metadata.get(_REQUIRED) == b"true"]
    for index, row in enumerate(rows):
        if row is not None and index not in skip:
            missing = next((name for name in required if row.get(name) is None), None)
            if missing is not None:
                rows[index], errors[index] = None, f"required field {missing} is missing or null"
    columns = pa.schema([pa.field(field.name, field.type, nullable=True) for field in schema])
    table = _rows_table(columns, rows, errors)
    raw_texts = [base64.b64encode(raw).decode("ascii") if error is not None and raw is not None else None
                 for raw, error in zip(raws, errors, strict=True)]
    places = [encode_position(positions(index)) if error is not None else None for index, error in enumerate(errors)]
    return pa.Table.from_arrays([*table.columns, pa.array(errors, pa.string()), pa.array(raw_texts, pa.string()),
                                 pa.array(places, pa.string())], schema=pa.schema([*columns, *_CONTROL]))


def _rows_table(columns: pa.Schema, rows: list[dict[str, Any] | None], errors: list[str | None]) -> pa.Table:
    """The rows as Arrow; a row Arrow refuses (a value beyond its column) becomes a dead letter saying so."""
    try:
        return pa.Table.from_pylist([row or {} for row in rows], schema=columns)
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError) as error:
        if len(rows) == 1:
            errors[0] = f"a value does not fit its column ({error})"
            return pa.Table.from_pylist([{}], schema=columns)
    middle = len(rows) // 2
    first = _rows_table(columns, rows[:middle], errors_first := errors[:middle])
    second = _rows_table(columns, rows[middle:], errors_second := errors[middle:])
    errors[:] = errors_first + errors_second
    return pa.concat_tables([first, second])
