"""Deletion vectors: the positions deleted from one data file, as Iceberg's ``deletion-vector-v1`` blob.

The blob is written byte for byte as Apache Iceberg's Java ``BitmapPositionDeleteIndex.serialize``
writes it (Puffin spec, "deletion-vector-v1 blob type"):

- the length of magic + bitmap, 4 bytes big-endian;
- the magic ``D1 D3 39 64``;
- the positions as a 64-bit Roaring bitmap in the "portable" serialization (Java's
  ``RoaringPositionBitmap``): the number of 32-bit bitmaps, 8 bytes little-endian, then for each
  key (the high 32 bits of a position), ascending, the key as 4 bytes little-endian and the 32-bit
  Roaring bitmap of the low 32 bits in the standard format;
- a CRC-32 of magic + bitmap, 4 bytes big-endian.

The positions are a ``pyroaring.BitMap64`` (CRoaring's 64-bit bitmap), whose serialization is that
portable format; bitmaps are run-length encoded where that is smaller, as in Java. Only keys that
hold positions are written: Java also writes an empty bitmap for each key below the highest that
holds none (its bitmaps are an array indexed by key), which only positions of 2^32 and beyond can
cause; both are the spec's format and each reader reads both.
"""

from __future__ import annotations

import array
import zlib
from collections.abc import Iterable, Iterator

import numpy as np
import pyarrow as pa
from pyroaring import BitMap, BitMap64

MAGIC = bytes.fromhex("d1d33964")
# The field id of ``_pos`` (Iceberg's MetadataColumns.ROW_POSITION): the blob's ``fields``.
ROW_POSITION_FIELD_ID = 2147483645
# Java's RoaringPositionBitmap.MAX_POSITION: keys stop below Integer.MAX_VALUE (its bitmap array's length).
MAX_KEY = 2**31 - 2
MAX_POSITION = (MAX_KEY << 32) | 0x80000000
_UINT64_LIMIT = 1 << 64


class DeletionVectorError(ValueError):
    """A deletion-vector blob that is not what the Puffin spec describes (truncated, corrupted, inconsistent)."""


class DeletionVector:
    """A set of deleted row positions of one data file (0 ≤ position ≤ :data:`MAX_POSITION`)."""

    __slots__ = ("_positions",)

    def __init__(self, positions: Iterable[int] | np.ndarray | pa.Array = ()) -> None:
        self._positions = BitMap64()
        self.update(positions)

    def update(self, positions: Iterable[int] | np.ndarray | pa.Array) -> DeletionVector:
        """Add ``positions`` (any iterable of ints; a numpy or Arrow integer array is added without a Python loop)."""
        if isinstance(positions, pa.Array):
            values = positions.to_numpy(zero_copy_only=False)
        else:
            values = positions if isinstance(positions, np.ndarray) else np.asarray(list(positions))
        if values.size == 0:
            return self
        if values.dtype.kind not in "iu":
            raise ValueError(f"row positions must be integers, not {values.dtype}")
        _check_position(int(values.min()))
        _check_position(int(values.max()))
        unsigned = array.array("Q")
        unsigned.frombytes(values.astype(np.uint64, copy=False).tobytes())
        self._positions.update(unsigned)
        return self

    def add_range(self, start: int, stop: int) -> DeletionVector:
        """Add every position in ``[start, stop)``."""
        if start >= stop:
            return self
        _check_position(start)
        _check_position(stop - 1)
        self._positions.add_range(start, stop)
        return self

    def union(self, other: DeletionVector) -> DeletionVector:
        """A new vector with the positions of both (``self`` and ``other`` are left as they are)."""
        result = DeletionVector()
        result._positions = self._positions | other._positions
        return result

    @property
    def cardinality(self) -> int:
        return len(self._positions)

    def __len__(self) -> int:
        return self.cardinality

    def __contains__(self, position: object) -> bool:
        return isinstance(position, int) and 0 <= position < _UINT64_LIMIT and position in self._positions

    def __iter__(self) -> Iterator[int]:
        return iter(self._positions)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, DeletionVector):
            return NotImplemented
        return self._positions == other._positions

    __hash__ = None  # type: ignore[assignment]  # mutable

    def __repr__(self) -> str:
        return f"DeletionVector(cardinality={self.cardinality})"

    def to_numpy(self) -> np.ndarray:
        """The positions, ascending, as int64."""
        return np.frombuffer(self._positions.to_array(), dtype=np.uint64).astype(np.int64)

    def serialize(self) -> bytes:
        """The ``deletion-vector-v1`` blob (see the module docstring)."""
        self._positions.run_optimize()
        data = MAGIC + self._positions.serialize()
        return len(data).to_bytes(4, "big") + data + zlib.crc32(data).to_bytes(4, "big")

    @classmethod
    def deserialize(cls, blob: bytes, cardinality: int | None = None) -> DeletionVector:
        """Read a ``deletion-vector-v1`` blob, checking its length, magic and CRC (and ``cardinality`` when given).

        Raises :class:`DeletionVectorError` when any of them is wrong.
        """
        if len(blob) < 4 + len(MAGIC) + 8 + 4:
            raise DeletionVectorError(f"deletion vector blob of {len(blob)} bytes is too short")
        length = int.from_bytes(blob[:4], "big")
        if length != len(blob) - 8:
            raise DeletionVectorError(f"invalid bitmap data length {length}, expected {len(blob) - 8} (blob of {len(blob)} bytes)")
        data = blob[4:4 + length]
        if data[:4] != MAGIC:
            raise DeletionVectorError(f"invalid deletion vector magic {data[:4].hex()}, expected {MAGIC.hex()}")
        crc, expected = zlib.crc32(data), int.from_bytes(blob[4 + length:], "big")
        if crc != expected:
            raise DeletionVectorError(f"invalid deletion vector CRC 0x{crc:08x}, expected 0x{expected:08x}")
        vector = cls()
        vector._positions = _read_positions(data[4:])
        if cardinality is not None and vector.cardinality != cardinality:
            raise DeletionVectorError(f"deletion vector holds {vector.cardinality} positions, expected {cardinality}")
        return vector


def _check_position(position: int) -> None:
    if not 0 <= position <= MAX_POSITION:
        raise ValueError(f"row position {position} is outside [0, {MAX_POSITION}]")


def _read_positions(data: bytes) -> BitMap64:
    """The portable 64-bit serialization as a bitmap, every byte of it read and each key at most :data:`MAX_KEY`.

    CRoaring reads it; a blob it writes back byte for byte (ours and Java's below 2^32) is taken as read.
    Any other (refused by CRoaring, bytes left over, keys too large, or Java's empty bitmaps of keys
    that hold no positions) is walked bitmap by bitmap to name what is wrong, if anything.
    """
    try:
        positions = BitMap64.deserialize(data)
    except ValueError as error:
        _check_layout(data)
        raise DeletionVectorError(f"deletion vector bitmap is invalid: {error}") from error
    if positions.serialize() != data or (positions and positions.max() >> 32 > MAX_KEY):
        _check_layout(data)
    return positions


def _check_layout(data: bytes) -> None:
    """Raise :class:`DeletionVectorError` naming the first thing in ``data`` that breaks the portable format."""
    count = int.from_bytes(data[:8], "little")
    offset, last = 8, -1
    for read in range(count):
        if offset + 4 > len(data):
            raise DeletionVectorError(f"deletion vector truncated: {count} bitmaps announced, {read} read")
        key = int.from_bytes(data[offset:offset + 4], "little")
        if key <= last:
            raise DeletionVectorError("deletion vector keys are not in ascending order")
        if key > MAX_KEY:
            raise DeletionVectorError(f"deletion vector key {key} is too large (at most {MAX_KEY})")
        offset += 4
        try:
            bitmap = BitMap.deserialize(data[offset:])
        except ValueError as error:
            raise DeletionVectorError(f"deletion vector bitmap of key {key} is invalid: {error}") from error
        offset += len(bitmap.serialize())  # CRoaring keeps each container's type: the same bytes again
        last = key
    if offset != len(data):
        raise DeletionVectorError(f"deletion vector has {len(data) - offset} bytes after its {count} bitmaps")
