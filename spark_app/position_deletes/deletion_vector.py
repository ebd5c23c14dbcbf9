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

Bitmaps are run-length encoded where that is smaller, as in Java. Only keys that hold positions are
written: Java also writes an empty bitmap for each key below the highest that holds none (its
bitmaps are an array indexed by key), which only positions of 2^32 and beyond can cause; both are the
spec's format and each reader reads both, but a dense array of keys up to 2^31 would not fit in
memory here. The 32-bit bitmaps are pyroaring's (CRoaring).
"""

from __future__ import annotations

import array
import zlib
from collections.abc import Iterable, Iterator

import numpy as np
import pyarrow as pa
from pyroaring import BitMap

MAGIC = bytes.fromhex("d1d33964")
# The field id of ``_pos`` (Iceberg's MetadataColumns.ROW_POSITION): the blob's ``fields``.
ROW_POSITION_FIELD_ID = 2147483645
# Java's RoaringPositionBitmap.MAX_POSITION: keys stop below Integer.MAX_VALUE (its bitmap array's length).
MAX_KEY = 2**31 - 2
MAX_POSITION = (MAX_KEY << 32) | 0x80000000
_LOW = 0xFFFFFFFF


class DeletionVectorError(ValueError):
    """A deletion-vector blob that is not what the Puffin spec describes (truncated, corrupted, inconsistent)."""


class DeletionVector:
    """A set of deleted row positions of one data file (0 ≤ position ≤ :data:`MAX_POSITION`)."""

    __slots__ = ("_bitmaps",)

    def __init__(self, positions: Iterable[int] | np.ndarray | pa.Array = ()) -> None:
        self._bitmaps: dict[int, BitMap] = {}  # key (high 32 bits) -> the low 32 bits of its positions
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
        low, high = int(values.min()), int(values.max())
        _check_position(low)
        _check_position(high)
        values = values.astype(np.int64, copy=False)
        keys = values >> 32
        for key in np.unique(keys).tolist():
            subset = values[keys == key] if low >> 32 != high >> 32 else values
            self._bitmap(key).update(array.array("I", (subset & _LOW).astype(np.uint32).tobytes()))
        return self

    def add_range(self, start: int, stop: int) -> DeletionVector:
        """Add every position in ``[start, stop)``."""
        if start >= stop:
            return self
        _check_position(start)
        _check_position(stop - 1)
        for key in range(start >> 32, ((stop - 1) >> 32) + 1):
            first = max(start, key << 32) & _LOW
            end = min(stop, (key + 1) << 32) - (key << 32)
            self._bitmap(key).add_range(first, end)
        return self

    def union(self, other: DeletionVector) -> DeletionVector:
        """A new vector with the positions of both (``self`` and ``other`` are left as they are)."""
        result = DeletionVector()
        for key in sorted(self._bitmaps.keys() | other._bitmaps.keys()):
            result._bitmaps[key] = self._bitmaps.get(key, BitMap()) | other._bitmaps.get(key, BitMap())
        return result

    def _bitmap(self, key: int) -> BitMap:
        if key not in self._bitmaps:
            self._bitmaps[key] = BitMap()
            self._bitmaps = dict(sorted(self._bitmaps.items()))
        return self._bitmaps[key]

    @property
    def cardinality(self) -> int:
        return sum(len(bitmap) for bitmap in self._bitmaps.values())

    def __len__(self) -> int:
        return self.cardinality

    def __contains__(self, position: object) -> bool:
        if not isinstance(position, int) or position < 0:
            return False
        bitmap = self._bitmaps.get(position >> 32)
        return bitmap is not None and (position & _LOW) in bitmap

    def __iter__(self) -> Iterator[int]:
        for key, bitmap in self._bitmaps.items():
            base = key << 32
            for low in bitmap:
                yield base + low

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, DeletionVector):
            return NotImplemented
        return self._nonempty() == other._nonempty()

    def _nonempty(self) -> dict[int, BitMap]:
        return {key: bitmap for key, bitmap in self._bitmaps.items() if bitmap}

    __hash__ = None  # type: ignore[assignment]  # mutable

    def __repr__(self) -> str:
        return f"DeletionVector(cardinality={self.cardinality})"

    def to_numpy(self) -> np.ndarray:
        """The positions, ascending, as int64."""
        parts = [np.frombuffer(bitmap.to_array(), dtype=np.uint32).astype(np.int64) + (key << 32)
                 for key, bitmap in self._bitmaps.items() if bitmap]
        return np.concatenate(parts) if parts else np.empty(0, dtype=np.int64)

    def serialize(self) -> bytes:
        """The ``deletion-vector-v1`` blob (see the module docstring)."""
        bitmaps = self._nonempty()
        parts = [MAGIC, len(bitmaps).to_bytes(8, "little")]
        for key, bitmap in bitmaps.items():
            bitmap.run_optimize()
            parts += [key.to_bytes(4, "little"), bitmap.serialize()]
        data = b"".join(parts)
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
        vector._bitmaps = _read_bitmaps(memoryview(data)[4:])
        if cardinality is not None and vector.cardinality != cardinality:
            raise DeletionVectorError(f"deletion vector holds {vector.cardinality} positions, expected {cardinality}")
        return vector


def _check_position(position: int) -> None:
    if not 0 <= position <= MAX_POSITION:
        raise ValueError(f"row position {position} is outside [0, {MAX_POSITION}]")


def _read_bitmaps(data: memoryview) -> dict[int, BitMap]:
    """The portable 64-bit serialization: a count, then (key, 32-bit bitmap) with ascending keys."""
    count = int.from_bytes(data[:8], "little")
    offset, bitmaps, last = 8, dict[int, BitMap](), -1
    for _ in range(count):
        if offset + 4 > len(data):
            raise DeletionVectorError(f"deletion vector truncated: {count} bitmaps announced, {len(bitmaps)} read")
        key = int.from_bytes(data[offset:offset + 4], "little")
        if key <= last:
            raise DeletionVectorError("deletion vector keys are not in ascending order")
        if key > MAX_KEY:
            raise DeletionVectorError(f"deletion vector key {key} is too large (at most {MAX_KEY})")
        offset += 4
        try:
            bitmap = BitMap.deserialize(bytes(data[offset:]))
        except ValueError as error:
            raise DeletionVectorError(f"deletion vector bitmap of key {key} is invalid: {error}") from error
        offset += len(bitmap.serialize())  # CRoaring keeps each container's type: the same bytes again
        bitmaps[key], last = bitmap, key
    if offset != len(data):
        raise DeletionVectorError(f"deletion vector has {len(data) - offset} bytes after its {count} bitmaps")
    return bitmaps
