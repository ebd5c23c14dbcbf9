"""A schema-free codec for Thrift's compact protocol, enough to edit a Parquet footer losslessly.

A Parquet footer (``FileMetaData``) is a Thrift struct in the compact protocol. Decoding it without
an IDL keeps every field as (id, wire type, value), so fields this code has never heard of (newer
Parquet versions add some) survive a decode-edit-encode round trip byte for byte; a generated
binding would drop them. Only what :mod:`spark_app.iceberg.parquet_stitch` edits is named there, by field id.
"""

from __future__ import annotations

from dataclasses import dataclass, field

STOP, TRUE, FALSE, BYTE, I16, I32, I64, DOUBLE, BINARY, LIST, SET, MAP, STRUCT = range(13)
_INTEGERS = (I16, I32, I64)


class ThriftError(ValueError):
    """The bytes are not a well-formed compact-protocol struct."""


@dataclass
class Field:
    """One field of a struct: its id, its compact wire type and its value (see :data:`Value`)."""

    id: int
    type: int
    value: Value


@dataclass
class Struct:
    fields: list[Field] = field(default_factory=list)

    def get(self, field_id: int) -> Field | None:
        """The field with ``field_id``, or None when the struct does not carry it."""
        return next((f for f in self.fields if f.id == field_id), None)


@dataclass
class List:
    """A list or set: the elements' wire type and the elements."""

    element_type: int
    items: list[Value]
    is_set: bool = False


@dataclass
class Map:
    key_type: int
    value_type: int
    items: list[tuple[Value, Value]]


# bool (fields), int (byte, i16, i32, i64, and bools inside lists as their wire byte), bytes (binary;
# a double's 8 raw bytes, kept as they are so that NaN payloads survive).
Value = bool | int | bytes | Struct | List | Map


class _Reader:
    def __init__(self, data: bytes):
        self._data = memoryview(data)
        self.position = 0

    def byte(self) -> int:
        if self.position >= len(self._data):
            raise ThriftError("the struct ends before its stop field")
        value = self._data[self.position]
        self.position += 1
        return value

    def take(self, count: int) -> bytes:
        if count < 0 or self.position + count > len(self._data):
            raise ThriftError("a value runs past the end of the struct")
        value = bytes(self._data[self.position:self.position + count])
        self.position += count
        return value

    def varint(self) -> int:
        result = shift = 0
        while True:
            byte = self.byte()
            result |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return result
            shift += 7
            if shift > 70:
                raise ThriftError("a varint is longer than 10 bytes")

    def zigzag(self) -> int:
        value = self.varint()
        return (value >> 1) ^ -(value & 1)

    def value(self, wire_type: int) -> Value:
        if wire_type in (TRUE, FALSE):  # only inside a list or map: one byte of its own
            return self.byte()
        if wire_type == BYTE:
            return self.byte()
        if wire_type in _INTEGERS:
            return self.zigzag()
        if wire_type == DOUBLE:
            return self.take(8)
        if wire_type == BINARY:
            return self.take(self.varint())
        if wire_type in (LIST, SET):
            header = self.byte()
            size = header >> 4
            if size == 15:
                size = self.varint()
            element_type = header & 0x0F
            return List(element_type, [self.value(element_type) for _ in range(size)], wire_type == SET)
        if wire_type == MAP:
            size = self.varint()
            if size == 0:
                return Map(0, 0, [])
            types = self.byte()
            key_type, value_type = types >> 4, types & 0x0F
            return Map(key_type, value_type, [(self.value(key_type), self.value(value_type)) for _ in range(size)])
        if wire_type == STRUCT:
            return self.struct()
        raise ThriftError(f"unknown compact wire type {wire_type}")

    def struct(self) -> Struct:
        fields: list[Field] = []
        last_id = 0
        while True:
            header = self.byte()
            wire_type = header & 0x0F
            if wire_type == STOP:
                return Struct(fields)
            delta = header >> 4
            field_id = last_id + delta if delta else self.zigzag()
            value: Value = wire_type == TRUE if wire_type in (TRUE, FALSE) else self.value(wire_type)
            fields.append(Field(field_id, wire_type, value))
            last_id = field_id


def decode_struct(data: bytes) -> tuple[Struct, int]:
    """The struct at the start of ``data`` and the number of bytes it takes."""
    reader = _Reader(data)
    return reader.struct(), reader.position


class _Writer:
    def __init__(self) -> None:
        self.out = bytearray()

    def varint(self, value: int) -> None:
        while value > 0x7F:
            self.out.append((value & 0x7F) | 0x80)
            value >>= 7
        self.out.append(value)

    def zigzag(self, value: int) -> None:
        self.varint((value << 1) ^ (value >> 63))

    def value(self, wire_type: int, value: Value) -> None:
        if wire_type in (TRUE, FALSE, BYTE):
            assert isinstance(value, int)
            self.out.append(value & 0xFF)
        elif wire_type in _INTEGERS:
            assert isinstance(value, int)
            self.zigzag(value)
        elif wire_type in (DOUBLE, BINARY):
            assert isinstance(value, bytes)
            if wire_type == BINARY:
                self.varint(len(value))
            self.out += value
        elif wire_type in (LIST, SET):
            assert isinstance(value, List)
            size = len(value.items)
            if size < 15:
                self.out.append(size << 4 | value.element_type)
            else:
                self.out.append(0xF0 | value.element_type)
                self.varint(size)
            for item in value.items:
                self.value(value.element_type, item)
        elif wire_type == MAP:
            assert isinstance(value, Map)
            self.varint(len(value.items))
            if value.items:
                self.out.append(value.key_type << 4 | value.value_type)
            for key, item in value.items:
                self.value(value.key_type, key)
                self.value(value.value_type, item)
        elif wire_type == STRUCT:
            assert isinstance(value, Struct)
            self.struct(value)
        else:
            raise ThriftError(f"unknown compact wire type {wire_type}")

    def struct(self, value: Struct) -> None:
        last_id = 0
        for item in value.fields:
            wire_type = (TRUE if item.value else FALSE) if item.type in (TRUE, FALSE) else item.type
            delta = item.id - last_id
            if 0 < delta <= 15:
                self.out.append(delta << 4 | wire_type)
            else:
                self.out.append(wire_type)
                self.zigzag(item.id)
            if item.type not in (TRUE, FALSE):
                self.value(item.type, item.value)
            last_id = item.id
        self.out.append(STOP)


def encode_struct(value: Struct) -> bytes:
    """``value`` in the compact protocol; ``encode_struct(decode_struct(b)[0]) == b`` for a struct b."""
    writer = _Writer()
    writer.struct(value)
    return bytes(writer.out)
