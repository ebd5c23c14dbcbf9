"""Puffin files (Iceberg's Puffin spec, version 1): blobs plus a JSON footer describing them.

Layout: ``Magic Blob₁ … Blobₙ Footer``, the footer being ``Magic FooterPayload FooterPayloadSize Flags Magic``
with the magic ``PFA1``, the payload size a 4-byte little-endian int and 4 flag bytes. Written as
Apache Iceberg's Java ``PuffinWriter`` writes it (byte for byte: compact JSON in the same key order,
``compression-codec`` and empty ``properties`` left out), uncompressed only: deletion vectors are never
compressed, and a compressed footer (LZ4) or blob is refused on read with a clear error.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, BinaryIO, Protocol

MAGIC = b"PFA1"
_FOOTER_STRUCT = 4 + 4 + len(MAGIC)  # payload size, flags, magic
_FOOTER_COMPRESSED = 0x01  # flags byte 0, bit 0


class PuffinError(ValueError):
    """A file that is not a Puffin file as the spec describes it, or one this module does not read."""


@dataclass(frozen=True)
class Blob:
    """One blob to write: its bytes and what the footer says about them."""

    type: str
    fields: tuple[int, ...]
    snapshot_id: int
    sequence_number: int
    data: bytes
    properties: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class BlobMetadata:
    """A blob as the footer describes it: where it lies in the file."""

    type: str
    fields: tuple[int, ...]
    snapshot_id: int
    sequence_number: int
    offset: int
    length: int
    compression_codec: str | None = None
    properties: Mapping[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        result: dict[str, Any] = {"type": self.type, "fields": list(self.fields), "snapshot-id": self.snapshot_id,
                                  "sequence-number": self.sequence_number, "offset": self.offset, "length": self.length}
        if self.compression_codec is not None:
            result["compression-codec"] = self.compression_codec
        if self.properties:
            result["properties"] = dict(self.properties)
        return result

    @classmethod
    def from_json(cls, value: dict[str, Any]) -> BlobMetadata:
        try:
            return cls(str(value["type"]), tuple(int(f) for f in value["fields"]), int(value["snapshot-id"]),
                       int(value["sequence-number"]), int(value["offset"]), int(value["length"]),
                       value.get("compression-codec"), {str(k): str(v) for k, v in value.get("properties", {}).items()})
        except (KeyError, TypeError, ValueError) as error:
            raise PuffinError(f"invalid blob metadata in the Puffin footer: {value!r} ({error})") from error


@dataclass(frozen=True)
class Footer:
    blobs: tuple[BlobMetadata, ...]
    properties: Mapping[str, str]
    size: int  # bytes, from the footer's first magic to the end of the file


def write_puffin(stream: BinaryIO, blobs: Iterable[Blob], properties: Mapping[str, str]) -> tuple[list[BlobMetadata], int]:
    """Write a Puffin file of ``blobs`` (uncompressed) to ``stream``; return the blobs' metadata and the file size."""
    stream.write(MAGIC)
    position = len(MAGIC)
    written = []
    for blob in blobs:
        stream.write(blob.data)
        written.append(BlobMetadata(blob.type, tuple(blob.fields), blob.snapshot_id, blob.sequence_number,
                                    position, len(blob.data), None, dict(blob.properties)))
        position += len(blob.data)
    footer: dict[str, Any] = {"blobs": [b.to_json() for b in written]}
    if properties:
        footer["properties"] = dict(properties)
    payload = json.dumps(footer, separators=(",", ":"), ensure_ascii=False).encode()
    stream.write(MAGIC + payload + len(payload).to_bytes(4, "little") + bytes(4) + MAGIC)
    return written, position + len(MAGIC) + len(payload) + _FOOTER_STRUCT


class SeekableInput(Protocol):
    def seek(self, offset: int, whence: int = 0) -> int: ...

    def read(self, size: int = -1) -> bytes: ...


def _read_at(source: SeekableInput, offset: int, length: int) -> bytes:
    source.seek(offset)
    data = source.read(length)
    if len(data) != length:
        raise PuffinError(f"Puffin file truncated: {length} bytes wanted at offset {offset}, {len(data)} read")
    return data


def read_footer(source: SeekableInput, file_size: int) -> Footer:
    """The footer of the Puffin file ``source`` (``file_size`` bytes long), checked against the spec."""
    if file_size < len(MAGIC) + len(MAGIC) + _FOOTER_STRUCT:
        raise PuffinError(f"not a Puffin file: {file_size} bytes is shorter than an empty one")
    if _read_at(source, 0, len(MAGIC)) != MAGIC:
        raise PuffinError("not a Puffin file: no PFA1 magic at its start")
    struct = _read_at(source, file_size - _FOOTER_STRUCT, _FOOTER_STRUCT)
    if struct[8:] != MAGIC:
        raise PuffinError("not a Puffin file: no PFA1 magic at its end")
    payload_size = int.from_bytes(struct[:4], "little", signed=True)
    flags = struct[4:8]
    if flags[0] & _FOOTER_COMPRESSED:
        raise PuffinError("the Puffin footer is LZ4-compressed: not supported")
    if flags[0] & ~_FOOTER_COMPRESSED or any(flags[1:]):
        raise PuffinError(f"unknown Puffin footer flags {flags.hex()}")
    footer_size = len(MAGIC) + payload_size + _FOOTER_STRUCT
    if payload_size < 0 or footer_size > file_size - len(MAGIC):
        raise PuffinError(f"invalid Puffin footer payload size {payload_size} for a file of {file_size} bytes")
    footer_start = file_size - footer_size
    head = _read_at(source, footer_start, len(MAGIC) + payload_size)
    if head[:4] != MAGIC:
        raise PuffinError(f"not a Puffin file: no PFA1 magic at the footer's start (offset {footer_start})")
    try:
        document = json.loads(head[4:].decode())
        blobs = tuple(BlobMetadata.from_json(b) for b in document["blobs"])
        properties = {str(k): str(v) for k, v in document.get("properties", {}).items()}
    except (UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError, AttributeError) as error:
        raise PuffinError(f"invalid Puffin footer payload: {error}") from error
    for blob in blobs:
        if blob.offset < len(MAGIC) or blob.length < 0 or blob.offset + blob.length > footer_start:
            raise PuffinError(f"blob {blob.type} at [{blob.offset}, {blob.offset + blob.length}) is outside the "
                              f"file's blob area [4, {footer_start})")
    return Footer(blobs, properties, footer_size)


def read_blob(source: SeekableInput, blob: BlobMetadata) -> bytes:
    """The bytes of an uncompressed blob (a compressed one raises :class:`PuffinError`)."""
    if blob.compression_codec is not None:
        raise PuffinError(f"blob {blob.type} is compressed with {blob.compression_codec}: not supported")
    return _read_at(source, blob.offset, blob.length)
