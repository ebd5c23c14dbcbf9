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
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from spark_app.decoding.arrow_decode import decode_json_values
from spark_app.decoding.deadletter import ERROR_COLUMN, POSITION_COLUMN, RAW_COLUMN, encode_position
from spark_app.decoding.registry.avro_reader import avro_reader
from spark_app.decoding.registry.avro_types import AvroTypeError, record_columns
from spark_app.decoding.registry.client import RegistrySettings, registered_schema
from spark_app.decoding.registry.json_schema_types import JsonSchemaTypeError, object_columns
from spark_app.decoding.registry.protobuf_types import (
    ProtobufTypeError,
    file_descriptor,
    message_at,
    message_columns,
    message_reader,
)
from spark_app.decoding.schema_drift.drift import SchemaDrift, SentField, observe_fields

EMPTY_RECORD = "empty record (null value)"
NOT_WIRE_FORMAT = "not in the Confluent wire format (magic byte 0, then a 4-byte schema id)"
_REQUIRED = b"icebergsync.required"
_CONTROL = [pa.field(ERROR_COLUMN, pa.string()), pa.field(RAW_COLUMN, pa.string()),
            pa.field(POSITION_COLUMN, pa.string())]
SCHEMA_TYPES = {"avro": "AVRO", "protobuf": "PROTOBUF", "jsonschema": "JSON"}  # the registry's type of each format


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
    """One writer schema (for Protobuf, one message of it), as this call decodes its records: how a payload is read
    into a row (None: a JSON document, which the JSON decoder reads), or the reason each record of it is a dead
    letter."""

    read: Callable[[bytes], Any] | None = None
    refusal: str | None = None


def decode_registry_values(values: pa.Array | pa.ChunkedArray, schema: pa.Schema, table: TableColumns,
                           registry: RegistrySettings, kafka_format: str, positions: Callable[[int], dict[str, Any]],
                           drift: SchemaDrift | None) -> pa.Table:
    """Decode Kafka values in the Confluent wire format (``kafka_format``: avro, protobuf or jsonschema) into
    ``schema``'s columns plus the control columns (a dead letter's reason, raw payload and position), one row per
    value in order; the writer schemas' drift is merged into ``drift``."""
    schema_type = SCHEMA_TYPES[kafka_format]
    raws = values.to_pylist()
    writers: dict[tuple[int, tuple[int, ...]], _Writer] = {}
    rows: list[dict[str, Any] | None] = []
    errors: list[str | None] = []
    documents: list[tuple[int, int]] = []  # (record, payload offset): JSON documents for the JSON decoder
    for index, raw in enumerate(raws):
        row, error, offset = None, None, 0
        header = _header(raw, schema_type)
        if isinstance(header, str):
            error = header
        else:
            key, offset = header
            writer = writers.get(key)
            if writer is None:
                writer = writers[key] = _writer(key, schema_type, table, registry, drift)
            if writer.refusal is not None:
                error = writer.refusal
            elif writer.read is None:
                documents.append((index, offset))
            else:
                row, error = _read(raw[offset:], key[0], writer.read)
        rows.append(row)
        errors.append(error)
    decoded = _assemble(schema, rows, errors, raws, positions, skip={index for index, _ in documents})
    if not documents:
        return decoded
    read = decode_json_values(pa.array([(raws[index] or b"")[offset:] for index, offset in documents], pa.binary()),
                              schema, lambda k: positions(documents[k][0]))
    order = list(range(len(raws)))
    for k, (index, _) in enumerate(documents):
        order[index] = len(raws) + k
    return pa.concat_tables([decoded, read.cast(decoded.schema)]).take(pa.array(order, pa.int64()))


def _header(raw: bytes | None, schema_type: str) -> tuple[tuple[int, tuple[int, ...]], int] | str:
    """((schema id, Protobuf message indexes), where the datum starts) of a record, or why it is a dead letter."""
    if raw is None:
        return EMPTY_RECORD
    if len(raw) < 5 or raw[0] != 0:
        return NOT_WIRE_FORMAT
    schema_id = int.from_bytes(raw[1:5], "big")
    if schema_type != "PROTOBUF":
        return (schema_id, ()), 5
    indexes, offset = _message_indexes(raw, 5)
    return ((schema_id, indexes), offset) if indexes is not None else NOT_WIRE_FORMAT


def _message_indexes(raw: bytes, offset: int) -> tuple[tuple[int, ...] | None, int]:
    """Protobuf's message indexes after the schema id: a count, then the indexes, zigzag varints (``0``: ``[0]``)."""
    values: list[int] = []
    count = None
    while count is None or len(values) < count:
        shift = number = 0
        while True:
            if offset >= len(raw) or shift > 63:
                return None, offset
            byte = raw[offset]
            offset += 1
            number |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                break
        decoded = (number >> 1) ^ -(number & 1)
        if count is None:
            if decoded == 0:
                return (0,), offset
            if decoded < 0:
                return None, offset
            count = decoded
        else:
            values.append(decoded)
    return tuple(values), offset


def _read(payload: bytes, schema_id: int, read: Callable[[bytes], Any]) -> tuple[dict[str, Any] | None, str | None]:
    """A record's row (None and why, when its bytes are not a datum of its schema)."""
    try:
        datum = read(payload)
    except Exception as error:  # the readers' errors: the bytes are not a datum of the schema
        return None, f"bytes are not a datum of schema id {schema_id} ({error})"
    if not isinstance(datum, dict):
        return None, f"schema id {schema_id} is not a record schema"
    return datum, None


def _writer(key: tuple[int, tuple[int, ...]], schema_type: str, table: TableColumns, registry: RegistrySettings,
            drift: SchemaDrift | None) -> _Writer:
    """How the records of a schema id (and Protobuf message) are decoded: its schema parsed and compared with the
    table's columns."""
    schema_id, indexes = key
    registered = registered_schema(registry, schema_id, serialized=schema_type == "PROTOBUF")
    if registered is None:
        return _Writer(refusal=f"schema id {schema_id} is not in the schema registry")
    if registered.schema_type.upper() != schema_type:
        return _Writer(refusal=f"schema id {schema_id} is a {registered.schema_type} schema, not {schema_type}")
    try:
        columns, read = _format(schema_type, registered.text, indexes)
    except (AvroTypeError, JsonSchemaTypeError, ProtobufTypeError) as error:
        if table.follow and drift is not None:
            drift.problems[f"schema id {schema_id}"] = f"schema id {schema_id} has no table columns: {error}"
        return _Writer(refusal=f"schema id {schema_id} has no table columns: {error}")
    sent = [SentField(name, str(spec_type)) for name, spec_type, _ in columns]
    asked = observe_fields(sent, table.types, table.required, table.key, whole_row=True)
    changes = bool(asked.adds or asked.widens or asked.problems)
    if changes and table.follow and drift is not None:
        drift.merge(asked)
    return _Writer(refusal=_refusal(schema_id, asked)) if changes else _Writer(read)


def _format(schema_type: str, text: str, indexes: tuple[int, ...]
            ) -> tuple[list[tuple[str, Any, bool]], Callable[[bytes], Any] | None]:
    """(the columns of a registered schema, how its payloads are read: None for JSON documents)."""
    if schema_type == "AVRO":
        schema = json.loads(text)
        return record_columns(schema), avro_reader(schema, text)
    if schema_type == "JSON":
        return object_columns(json.loads(text)), None
    message = message_at(file_descriptor(text), indexes)
    return message_columns(message), message_reader(message)


def _refusal(schema_id: int, asked: SchemaDrift) -> str:
    """Why a record of a schema the table cannot take as it is (and does not follow) is a dead letter."""
    parts = []
    if asked.adds:
        parts.append(f"field(s) {', '.join(sorted(asked.adds))} not in the table's columns")
    parts += [f"field {name} is {kind}, which the column cannot hold" for name, kind in sorted(asked.widens.items())]
    parts += [asked.problems[name] for name in sorted(asked.problems)]
    return f"schema id {schema_id}: " + "; ".join(parts)


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
