"""Stitch Parquet files of one schema into one file by copying their row groups as they are.

A Parquet file is ``PAR1``, its row groups' column chunks, a Thrift-encoded footer
(``FileMetaData``), the footer's length and ``PAR1``. Files written with one schema can therefore be
joined without decoding a value: copy each file's body after the previous one's and write a footer
that lists every row group, with each absolute byte offset moved by where its file's body landed.
Pages, dictionaries, compression and statistics are the originals', so the rows and the column
statistics are exactly those of the pieces, at the cost of one row group per piece.

Pieces that cannot be joined this way are refused (:class:`StitchRefused`) by :func:`plan_stitch`,
before anything is written: differing schemas or file metadata, encryption, column chunks in other files, or an offset
index (its page locations are absolute offsets inside the body, which this does not rewrite).
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, replace
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from pyiceberg.io import OutputStream

from spark_app.iceberg.thrift_compact import (
    I16,
    I64,
    LIST,
    STRUCT,
    Field,
    List,
    Struct,
    ThriftError,
    decode_struct,
    encode_struct,
)

MAGIC = b"PAR1"
_TAIL_BYTES = 8  # the footer's length (4 bytes, little endian) and the closing magic
_COPY_CHUNK_BYTES = 8 * 1024 * 1024

# Thrift field ids of parquet.thrift (FileMetaData, RowGroup, ColumnChunk, ColumnMetaData).
_FILE_NUM_ROWS, _FILE_ROW_GROUPS = 3, 4
_FILE_ENCRYPTION = (8, 9)  # encryption_algorithm, footer_signing_key_metadata
_ROW_GROUP_COLUMNS, _ROW_GROUP_FILE_OFFSET, _ROW_GROUP_ORDINAL = 1, 5, 7
_CHUNK_FILE_PATH, _CHUNK_FILE_OFFSET, _CHUNK_META_DATA = 1, 2, 3
_CHUNK_OFFSET_INDEX_OFFSET = 4
_CHUNK_ABSOLUTE_OFFSETS = (_CHUNK_FILE_OFFSET, 6)  # file_offset, column_index_offset
_CHUNK_ENCRYPTION = (8, 9)  # crypto_metadata, encrypted_column_metadata
_META_ABSOLUTE_OFFSETS = (9, 10, 11, 14)  # data_page, index_page, dictionary_page, bloom_filter offsets


class StitchRefused(Exception):
    """The pieces cannot be joined by copying row groups; write their rows again instead."""


@dataclass(frozen=True)
class Footer:
    """A Parquet file's decoded footer and the size of its body (the bytes between magic and footer)."""

    metadata: Struct
    body_size: int


Opener = Callable[[], AbstractContextManager[Any]]  # opens a piece as a seekable binary stream


@dataclass(frozen=True)
class Piece:
    """A Parquet file to stitch: how to open it and its size in bytes."""

    open: Opener
    size: int


def read_footer(stream: Any, size: int) -> Footer:
    """The footer of the Parquet file of ``size`` bytes behind the seekable ``stream``."""
    if size < len(MAGIC) + _TAIL_BYTES:
        raise StitchRefused(f"{size} bytes are too few for a Parquet file")
    stream.seek(size - _TAIL_BYTES)
    tail = stream.read(_TAIL_BYTES)
    if len(tail) != _TAIL_BYTES or tail[4:] != MAGIC:
        raise StitchRefused("not a Parquet file (no closing magic)")
    (footer_size,) = struct.unpack("<I", tail[:4])
    body_size = size - len(MAGIC) - _TAIL_BYTES - footer_size
    if body_size < 0:
        raise StitchRefused("the footer's length exceeds the file")
    stream.seek(len(MAGIC) + body_size)
    encoded = stream.read(footer_size)
    try:
        metadata, used = decode_struct(encoded)
    except ThriftError as error:
        raise StitchRefused(f"unreadable footer: {error}") from error
    if used != footer_size:
        raise StitchRefused("the footer holds bytes after its struct")
    return Footer(metadata, body_size)


def _shifted(item: Field, shift: int) -> Field:
    """The offset field ``item`` moved by ``shift`` bytes."""
    if item.type != I64 or not isinstance(item.value, int):
        raise StitchRefused(f"offset field {item.id} is not an i64")
    return replace(item, value=item.value + shift)


def _moved_row_group(row_group: Struct, shift: int, ordinal: int) -> Struct:
    """``row_group`` with every absolute offset moved by ``shift`` bytes and the given ordinal."""
    fields = []
    for item in row_group.fields:
        if item.id == _ROW_GROUP_COLUMNS:
            assert isinstance(item.value, List)
            item = replace(item, value=List(item.value.element_type,
                                            [_moved_chunk(chunk, shift) for chunk in item.value.items]))
        elif item.id == _ROW_GROUP_FILE_OFFSET:
            item = _shifted(item, shift)
        elif item.id == _ROW_GROUP_ORDINAL:
            item = Field(item.id, I16, ordinal)
        fields.append(item)
    return Struct(fields)


def _moved_chunk(chunk: Any, shift: int) -> Struct:
    if not isinstance(chunk, Struct):
        raise StitchRefused("a column chunk is not a struct")
    for unsupported, why in ((_CHUNK_FILE_PATH, "a column chunk lives in another file"),
                             (_CHUNK_OFFSET_INDEX_OFFSET, "the file has an offset index"),
                             *((field_id, "the file is encrypted") for field_id in _CHUNK_ENCRYPTION)):
        if chunk.get(unsupported) is not None:
            raise StitchRefused(why)
    fields = []
    for item in chunk.fields:
        if item.id in _CHUNK_ABSOLUTE_OFFSETS:
            item = _shifted(item, shift)
        elif item.id == _CHUNK_META_DATA:
            assert isinstance(item.value, Struct)
            item = replace(item, value=_moved_metadata(item.value, shift))
        fields.append(item)
    return Struct(fields)


def _moved_metadata(metadata: Struct, shift: int) -> Struct:
    fields = []
    for item in metadata.fields:
        if item.id in _META_ABSOLUTE_OFFSETS:
            item = _shifted(item, shift)
        fields.append(item)
    return Struct(fields)


def _row_groups(metadata: Struct) -> list[Struct]:
    found = metadata.get(_FILE_ROW_GROUPS)
    if found is None:
        return []
    if not isinstance(found.value, List) or not all(isinstance(g, Struct) for g in found.value.items):
        raise StitchRefused("the footer's row groups are not a list of structs")
    return [g for g in found.value.items if isinstance(g, Struct)]


def _shared_fields(metadata: Struct) -> bytes:
    """Everything of a footer but its row count and row groups: what stitched pieces must share."""
    return encode_struct(Struct([f for f in metadata.fields if f.id not in (_FILE_NUM_ROWS, _FILE_ROW_GROUPS)]))


def stitched_footer(footers: Sequence[Footer]) -> bytes:
    """The encoded footer of the pieces' bodies written one after another, in order, after the magic."""
    if not footers:
        raise StitchRefused("nothing to stitch")
    first = footers[0].metadata
    if any(first.get(field_id) is not None for field_id in _FILE_ENCRYPTION):
        raise StitchRefused("the file is encrypted")
    shared = _shared_fields(first)
    row_groups: list[Struct] = []
    rows = 0
    position = len(MAGIC)
    for footer in footers:
        if _shared_fields(footer.metadata) != shared:
            raise StitchRefused("the pieces differ in schema or file metadata")
        shift = position - len(MAGIC)
        for row_group in _row_groups(footer.metadata):
            row_groups.append(_moved_row_group(row_group, shift, len(row_groups)))
        num_rows = footer.metadata.get(_FILE_NUM_ROWS)
        if num_rows is None or not isinstance(num_rows.value, int):
            raise StitchRefused("a footer has no row count")
        rows += num_rows.value
        position += footer.body_size
    fields = []
    for item in first.fields:
        if item.id == _FILE_NUM_ROWS:
            item = Field(item.id, I64, rows)
        elif item.id == _FILE_ROW_GROUPS:
            item = Field(item.id, LIST, List(STRUCT, list(row_groups)))
        fields.append(item)
    return encode_struct(Struct(fields))


def metadata_of_footer(footer: bytes) -> pq.FileMetaData:
    """pyarrow's view of an encoded footer (parsed, so a footer pyarrow cannot read fails here)."""
    tail = struct.pack("<I", len(footer)) + MAGIC
    return pq.read_metadata(pa.BufferReader(MAGIC + footer + tail))


@dataclass(frozen=True)
class Stitch:
    """Pieces whose footers were read and checked, and the footer of the file that joins them."""

    pieces: tuple[Piece, ...]
    footers: tuple[Footer, ...]
    footer: bytes
    metadata: pq.FileMetaData

    @property
    def size(self) -> int:
        return len(MAGIC) + sum(f.body_size for f in self.footers) + len(self.footer) + _TAIL_BYTES

    def write_to(self, out: OutputStream) -> None:
        """Write the pieces' row groups, in order, then the new footer: one Parquet file of :attr:`size` bytes."""
        out.write(MAGIC)
        for piece, piece_footer in zip(self.pieces, self.footers, strict=True):
            with piece.open() as stream:
                stream.seek(len(MAGIC))
                remaining = piece_footer.body_size
                while remaining:
                    chunk = stream.read(min(remaining, _COPY_CHUNK_BYTES))
                    if not chunk:
                        raise OSError("a piece ended before its footer while being copied")
                    out.write(chunk)
                    remaining -= len(chunk)
        out.write(self.footer)
        out.write(struct.pack("<I", len(self.footer)) + MAGIC)


def plan_stitch(pieces: Sequence[Piece]) -> Stitch:
    """Read and check every piece's footer; raises :class:`StitchRefused` when they cannot be joined."""
    footers = []
    for piece in pieces:
        with piece.open() as stream:
            footers.append(read_footer(stream, piece.size))
    footer = stitched_footer(footers)
    return Stitch(tuple(pieces), tuple(footers), footer, metadata_of_footer(footer))
