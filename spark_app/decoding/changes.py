"""Change data capture, below the job loop: decoding change records and collapsing them per key.

Pure Arrow and Python (no Spark), run in the tasks (docs/dataplane.md):

* :func:`decode_changes` turns raw change records (Debezium change events, or whole rows in the
  ``upsert`` format) into a *decoded batch* of changes: the declared columns, ``_isync_op`` (0 upsert,
  1 delete), ``_isync_order`` (the change's place in source order) and the dead-letter control
  columns of :mod:`spark_app.decoding.deadletter`. A record that cannot be applied becomes a dead letter with
  its reason and position; nothing is dropped silently (a Debezium tombstone, a JSON ``null``, is not
  a change and yields no row).
* :func:`collapse` reduces the changes of one trigger (of one key bucket) to what is committed: per
  key the change with the highest order wins; the winning upserts are the rows to insert, and every
  key the changes touch is a key to delete (an equality delete, written by :mod:`spark_app.staging.equality_deletes`).

Decoding is strict by the same rules, and with the same reasons, as the append decoders
(:mod:`spark_app.decoding.json_values`, read exactly: see its ``converter``): a key twice, a field the table lacks (unless
the record's Connect schema says what it is and the table follows the source's schema: then the drift is
collected, :mod:`spark_app.decoding.schema_drift`), a number into a string column, a decimal that would round, a timestamp that would lose
precision: each is a dead letter. Numeric dates and timestamps follow Debezium's encodings where they
are unambiguous (docs/connectors.md, "Keyed tables"): a number in a ``date`` column is epoch days; a
number in a ``timestamp``/``timestamptz`` column needs the record's Kafka Connect schema (the
``{"schema": ..., "payload": ...}`` form) to say whether it counts milliseconds
(``io.debezium.time.Timestamp``, ``org.apache.kafka.connect.data.Timestamp``), microseconds
(``io.debezium.time.MicroTimestamp``) or nanoseconds (``io.debezium.time.NanoTimestamp``). The schema
also gives the scale of a Connect ``Decimal`` (base64 of the unscaled bytes,
``decimal.handling.mode=precise``) and marks Debezium's ``IsoTimestamp`` (a local date-time written
with ``Z``, ``time.precision.mode=isostring``).

A value Debezium did not send (an unchanged TOASTed column: ``__debezium_unavailable_value``, or its
base64 in a bytes column) means "unchanged": the row is decoded with that column null and named in
``_isync_carry``, and keeps its raw record and position. :func:`collapse` carries the value from an
earlier change of the key in the trigger; what it cannot is carried from the table's live row at
commit time (:mod:`spark_app.commit.carry`), or becomes a dead letter: the placeholder is never stored.
A Debezium ``transaction`` block (``provide.transaction.metadata=true``) does not change the row; with
``spec.changes.transactions`` the transaction id of each record is handed to the caller (``transactions``), which
aligns the trigger's end with the source's transactions (:mod:`spark_app.sources.transactions`).
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from decimal import Decimal
from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from icebergsync.spec import Column as SpecColumn
from icebergsync.spec import element_type
from spark_app.decoding.deadletter import (
    CONTROL_COLUMNS,
    ERROR_COLUMN,
    POSITION_COLUMN,
    RAW_COLUMN,
    encode_position,
)
from spark_app.decoding.float32 import float32_of
from spark_app.decoding.json_values import (
    JSON_TEXT,
    NOT_UTF8,
    BadJson,
    Refused,
    ValueType,
    base64_bytes,
    convert_array,
    convert_map,
    convert_struct,
    converter,
    first_refusal,
    kind,
    loads,
    not_a,
    shown_json,
    value_type,
)
from spark_app.decoding.schema_drift.drift import SchemaDrift, observe
from spark_app.decoding.settings_seen import NOTHING_SEEN, SettingsSeen
from spark_app.decoding.source_positions import Position, source_position

OP_COLUMN = "_isync_op"
ORDER_COLUMN = "_isync_order"
CARRY_COLUMN = "_isync_carry"  # the columns of an upsert whose value Debezium did not send (null: none)
# The source event of a Debezium delete, or of a create missing values (a primary-key update's halves: same source)
MOVE_COLUMN = "_isync_move"
HAS_VALUES_COLUMN = "_isync_has_values"  # a moved key's values are the trigger's (else: its live row's)
VIA_COLUMN = "_isync_via"  # a moved key that was itself the new key of a primary-key update in the trigger: that one
CHANGE_COLUMNS = (OP_COLUMN, ORDER_COLUMN, CARRY_COLUMN, MOVE_COLUMN)
OP_UPSERT = 0
OP_DELETE = 1

FORMATS = ("debezium", "upsert")
DELETED_FIELD = "__deleted"

# Kafka Connect / Debezium logical type names of numeric dates and timestamps, and the factor that
# turns one unit of theirs into the column's unit (days for dates, microseconds for timestamps).
_DATE_TYPES = {"io.debezium.time.Date", "org.apache.kafka.connect.data.Date"}
_TIMESTAMP_UNITS = {
    "io.debezium.time.Timestamp": ("ms", 1000, 1),
    "org.apache.kafka.connect.data.Timestamp": ("ms", 1000, 1),
    "io.debezium.time.MicroTimestamp": ("µs", 1, 1),
    "io.debezium.time.NanoTimestamp": ("ns", 1, 1000),
}


# Debezium's placeholder for a value it did not read (an unchanged TOASTed column; its
# ``unavailable.value.placeholder`` default), as text and, in a bytea column, as its bytes in base64 or hex.
UNAVAILABLE = "__debezium_unavailable_value"
_UNAVAILABLE_VALUES = frozenset({UNAVAILABLE, base64.b64encode(UNAVAILABLE.encode()).decode(),
                                 UNAVAILABLE.encode().hex()})  # bytes as text: binary.handling.mode=base64 | hex
# An unchanged TOASTed array: a one-element list of the placeholder (text, bytes as base64 or hex; in a uuid array
# Java's UUID.nameUUIDFromBytes of its bytes, an MD5 version-3 UUID), or, in an integer or date array, the
# placeholder's bytes as numbers (Debezium's UnchangedToastedPlaceholder).
_UNAVAILABLE_UUID = str(uuid.UUID(bytes=hashlib.md5(UNAVAILABLE.encode(), usedforsecurity=False).digest(), version=3))
_UNAVAILABLE_ARRAYS = (*([value] for value in sorted(_UNAVAILABLE_VALUES)), [_UNAVAILABLE_UUID],
                       list(UNAVAILABLE.encode()))
_CONNECT_DECIMAL = "org.apache.kafka.connect.data.Decimal"
_VARIABLE_SCALE_DECIMAL = "io.debezium.data.VariableScaleDecimal"
_ISO_TIMESTAMP = "io.debezium.time.IsoTimestamp"


class Logical(NamedTuple):
    """A field's Kafka Connect logical type, from the record's schema: its name and parameters; for a struct or
    map field (``node``) its Connect schema, which holds its fields' and values' own."""

    name: str
    parameters: dict[str, Any]
    node: Mapping[str, Any] | None = None


@dataclass
class Truncates:
    """Truncates while decoding: the source position of the one the table applied, and the newest seen beyond it."""

    applied: Position | None = None
    seen: Position | None = None

    def see(self, position: Position) -> None:
        if self.seen is None or position > self.seen:
            self.seen = position


_FLOAT32_TYPES = frozenset({"float", "float32"})  # Connect's FLOAT32, as Kafka's JsonConverter names it and not
_FLOAT32_LOGICAL = Logical("float32", {})  # a float32 field's marker in place of a logical type (_logical_types)


class _Bad(ValueError):
    """A record that cannot be applied; the message is the dead letter's reason."""


# -- values: the plain JSON rules (spark_app/decoding/json_values.py) with Connect's logical types on top ----------


Converter = Callable[[Any, "Logical | None"], Any]


def _unscaled(text: Any, scale: Any) -> Decimal:
    """A Connect ``Decimal``: base64 of the big-endian two's-complement unscaled value, and its scale."""
    data = base64_bytes(text) if isinstance(text, str) else None
    try:
        if data is not None:
            return Decimal(f"{int.from_bytes(data, 'big', signed=True)}E{-int(scale)}")  # exact (scaleb rounds to 28)
    except (ValueError, TypeError):
        pass
    raise Refused(f"value {shown_json(text)} is not a Connect Decimal (base64 of the unscaled value, scale "
                  f"{shown_json(scale)})")


def _decimal(vtype: ValueType, plain: Callable[[Any], Any]) -> Converter:
    """Debezium's ``VariableScaleDecimal`` (``{"scale": s, "value": base64 of the unscaled value}``, with or without
    the schema) and a Connect ``Decimal`` (base64 text, the scale in the schema) are read as their numbers."""
    def convert(value: Any, logical: Logical | None) -> Any:
        if isinstance(value, dict) and (logical is None or logical.name == _VARIABLE_SCALE_DECIMAL):
            if set(value) != {"scale", "value"} or type(value["scale"]) is not int:
                raise not_a(vtype, value)
            value = _unscaled(value["value"], value["scale"])
        elif isinstance(value, str) and logical is not None and logical.name == _CONNECT_DECIMAL:
            value = _unscaled(value, logical.parameters.get("scale"))
        return plain(value)
    return convert


def _floating(vtype: ValueType, plain: Callable[[Any], Any]) -> Converter:
    """A Connect ``FLOAT32`` field's number is a float32's text (Java's), read as that float32 also into a double."""
    def convert(value: Any, logical: Logical | None) -> Any:
        if logical is _FLOAT32_LOGICAL and isinstance(value, int | Decimal) and not isinstance(value, bool):
            real = float32_of(value)
            if real is None:
                raise not_a(vtype, value)
            return real
        return plain(value)
    return convert


def _date(vtype: ValueType, plain: Callable[[Any], Any]) -> Converter:
    """A number is epoch days (Debezium's ``Date``, Connect's ``Date``); ``2024-03-01Z`` is Debezium's ``IsoDate``."""
    def convert(value: Any, logical: Logical | None) -> Any:
        if type(value) is int and (logical is None or logical.name in _DATE_TYPES):
            if -719162 <= value <= 2932896:  # 0001-01-01 … 9999-12-31
                return value
            raise not_a(vtype, value)
        if isinstance(value, str) and value.endswith("Z"):
            try:
                return plain(value[:-1])
            except Refused:
                raise not_a(vtype, value) from None
        return plain(value)
    return convert


def _timestamp(vtype: ValueType, plain: Callable[[Any], Any]) -> Converter:
    """A number counts the unit its Connect logical type names (ambiguous without one); Debezium's ``IsoTimestamp``
    is the source's local date-time written with ``Z``: in a ``timestamp`` column the Z is not an offset (in a
    ``timestamptz`` column it is: the wall time as UTC, as the same text without the schema is read)."""
    def convert(value: Any, logical: Logical | None) -> Any:
        if isinstance(value, str):
            local = logical is not None and logical.name == _ISO_TIMESTAMP and vtype.kind == "timestamp"
            return plain(value[:-1] if local and value.endswith("Z") else value)
        if type(value) is not int:
            return plain(value)
        unit = _TIMESTAMP_UNITS.get(logical.name) if logical is not None else None
        if unit is None:
            raise Refused(f"numeric value {value} in a {vtype.label} column is ambiguous without the record's schema "
                          "(epoch milliseconds or microseconds?): send ISO-8601 text, or records with their Kafka "
                          "Connect schema (value.converter.schemas.enable=true)")
        unit_name, multiply, divide = unit
        if value % divide:
            raise Refused(f"value {value} (in {unit_name}) has more than microsecond precision")
        micros = value * multiply // divide
        if -62135596800000000 <= micros <= 253402300799999999:
            return micros
        raise not_a(vtype, value)
    return convert


_LOGICAL_READINGS: dict[str, Callable[[ValueType, Callable[[Any], Any]], Converter]] = {
    "decimal": _decimal, "float": _floating, "double": _floating, "date": _date, "timestamp": _timestamp,
    "timestamptz": _timestamp,
}


def _reading(vtype: ValueType) -> Converter:
    """How a change record's (non-null) value is read into a column of ``vtype``, given its field's Connect logical
    type (an array's is its items'); :class:`Refused` when it does not fit exactly."""
    if vtype.kind == "struct":
        fields = [(field.name, _reading(field.type)) for field in vtype.fields]

        def struct(value: Any, logical: Logical | None) -> Any:
            inner = _logical_types(logical.node) if logical is not None and logical.node is not None else {}
            return convert_struct(vtype, value, [_given(reading, inner.get(name)) for name, reading in fields])
        return struct
    if vtype.kind == "map":
        assert vtype.key is not None and vtype.element is not None
        key, item = _reading(vtype.key), _reading(vtype.element)

        def entries(value: Any, logical: Logical | None) -> Any:
            node = logical.node if logical is not None and logical.node is not None else {}
            keys, values = _logical_of(node.get("keys")), _logical_of(node.get("values"))
            return convert_map(vtype, value, _given(key, keys), _given(item, values))
        return entries
    if vtype.element is not None:
        element = _reading(vtype.element)
        return lambda value, logical: convert_array(vtype, value, lambda item: element(item, logical))
    plain = converter(vtype, exact=True)
    logical_reading = _LOGICAL_READINGS.get(vtype.kind)
    return logical_reading(vtype, plain) if logical_reading is not None else lambda value, _: plain(value)


def _given(reading: Converter, logical: Logical | None) -> Callable[[Any], Any]:
    """``reading`` of values whose Connect logical type is ``logical``."""
    return lambda value: reading(value, logical)


def _reading_of(column: SpecColumn) -> Converter:
    arrow = arrow_type(column.type)
    return _reading(replace(JSON_TEXT, arrow=arrow) if column.json_text else value_type(arrow))


def decode_value(column: SpecColumn, value: Any, logical: Logical | None) -> Any:
    """One parsed JSON value (:func:`~spark_app.decoding.json_values.loads`'s) decoded into ``column`` as a record's
    value is (a date as epoch days, a timestamp as µs, a decimal at the column's scale); ``ValueError`` (the dead
    letter's reason) when it does not fit exactly. Used for the defaults of a source's columns."""
    try:
        return _reading_of(column)(value, logical)
    except Refused as refused:
        raise ValueError(refused.reason(column.name)) from None


def arrow_type(type_name: str) -> pa.DataType:
    """The Arrow type of a spec column in decoded batches (that of the table's Arrow schema)."""
    from pyiceberg.io.pyarrow import schema_to_pyarrow

    from icebergsync.schema import iceberg_schema

    return schema_to_pyarrow(iceberg_schema([SpecColumn(name="c", type=type_name)]), include_field_ids=False).field("c").type


def changes_schema(columns: Sequence[SpecColumn]) -> pa.Schema:
    """The schema of a decoded batch of changes: declared columns (nullable), op, order, control columns."""
    return pa.schema([
        *[pa.field(column.name, arrow_type(column.type)) for column in columns],
        pa.field(OP_COLUMN, pa.int8(), nullable=False),
        pa.field(ORDER_COLUMN, pa.int64(), nullable=False),
        pa.field(CARRY_COLUMN, pa.list_(pa.string())),
        pa.field(MOVE_COLUMN, pa.string()),
        *[pa.field(name, pa.string()) for name in CONTROL_COLUMNS],
    ])


# -- records --------------------------------------------------------------------------------------


class _Rows:
    """Decodes one JSON object into a row of the declared columns, strictly."""

    def __init__(self, columns: Sequence[SpecColumn], key: Sequence[str], drift: SchemaDrift | None = None,
                 truncated_at: Position | None = None, settings: SettingsSeen | None = None):
        self.columns = list(columns)
        self.settings = settings or NOTHING_SEEN  # counts the signs of Debezium settings the docs require, missing
        self.truncated_at = truncated_at  # events up to this source position are before a truncate already applied
        self.truncate: Position | None = None  # the newest truncate read beyond it
        self.applies_truncates = False  # the caller empties the table at a truncate (else it is a dead letter)
        self.drift = drift  # collects what records' Connect schemas ask of the table (None: not followed)
        self._observed: set[tuple[Any, ...]] = set()
        self._types = {column.name: column.type for column in columns}
        self._required = frozenset(column.name for column in columns if column.required)
        self.names = [column.name for column in columns]
        self.declared = set(self.names)
        self.converters = [(column.name, _reading_of(column)) for column in columns]
        self.required_positions = [index for index, column in enumerate(columns) if column.required]
        # Columns Debezium may not send (TOASTed in PostgreSQL), with whether each is an array.
        self.unavailable_positions = [(index, element_type(column.type) is not None) for index, column
                                      in enumerate(columns) if column.type in ("string", "binary")
                                      or element_type(column.type) is not None]
        self.key = list(key)
        # A key column not among ``columns`` is only read for drift (the columns of a table yet to be created).
        self.key_positions = [self.names.index(name) for name in key if name in self.names]
        self.unavailable: list[str] = []  # of the last row decoded with all its columns

    def row(self, obj: Any, where: str, logical: dict[str, Logical], key_only: bool = False) -> list[Any]:
        """The row's values in column order; with ``key_only`` only the key columns are decoded (a delete).

        A column Debezium did not send is None in the row and named in :meth:`unavailable` of it."""
        if type(obj) is not dict:
            raise _Bad(f"{where} is {kind(obj)}, not a JSON object")
        if not self.declared.issuperset(obj):
            unknown = [name for name in obj if name not in self.declared]
            raise _Bad(f"unknown field(s) not in spec.schema: {', '.join(unknown)} (in {where})")
        get, hint = obj.get, logical.get
        if key_only:  # a delete needs the key alone: the other values are checked for being declared only
            values: list[Any] = [None] * len(self.names)
            try:
                for position in self.key_positions:
                    name, convert = self.converters[position]
                    value = get(name)
                    values[position] = None if value is None else convert(value, hint(name))
            except Refused:
                raise _Bad(self._refusal(get, hint, self.key_positions)) from None
        else:
            unavailable = {position for position, array in self.unavailable_positions
                           if _unavailable(get(self.names[position]), array)}
            if unavailable.intersection(self.key_positions):
                raise _Bad(f"key field(s) without a value ({UNAVAILABLE}) (in {where})")
            try:
                values = [None if (value := get(name)) is None or position in unavailable
                          else convert(value, hint(name)) for position, (name, convert) in enumerate(self.converters)]
            except Refused:
                sent = [position for position in range(len(self.names)) if position not in unavailable]
                raise _Bad(self._refusal(get, hint, sent)) from None
            self.unavailable = [self.names[position] for position in sorted(unavailable)]
        for position in (self.key_positions if key_only else self.required_positions):
            if values[position] is None and (key_only or self.names[position] not in self.unavailable):
                label = "key field" if key_only else "required field"
                raise _Bad(f"{label} {self.names[position]} is missing or null (in {where})")
        return values

    def _refusal(self, get: Callable[[str], Any], hint: Callable[[str], Logical | None], positions: list[int]) -> str:
        """The reason of a row whose values at ``positions`` do not all convert: the one both JSON decoders give
        (:func:`~spark_app.decoding.json_values.first_refusal`)."""
        refusals: list[tuple[str, Refused]] = []
        for position in positions:
            name, convert = self.converters[position]
            if (value := get(name)) is not None:
                try:
                    convert(value, hint(name))
                except Refused as refused:
                    refusals.append((name, refused))
        return first_refusal(refusals)

    def observe(self, schema: Any, *path: str, whole_row: bool = True) -> None:
        """Note the drift of the Connect struct along ``path`` of a record's schema (once per distinct struct)."""
        if self.drift is None or schema is None:
            return
        fields = _struct_fields(schema, *path)
        if fields is None:
            return
        fields = [f for f in fields if f.get("field") != DELETED_FIELD]  # the upsert format's delete flag
        signature = (whole_row, *((f.get("field"), f.get("type"), f.get("name"),
                                   str(parameters) if (parameters := f.get("parameters")) else None) for f in fields))
        if signature not in self._observed:
            self._observed.add(signature)
            self.drift.merge(observe(fields, self._types, self._required, frozenset(self.key), whole_row))

    def key_of(self, values: list[Any]) -> tuple[Any, ...]:
        return tuple(values[position] for position in self.key_positions)

    def delete_row(self, values: list[Any]) -> list[Any]:
        """A delete carries only its key: the other columns are null."""
        row: list[Any] = [None] * len(self.names)
        for position in self.key_positions:
            row[position] = values[position]
        return row


def _struct_fields(schema: Any, *path: str) -> list[dict[str, Any]] | None:
    """The field schemas of the Connect struct along ``path`` in a record's Connect schema (None: no such struct)."""
    node = schema
    for name in path:
        fields = node.get("fields") if isinstance(node, dict) else None
        node = next((f for f in fields or [] if isinstance(f, dict) and f.get("field") == name), None)
    fields = node.get("fields") if isinstance(node, dict) else None
    return [f for f in fields if isinstance(f, dict)] if isinstance(fields, list) else None


def _logical_types(schema: Any, *path: str) -> dict[str, Logical]:
    """Field name -> Kafka Connect logical type, from a record's Connect schema (struct fields along ``path``;
    an ``array`` field's is that of its items; see :func:`_logical_of`)."""
    fields = {f["field"]: f for f in _struct_fields(schema, *path) or [] if isinstance(f.get("field"), str)}
    return {name: logical for name, node in fields.items() if (logical := _logical_of(node)) is not None}


def _logical_of(node: Any) -> Logical | None:
    """The Kafka Connect logical type of a field schema (an ``array``'s is that of its items, at any depth); a
    float32 field without one is ``FLOAT32``: its text is a float32's (Java's), read as that float32 also into a
    ``double`` column (a ``real`` widened to ``double precision``); a struct or map keeps its schema."""
    while isinstance(node, dict) and node.get("type") == "array" and isinstance(node.get("items"), dict):
        node = node["items"]
    if not isinstance(node, dict):
        return None
    name, parameters = node.get("name"), node.get("parameters")
    nested = node if node.get("type") in ("struct", "map") else None
    if isinstance(name, str):
        return Logical(name, parameters if isinstance(parameters, dict) else {}, nested)
    if nested is not None:
        return Logical("", {}, nested)
    return _FLOAT32_LOGICAL if node.get("type") in _FLOAT32_TYPES else None


def _unavailable(value: Any, array: bool) -> bool:
    """Whether ``value`` is Debezium's placeholder for a value it did not send (``array``: of an array column)."""
    if isinstance(value, str):
        return value in _UNAVAILABLE_VALUES
    return array and isinstance(value, list) and value in _UNAVAILABLE_ARRAYS


def payload_of(value: bytes | str | None) -> Any:
    """The payload of a raw JSON record, plain or in Kafka Connect's ``{"schema", "payload"}`` form (None: no JSON)."""
    if value is None:
        return None
    try:
        return _unwrap(json.loads(value))[0]
    except ValueError:
        return None


def _unwrap(record: Any) -> tuple[Any, Any]:
    """(payload, Connect schema or None) of a record, unwrapping the ``{"schema", "payload"}`` form."""
    if isinstance(record, dict) and len(record) == 2 and "schema" in record and "payload" in record:
        return record["payload"], record["schema"]
    return record, None


def _text(value: Any) -> str:
    """A raw value as text; raises _Bad for bytes that are not UTF-8."""
    if isinstance(value, str):
        return value
    try:
        return bytes(value).decode("utf-8")
    except UnicodeDecodeError:
        raise _Bad(NOT_UTF8) from None


def _raw(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, str):
        return value
    try:
        return bytes(value).decode("utf-8")
    except UnicodeDecodeError:
        return base64.b64encode(bytes(value)).decode("ascii")


_Change = tuple[int, list[Any], list[str] | None, str | None]  # (op, row, columns Debezium did not send, move)


def _upserted(rows: _Rows, values: list[Any], move: str | None = None) -> _Change:
    return OP_UPSERT, values, list(rows.unavailable) or None, move if rows.unavailable else None


def _source_event(envelope: dict[str, Any]) -> str | None:
    """What names a Debezium event's place in the source: a digest of its ``source`` block. A primary-key update
    reaches Kafka as a delete of the old key and a create of the new one, both with the source of the update
    (PostgreSQL's ``lsn`` and ``txId``; MySQL's binlog ``file``, ``pos`` and ``row``), on two partitions."""
    source = envelope.get("source")
    if not isinstance(source, dict) or not source:
        return None
    text = json.dumps(source, sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.blake2b(text.encode(), digest_size=12).hexdigest()


def _debezium(rows: _Rows, record: Any) -> list[_Change]:
    envelope, schema = _unwrap(record)
    if envelope is None:
        return []  # a tombstone: not a change
    if not isinstance(envelope, dict):
        raise _Bad(f"record is {kind(envelope)}, not a JSON object")
    op = envelope.get("op")
    if op is None:
        raise _Bad("not a Debezium change event: op is missing")
    if op == "t":
        return _truncate(rows, envelope)
    if op not in ("c", "r", "u", "d"):
        raise _Bad(f"unknown op {shown_json(op)} (a change event's op is c, r, u, d or t)")
    if rows.truncated_at is not None and (place := source_position(envelope)) is not None and place <= rows.truncated_at:
        return []  # before a truncate the table already applied
    rows.settings.event(envelope, schema, op)
    before_types = _logical_types(schema, "before") if schema is not None else {}
    after_types = _logical_types(schema, "after") if schema is not None else {}
    rows.observe(schema, "after" if envelope.get("after") is not None else "before",
                 whole_row=envelope.get("after") is not None)
    if not rows.key:
        return _keyless(rows, envelope, op, before_types, after_types)
    if op == "d":
        before = envelope.get("before")
        if before is None:
            rows.settings.without_before(envelope)
            raise _Bad("a delete (op d) without before: the deleted key is unknown")
        return [(OP_DELETE, rows.delete_row(rows.row(before, "before", before_types, key_only=True)), None,
                 _source_event(envelope))]
    after = envelope.get("after")
    if after is None:
        raise _Bad(f"op {op} without after: there is no new row")
    # A create missing values is the new key of a primary-key update (an insert logs every value): it carries them
    # from the old key, found by the delete of the same source event.
    new = _upserted(rows, rows.row(after, "after", after_types), _source_event(envelope) if op == "c" else None)
    if new[3] is not None:
        rows.settings.moved(envelope)
    before = envelope.get("before")
    if op == "u" and before is not None:
        old = rows.row(before, "before", before_types, key_only=True)
        if rows.key_of(old) != rows.key_of(new[1]):
            move = _source_event(envelope) if new[2] else None
            if move is not None:
                rows.settings.moved(envelope)
            return [(OP_DELETE, rows.delete_row(old), None, move), (*new[:3], move)]
    return [new]


KEYLESS_BEFORE = ("on a table without a primary key a change removes the row equal to its before image: set "
                  "REPLICA IDENTITY FULL on the PostgreSQL table (binlog_row_image=FULL on MySQL/MariaDB)")


def _keyless(rows: _Rows, envelope: dict[str, Any], op: str, before_types: dict[str, Logical],
             after_types: dict[str, Logical]) -> list[_Change]:
    """A change to a table without a primary key (an empty key): a delete of the whole ``before`` row, an insert of
    the whole ``after`` row, an update both. Every value must be there: nothing is carried for such a row."""
    changes: list[_Change] = []
    for side, wanted, types in (("before", op in ("u", "d"), before_types), ("after", op != "d", after_types)):
        if not wanted:
            continue
        image = envelope.get(side)
        if image is None:
            if side == "before":
                rows.settings.without_before(envelope)
            raise _Bad(f"op {op} without {side}: " + (KEYLESS_BEFORE if side == "before" else "there is no new row"))
        values = rows.row(image, side, types)
        if rows.unavailable:
            if side == "before":
                rows.settings.without_before(envelope)
            raise _Bad(f"{side}: Debezium did not send the value of {', '.join(rows.unavailable)} ({UNAVAILABLE}); "
                       + KEYLESS_BEFORE)
        changes.append((OP_DELETE if side == "before" else OP_UPSERT, values, None, None))
    return changes


def _truncate(rows: _Rows, envelope: dict[str, Any]) -> list[_Change]:
    """A truncate: no change of its own; the newest beyond the one applied is noted (spark_app/decoding/source_positions.py)."""
    if not rows.applies_truncates:
        raise _Bad("a truncate (op t) where nothing empties the table (a decoder without truncates)")
    place = source_position(envelope)
    if place is None:
        raise _Bad("a truncate (op t) whose source names no position to order it by against the other changes "
                   "(PostgreSQL's lsn, MySQL's and MariaDB's binlog file and pos): the table is not emptied")
    if (rows.truncated_at is None or place > rows.truncated_at) and (rows.truncate is None or place > rows.truncate):
        rows.truncate = place
    return []


_POSTGRES_TRANSACTION_ID = re.compile(r"(\d+):\d+")


def transaction_key(transaction: str) -> str:
    """What identifies a source transaction in Debezium's ``id``: the id itself, but for PostgreSQL's
    ``<txId>:<LSN>`` (Debezium 2.0 on, DBZ-5329) the txId alone: the LSN is that of each event, so it differs
    between a transaction's events and its BEGIN and END events."""
    postgres = _POSTGRES_TRANSACTION_ID.fullmatch(transaction)
    return postgres.group(1) if postgres else transaction


def transaction_id(record: Any) -> str | None:
    """The source transaction of a (parsed) Debezium change event (:func:`transaction_key` of its id), or None (no
    ``transaction`` block: a snapshot read, a connector without transaction metadata)."""
    envelope, _ = _unwrap(record)
    block = envelope.get("transaction") if isinstance(envelope, dict) else None
    transaction = block.get("id") if isinstance(block, dict) else None
    return transaction_key(transaction) if isinstance(transaction, str) and transaction else None


def _deleted_flag(value: Any) -> bool:
    if value is None or value is False or value == "false":
        return False
    if value is True or value == "true":
        return True
    raise _Bad(f"field {DELETED_FIELD}: value {shown_json(value)} is not true, false, \"true\" or \"false\"")


def _upsert(rows: _Rows, record: Any) -> list[_Change]:
    row, schema = _unwrap(record)
    if not isinstance(row, dict):
        raise _Bad(f"record is {kind(row)}, not a JSON object")
    types = _logical_types(schema) if schema is not None else {}
    deleted = DELETED_FIELD in row and _deleted_flag(row[DELETED_FIELD])
    rows.observe(schema, whole_row=not deleted)
    if DELETED_FIELD in row:
        row = {name: value for name, value in row.items() if name != DELETED_FIELD}
        if deleted:
            return [(OP_DELETE, rows.delete_row(rows.row(row, "record", types, key_only=True)), None, None)]
    return [_upserted(rows, rows.row(row, "record", types))]


def _tombstone_key(rows: _Rows, message_key: Any) -> list[_Change]:
    """An upsert-format Kafka tombstone: delete the row of the message key (a JSON object of the key columns)."""
    if message_key is None:
        raise _Bad("a tombstone (null value) without a message key: the deleted key is unknown")
    parsed = loads(_text(message_key))
    key, schema = _unwrap(parsed)
    types = _logical_types(schema) if schema is not None else {}
    if not isinstance(key, dict):
        raise _Bad(f"message key is {kind(key)}, not a JSON object of the key columns")
    extra = [name for name in key if name not in rows.key]
    if extra:
        raise _Bad(f"message key has field(s) that are not key columns: {', '.join(extra)}")
    return [(OP_DELETE, rows.delete_row(rows.row(key, "message key", types, key_only=True)), None, None)]


def decode_changes(
    values: Sequence[bytes | str | None] | pa.Array | pa.ChunkedArray,
    keys: Sequence[bytes | str | None] | pa.Array | pa.ChunkedArray | None,
    positions: Callable[[int], dict[str, Any]],
    columns: Sequence[SpecColumn],
    key: Sequence[str],
    format: str,
    order_base: int,
    drift: SchemaDrift | None = None,
    transactions: list[tuple[int, str]] | None = None,
    truncates: Truncates | None = None,
    settings: SettingsSeen | None = None,
) -> pa.Table:
    """Decode change records into a table of changes (schema: :func:`changes_schema`).

    ``values`` are the raw records in source order (a None value is a Kafka tombstone), ``keys`` the
    Kafka message keys (None for files), ``positions(i)`` the source position of record ``i`` (only
    called for dead letters), ``order_base`` the ``_isync_order`` of record 0: record ``i``'s changes
    have order ``order_base + i``. A Debezium update that changes the key yields two rows of that
    order: a delete of the old key and an upsert of the new one (different keys, so they never
    compete in :func:`collapse`).

    With an empty ``key`` (a table without a primary key, format ``debezium``) a delete row carries the whole
    ``before`` row and an update is a delete of ``before`` and an upsert of ``after``; an event without ``before``,
    or with a value Debezium did not send, is a dead letter (:mod:`spark_app.keyless`).

    A keyed delete row carries only the key columns (the others are null); every good upsert row has its
    required columns but those named in ``_isync_carry`` (values Debezium did not send, null until
    carried; such a row keeps its ``_isync_raw`` and ``_isync_position`` for a dead letter).
    A bad record is one row with ``_isync_error``, ``_isync_raw`` and ``_isync_position`` set.

    With ``drift`` (the table follows the source's schema) each record's Connect schema is compared with
    ``columns`` and what it asks of the table is merged into ``drift``: the caller then discards the
    trigger, changes the schema and decodes again (spark_app/decoding/schema_drift/).

    With ``transactions`` (a list), ``(i, id)`` is appended for each Debezium record ``i`` that names its source
    transaction, a dead letter included (it is one of the transaction's events all the same).

    With ``truncates``, Debezium events at or before its ``applied`` source position are skipped (a truncate the
    table already applied removed them), and the newest truncate (``op: "t"``) beyond it is noted in its ``seen``
    for the driver, which empties the table at it (:mod:`spark_app.truncates`). Without, a truncate is a dead letter.

    With ``settings``, what Debezium's events show of the settings the docs require is counted into it
    (:mod:`spark_app.source_settings`).
    """
    if format not in FORMATS:
        raise ValueError(f"unknown changes format {format!r} (expected one of {FORMATS})")
    if isinstance(values, pa.Array | pa.ChunkedArray):
        values = values.to_pylist()
    if isinstance(keys, pa.Array | pa.ChunkedArray):
        keys = keys.to_pylist()
    rows = _Rows(columns, key, drift, truncates.applied if truncates is not None else None, settings)
    rows.applies_truncates = truncates is not None
    schema = changes_schema(columns)
    decode = _debezium if format == "debezium" else _upsert
    width = len(rows.names)
    out_rows: list[list[Any]] = []
    ops: list[int] = []
    orders: list[int] = []
    carries: list[list[str] | None] = []
    moves: list[str | None] = []
    errors: list[str | None] = []
    raws: list[str | None] = []
    where: list[str | None] = []
    for index, value in enumerate(values):
        try:
            if value is None:
                if format == "debezium":
                    continue  # a Kafka tombstone follows every Debezium delete: not a change
                changes = _tombstone_key(rows, keys[index] if keys is not None else None)
            else:
                parsed = loads(_text(value))
                if transactions is not None and format == "debezium":
                    transaction = transaction_id(parsed)
                    if transaction is not None:
                        transactions.append((index, transaction))
                changes = decode(rows, parsed)
        except (_Bad, BadJson) as bad:
            out_rows.append([None] * width)
            ops.append(OP_UPSERT)
            orders.append(order_base + index)
            carries.append(None)
            moves.append(None)
            errors.append(str(bad))
            raws.append(_raw(value) if value is not None else _raw(keys[index] if keys is not None else None))
            where.append(encode_position(positions(index)))
            continue
        for op, row, carry, move in changes:
            out_rows.append(row)
            ops.append(op)
            orders.append(order_base + index)
            carries.append(carry)
            moves.append(move)
            errors.append(None)
            raws.append(None if carry is None else _raw(value))
            where.append(None if carry is None else encode_position(positions(index)))
    if truncates is not None and rows.truncate is not None:
        truncates.see(rows.truncate)
    by_column = list(zip(*out_rows, strict=True)) if out_rows else [() for _ in range(width)]
    arrays = [pa.array(list(data), type=field.type) for data, field in zip(by_column, schema, strict=False)]
    arrays += [pa.array(ops, pa.int8()), pa.array(orders, pa.int64()), pa.array(carries, pa.list_(pa.string())),
               pa.array(moves, pa.string()), pa.array(errors, pa.string()), pa.array(raws, pa.string()), pa.array(where, pa.string())]
    return pa.Table.from_arrays(arrays, schema=schema)


# -- collapse -------------------------------------------------------------------------------------


class Collapsed(NamedTuple):
    """What a trigger's changes (of one key bucket) come to: see :func:`collapse`."""

    inserts: pa.Table  # the winning upserts with every value (declared columns)
    keys: pa.Table  # every key the changes touch (key columns)
    carried: pa.Table  # winning upserts still missing values: declared columns, _isync_carry, _isync_move, control
    moved: pa.Table  # winning deletes of a source event (_isync_move): the key's values in the trigger, if it has them


def collapse(changes: pa.Table, key: Sequence[str]) -> Collapsed:
    """Reduce a trigger's changes (of one key bucket) to what is committed.

    Per key the change with the highest ``_isync_order`` wins. Rows to insert are the winning
    upserts (declared columns only); keys are every key the changes touch, once (key columns only),
    so the delete committed with the inserted rows removes each key's older row wherever it lives.
    A winning upsert missing values Debezium did not send takes each from the newest earlier change
    of its key that has it; what no earlier change has is left to the table's live row, in
    ``carried`` (an earlier delete of the key in the trigger leaves it none: such a row is carried
    with its ``_isync_error``). Rows with an ``_isync_error`` are dead letters and are ignored. The
    results are sorted by key.

    A winning delete that names its source event (``_isync_move``: it may be the old key of a primary-key update
    whose create, elsewhere, misses values) is in ``moved`` with the declared columns of the key's newest earlier
    upsert in the trigger when it is complete (``_isync_has_values``), else with its key alone: the driver then
    carries from the old key's live row (:mod:`spark_app.commit.carry`), or, when that upsert was itself the create of
    a primary-key update (``_isync_via``), from that update's old key.
    """
    changes = valid_changes(changes)
    declared = declared_columns(changes)
    pending = [*declared, CARRY_COLUMN, MOVE_COLUMN, *CONTROL_COLUMNS]
    if changes.num_rows == 0:
        return Collapsed(changes.select(declared), changes.select(list(key)), changes.select(pending),
                         _moved(changes, np.zeros(0, dtype=bool), declared))
    ordered = changes.take(pc.sort_indices(
        changes, sort_keys=[(name, "ascending") for name in key] + [(ORDER_COLUMN, "descending")]
    ))
    first = first_of_each_key(ordered, key)
    if ordered.column(CARRY_COLUMN).null_count != ordered.num_rows:
        ordered = _carry_within(ordered, first)
    winners = ordered.filter(pa.array(first))
    upserts = winners.filter(pc.equal(winners.column(OP_COLUMN), OP_UPSERT))
    complete = pc.is_null(upserts.column(CARRY_COLUMN))
    return Collapsed(upserts.filter(complete).select(declared), winners.select(list(key)),
                     upserts.filter(pc.invert(complete)).select(pending), _moved(ordered, first, declared))


def valid_changes(changes: pa.Table) -> pa.Table:
    """``changes`` without its dead letters (rows with an ``_isync_error``)."""
    if ERROR_COLUMN in changes.column_names:
        errors = changes.column(ERROR_COLUMN)
        if errors.null_count != changes.num_rows:
            changes = changes.filter(pc.is_null(errors))
    return changes


def declared_columns(changes: pa.Table) -> list[str]:
    """The declared (table) columns of a decoded batch of changes."""
    return [name for name in changes.column_names if name not in CHANGE_COLUMNS and name not in CONTROL_COLUMNS]


def _moved(ordered: pa.Table, first: np.ndarray, declared: list[str]) -> pa.Table:
    """The winning deletes of ``ordered`` (by key, newest first) that name a source event, with the values of the
    key's newest older complete upsert, or the source event of the create it came by (see :func:`collapse`); one
    whose key an older change deleted in the trigger has no values to give and is left out."""
    moves = ordered.column(MOVE_COLUMN).to_pylist()
    ops = ordered.column(OP_COLUMN).to_numpy(zero_copy_only=False)
    complete = pc.is_null(ordered.column(CARRY_COLUMN)).to_numpy(zero_copy_only=False)
    winners: list[int] = []
    sources: list[int] = []
    vias: list[str | None] = []
    for winner in np.flatnonzero(first):
        if ops[winner] != OP_DELETE or moves[winner] is None:
            continue
        source, via, row = int(winner), None, int(winner) + 1
        while row < len(first) and not first[row]:  # the key's older changes, newest first
            if ops[row] == OP_DELETE:
                source = -1
            elif complete[row]:
                source = row
            elif moves[row] is not None:
                via = moves[row]
            else:
                row += 1
                continue
            break
        if source >= 0:
            winners.append(int(winner))
            sources.append(source)
            vias.append(via)
    rows = ordered.take(pa.array(sources, pa.int64())).select(declared)
    return (rows.append_column(MOVE_COLUMN, pa.array([moves[w] for w in winners], pa.string()))
            .append_column(HAS_VALUES_COLUMN, pa.array([s != w for s, w in zip(sources, winners, strict=True)]))
            .append_column(VIA_COLUMN, pa.array(vias, pa.string())))


def first_of_each_key(ordered: pa.Table, key: Sequence[str]) -> np.ndarray:
    """Whether each row of ``ordered`` (sorted by ``key``, nonempty) is the first of its key."""
    count = ordered.num_rows
    first = np.zeros(count, dtype=bool)
    first[0] = True
    for name in key:
        column = ordered.column(name).combine_chunks()
        differs = pc.not_equal(column.slice(1), column.slice(0, count - 1))
        first[1:] |= pc.fill_null(differs, True).to_numpy(zero_copy_only=False)
    return first


def _carry_within(ordered: pa.Table, first: np.ndarray) -> pa.Table:
    """``ordered`` (by key, newest change first) with each winning upsert's missing values taken from the
    newest earlier change of its key that has them; ``_isync_carry`` keeps what none has. One missing them
    too that is the create of a primary-key update hands its source event on (``_isync_move``): the values
    come from that update's old key."""
    ops = ordered.column(OP_COLUMN).to_numpy()
    carries = ordered.column(CARRY_COLUMN).to_pylist()
    moves = ordered.column(MOVE_COLUMN).to_pylist()
    errors = ordered.column(ERROR_COLUMN).to_pylist() if ERROR_COLUMN in ordered.column_names else None
    ends = np.append(np.flatnonzero(first)[1:], len(first))
    sources: dict[str, np.ndarray] = {}
    for winner, end in zip(np.flatnonzero(first), ends, strict=True):
        if ops[winner] != OP_UPSERT or carries[winner] is None:
            continue
        missing = list(carries[winner])
        for earlier in range(winner + 1, int(end)):
            if ops[earlier] == OP_DELETE:
                if errors is not None:
                    errors[winner] = (f"Debezium did not send the value of {', '.join(missing)} ({UNAVAILABLE}), and "
                                      "the key was deleted earlier in the trigger: there is no value to keep")
                break
            has = [name for name in missing if name not in (carries[earlier] or ())]
            for name in has:
                sources.setdefault(name, np.arange(len(first)))[winner] = earlier
            missing = [name for name in missing if name not in has]
            if missing and moves[earlier] is not None:
                moves[winner] = moves[earlier]
                break
            if not missing:
                break
        carries[winner] = missing or None
    for name, source in sources.items():
        ordered = ordered.set_column(ordered.column_names.index(name), name, ordered.column(name).take(source))
    ordered = ordered.set_column(ordered.column_names.index(CARRY_COLUMN), CARRY_COLUMN,
                                 pa.array(carries, pa.list_(pa.string())))
    ordered = ordered.set_column(ordered.column_names.index(MOVE_COLUMN), MOVE_COLUMN, pa.array(moves, pa.string()))
    if errors is not None:
        ordered = ordered.set_column(ordered.column_names.index(ERROR_COLUMN), ERROR_COLUMN, pa.array(errors, pa.string()))
    return ordered


__all__ = [
    "CARRY_COLUMN", "CHANGE_COLUMNS", "DELETED_FIELD", "FORMATS", "HAS_VALUES_COLUMN", "MOVE_COLUMN", "OP_COLUMN", "OP_DELETE",
    "OP_UPSERT", "ORDER_COLUMN", "POSITION_COLUMN", "RAW_COLUMN", "UNAVAILABLE", "VIA_COLUMN", "Collapsed", "arrow_type", "changes_schema", "collapse",
    "declared_columns", "decode_changes", "first_of_each_key", "valid_changes",
]
