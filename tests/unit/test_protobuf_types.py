"""Protobuf schemas as spec column types and the wire format's message indexes."""

from __future__ import annotations

import base64

import pytest
from google.protobuf import descriptor_pb2

from spark_app.decoding.registry.protobuf_types import (
    ProtobufTypeError,
    file_descriptor,
    message_at,
    message_columns,
)
from spark_app.decoding.registry.records import _message_indexes

F = descriptor_pb2.FieldDescriptorProto


def registered(file: descriptor_pb2.FileDescriptorProto) -> str:
    return base64.b64encode(file.SerializeToString()).decode()


def test_message_indexes_name_top_level_and_nested_messages() -> None:
    assert _message_indexes(b"\x00\x00\x00\x00\x00\x00rest", 5) == ((0,), 6)  # [0] is written as one 0
    assert _message_indexes(b"\x00\x00\x00\x00\x00\x04\x02\x06rest", 5) == ((1, 3), 8)  # count 2: 1, 3 (zigzag)
    assert _message_indexes(b"\x00\x00\x00\x00\x00\x04\x02", 5)[0] is None  # cut short


def test_scalars_nesting_and_what_has_no_column_type() -> None:
    file = descriptor_pb2.FileDescriptorProto(name="t.proto", package="t", syntax="proto3")
    row = file.message_type.add(name="Row")
    for number, (name, kind) in enumerate([("i", F.TYPE_INT32), ("u", F.TYPE_UINT32), ("l", F.TYPE_SINT64),
                                           ("ul", F.TYPE_UINT64), ("f", F.TYPE_FLOAT), ("b", F.TYPE_BYTES)], start=1):
        row.field.add(name=name, number=number, type=kind, label=F.LABEL_OPTIONAL)
    row.field.add(name="r", number=7, type=F.TYPE_STRING, label=F.LABEL_REPEATED)
    inner = row.nested_type.add(name="Inner")
    inner.field.add(name="x", number=1, type=F.TYPE_BOOL, label=F.LABEL_OPTIONAL)
    row.field.add(name="inner", number=8, type=F.TYPE_MESSAGE, type_name=".t.Row.Inner", label=F.LABEL_OPTIONAL)
    columns = message_columns(message_at(file_descriptor(registered(file)), [0]))
    assert [(name, str(kind)) for name, kind, _ in columns] == [
        ("i", "int"), ("u", "long"), ("l", "long"), ("ul", "decimal(20,0)"), ("f", "float"), ("b", "binary"),
        ("r", "array<string>"), ("inner", "struct<x: boolean>")]
    assert message_columns(message_at(file_descriptor(registered(file)), [0, 0])) == [
        ("x", columns[-1][1].fields[0].type, False)]  # type: ignore[union-attr]
    row.field.add(name="again", number=9, type=F.TYPE_MESSAGE, type_name=".t.Row", label=F.LABEL_OPTIONAL)
    with pytest.raises(ProtobufTypeError, match=r"message t\.Row contains itself"):
        message_columns(message_at(file_descriptor(registered(file)), [0]))
    with pytest.raises(ProtobufTypeError, match=r"message indexes \[3\] name no message"):
        message_at(file_descriptor(registered(file)), [3])
    with pytest.raises(ProtobufTypeError, match=r"\.proto text"):
        file_descriptor('syntax = "proto3"; message Row { int64 id = 1; }')
