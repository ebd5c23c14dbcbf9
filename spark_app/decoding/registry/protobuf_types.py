"""Protobuf schemas as spec column types, and Protobuf records as rows (docs/formats.md, "Protobuf").

A registered Protobuf schema is read in its serialized form (the base64 of a ``FileDescriptorProto``, which
confluent-kafka's serializers register and Confluent's registry serves with ``?format=serialized``); the well-known
types it imports come from the protobuf runtime. The record's message is the one the wire format's message indexes
name. Its fields map as Iceberg's Protobuf readers map them: 32-bit integers to ``int`` (unsigned to ``long``),
64-bit ones to ``long`` (unsigned to ``decimal(20,0)``), ``float``/``double``/``bool``/``string`` as they are,
``bytes`` to ``binary``, enums to ``string`` (the value's name), ``repeated`` to ``array<T>``, map fields to
``map<K, V>``, messages to ``struct<…>``; ``google.protobuf.Timestamp`` is ``timestamptz`` and the wrapper types
(``Int64Value``…) their optional scalar. A field is optional unless it is a proto2 ``required`` one; a proto3 scalar
without presence holds its default (0, "", false) when unset, as the message does. A message that contains itself
has no column type.
"""

from __future__ import annotations

import base64
import binascii
import datetime
from collections.abc import Callable, Sequence
from decimal import Decimal
from typing import Any

from icebergsync.types.grammar import ArrayOf, MapOf, Primitive, SpecType, StructField, StructOf
from icebergsync.types.grammar import Decimal as SpecDecimal

_WRAPPERS = {"google.protobuf.DoubleValue": "double", "google.protobuf.FloatValue": "float",
             "google.protobuf.Int64Value": "long", "google.protobuf.UInt64Value": "decimal(20,0)",
             "google.protobuf.Int32Value": "int", "google.protobuf.UInt32Value": "long",
             "google.protobuf.BoolValue": "boolean", "google.protobuf.StringValue": "string",
             "google.protobuf.BytesValue": "binary"}
_TIMESTAMP = "google.protobuf.Timestamp"


class ProtobufTypeError(ValueError):
    """A Protobuf schema with no spec column type, or one this reader cannot load; the message says why."""


def file_descriptor(schema_text: str) -> Any:
    """The ``FileDescriptor`` of a registered schema in serialized form (its imports of well-known types loaded
    from the protobuf runtime); ``ProtobufTypeError`` for ``.proto`` text or imports of other registered files."""
    from google.protobuf import descriptor_pb2, descriptor_pool

    _load_well_known_types()

    try:
        proto = descriptor_pb2.FileDescriptorProto.FromString(base64.b64decode(schema_text, validate=True))
    except (binascii.Error, ValueError) as error:
        raise ProtobufTypeError("the schema is .proto text; Protobuf schemas are read as registered descriptors "
                                "(confluent-kafka's serializers register those)") from error
    pool = descriptor_pool.DescriptorPool()
    for dependency in proto.dependency:
        if not dependency.startswith("google/protobuf/"):
            raise ProtobufTypeError(f"it imports {dependency}, another registered schema (schema references are "
                                    "not read)")
        known = descriptor_pb2.FileDescriptorProto()
        try:
            descriptor_pool.Default().FindFileByName(dependency).CopyToProto(known)
        except KeyError:
            raise ProtobufTypeError(f"it imports {dependency}, which is no well-known type") from None
        pool.Add(known)
    pool.Add(proto)
    return pool.FindFileByName(proto.name)


def _load_well_known_types() -> None:
    """Put the well-known types (``google/protobuf/*.proto``) in the default pool, where imports find them."""
    from google.protobuf import (  # noqa: F401 - imported for their descriptors
        any_pb2,
        duration_pb2,
        empty_pb2,
        field_mask_pb2,
        struct_pb2,
        timestamp_pb2,
        wrappers_pb2,
    )


def message_at(file: Any, indexes: Sequence[int]) -> Any:
    """The message the wire format's indexes name (``[0]``: the file's first message; deeper: nested ones)."""
    try:
        message = file.message_types_by_name[list(file.message_types_by_name)[indexes[0]]]
        for index in indexes[1:]:
            message = message.nested_types[index]
    except (IndexError, KeyError) as error:
        raise ProtobufTypeError(f"message indexes {list(indexes)} name no message of the schema") from error
    return message


def message_columns(message: Any) -> list[tuple[str, SpecType, bool]]:
    """The columns of a message: (name, type, required) per field, in field order."""
    struct = _struct(message, (message.full_name,))
    return [(field.name, field.type, field.required) for field in struct.fields]


def _struct(message: Any, open_messages: tuple[str, ...]) -> StructOf:
    fields = [StructField(field.name, _field_type(field, open_messages), _required(field)) for field in message.fields]
    if not fields:
        raise ProtobufTypeError(f"message {message.full_name} has no fields")
    return StructOf(tuple(fields))


def _required(field: Any) -> bool:
    return bool(getattr(field, "is_required", False))


def _field_type(field: Any, open_messages: tuple[str, ...]) -> SpecType:
    if field.message_type is not None and field.message_type.GetOptions().map_entry:
        key, value = field.message_type.fields_by_name["key"], field.message_type.fields_by_name["value"]
        key_type = _single_type(key, open_messages)
        if not isinstance(key_type, Primitive | SpecDecimal):
            raise ProtobufTypeError(f"field {field.name}: a map key must be a scalar")
        return MapOf(key_type, _single_type(value, open_messages))
    single = _single_type(field, open_messages)
    return ArrayOf(single) if _repeated(field) else single


def _repeated(field: Any) -> bool:
    return bool(getattr(field, "is_repeated", False))


def _single_type(field: Any, open_messages: tuple[str, ...]) -> SpecType:
    from google.protobuf.descriptor import FieldDescriptor as F

    kind = field.type
    if kind == F.TYPE_MESSAGE:
        name = field.message_type.full_name
        if name == _TIMESTAMP:
            return Primitive("timestamptz")
        if name in _WRAPPERS:
            return SpecDecimal(20, 0) if _WRAPPERS[name].startswith("decimal") else Primitive(_WRAPPERS[name])
        if name in open_messages:
            raise ProtobufTypeError(f"field {field.name}: message {name} contains itself (a recursive message has "
                                    "no column type)")
        return _struct(field.message_type, (*open_messages, name))
    if kind in (F.TYPE_UINT64, F.TYPE_FIXED64):
        return SpecDecimal(20, 0)
    scalar = {F.TYPE_DOUBLE: "double", F.TYPE_FLOAT: "float", F.TYPE_INT64: "long", F.TYPE_SINT64: "long",
              F.TYPE_SFIXED64: "long", F.TYPE_INT32: "int", F.TYPE_SINT32: "int", F.TYPE_SFIXED32: "int",
              F.TYPE_UINT32: "long", F.TYPE_FIXED32: "long", F.TYPE_BOOL: "boolean", F.TYPE_STRING: "string",
              F.TYPE_BYTES: "binary", F.TYPE_ENUM: "string"}.get(kind)
    if scalar is None:
        raise ProtobufTypeError(f"field {field.name}: protobuf type {kind} has no column type")
    return Primitive(scalar)


def message_reader(message: Any) -> Callable[[bytes], dict[str, Any]]:
    """Parse a message's bytes into a row (``DecodeError`` from protobuf when they are not one)."""
    from google.protobuf import message_factory

    cls = message_factory.GetMessageClass(message)
    return lambda data: _row(cls.FromString(data))


def _row(message: Any) -> dict[str, Any]:
    row: dict[str, Any] = {}
    for field in message.DESCRIPTOR.fields:
        if field.has_presence and not message.HasField(field.name):
            row[field.name] = None
            continue
        value = getattr(message, field.name)
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            value_field = field.message_type.fields_by_name["value"]
            row[field.name] = {_value(field.message_type.fields_by_name["key"], key): _value(value_field, item)
                               for key, item in value.items()}
        elif _repeated(field):
            row[field.name] = [_value(field, item) for item in value]
        else:
            row[field.name] = _value(field, value)
    return row


def _value(field: Any, value: Any) -> Any:
    from google.protobuf.descriptor import FieldDescriptor as F

    if field.type == F.TYPE_MESSAGE:
        name = field.message_type.full_name
        if name == _TIMESTAMP:
            return datetime.datetime.fromtimestamp(value.seconds, datetime.UTC) + datetime.timedelta(
                microseconds=value.nanos // 1000)
        if name in _WRAPPERS:
            return Decimal(value.value) if name == "google.protobuf.UInt64Value" else value.value
        return _row(value)
    if field.type == F.TYPE_ENUM:
        enum = field.enum_type.values_by_number.get(value)
        return enum.name if enum is not None else str(value)
    if field.type in (F.TYPE_UINT64, F.TYPE_FIXED64):
        return Decimal(value)
    return value
