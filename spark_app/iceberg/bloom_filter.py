"""Parquet split-block Bloom filters: which key columns the sink writes them for, and probing them.

A Parquet Bloom filter (parquet-format BloomFilter.md) is a ``BloomFilterHeader`` (Thrift compact)
followed by a bitset of 256-bit blocks; a value's XXH64 hash picks a block with its upper half and
sets one bit in each of the block's eight 32-bit words with its lower half. A filter answers "not
here" exactly and "maybe here" with the false-positive rate it was sized for.

Written for: a keyed table's key columns (its schema's identifier fields), and any column Iceberg's
``write.parquet.bloom-filter-enabled.column.<name>`` table property turns on (or off: ``false``
turns off a key column's filter). ``write.parquet.bloom-filter-fpp.column.<name>`` sets the
false-positive rate (Iceberg's default 0.01; key columns 0.001: a trigger probes each filter with all
its keys, so a filter rules a row group out only when none of them is a false positive, and 1.5
bytes per key buy that for triggers of up to a few hundred keys) and ``write.parquet.bloom-filter-max-bytes`` caps one filter
(default 1 MiB), as in Iceberg's own writers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from pyiceberg.schema import Schema

from spark_app.iceberg.thrift_compact import I32, STRUCT, Struct, ThriftError, decode_struct

ENABLED_PROPERTY = "write.parquet.bloom-filter-enabled.column."
FPP_PROPERTY = "write.parquet.bloom-filter-fpp.column."
MAX_BYTES_PROPERTY = "write.parquet.bloom-filter-max-bytes"
DEFAULT_FPP = 0.01
KEY_COLUMN_FPP = 0.001
DEFAULT_MAX_BYTES = 1024 * 1024
HEADER_READ_BYTES = 64  # more than a BloomFilterHeader takes: it is four small fields

_SALT = np.array([0x47B6137B, 0x44974D91, 0x8824AD5B, 0xA2B7289D, 0x705495C7, 0x2DF1424B, 0x9EFC4947, 0x5C6BFB31],
                 dtype=np.uint32)
_WORDS_PER_BLOCK = 8
_BYTES_PER_BLOCK = 32
# BloomFilterHeader: numBytes, then unions whose only defined member is field 1 (the split-block
# algorithm, XXH64, no compression).
_NUM_BYTES, _ALGORITHM, _HASH, _COMPRESSION = 1, 2, 3, 4


def bloom_filter_columns(schema: Schema, properties: dict[str, str]) -> dict[str, float]:
    """The top-level columns to write Bloom filters for, with their false-positive rates."""
    names = {field.name for field in schema.fields}
    wanted = set(schema.identifier_field_names())
    for key, value in properties.items():
        if key.startswith(ENABLED_PROPERTY) and key[len(ENABLED_PROPERTY):] in names:
            column = key[len(ENABLED_PROPERTY):]
            (wanted.add if value.strip().lower() == "true" else wanted.discard)(column)
    keys = set(schema.identifier_field_names())
    return {name: float(properties.get(FPP_PROPERTY + name, KEY_COLUMN_FPP if name in keys else DEFAULT_FPP))
            for name in sorted(wanted)}


def write_options(columns: dict[str, float], rows: int, properties: dict[str, str]) -> dict[str, Any]:
    """pyarrow's ``bloom_filter_options`` for row groups of about ``rows`` rows ({} for no columns).

    Filters are sized for ``rows`` distinct values, capped so that none exceeds the max-bytes
    property (a larger row group then has a higher false-positive rate, never a wrong answer).
    """
    max_bytes = int(properties.get(MAX_BYTES_PROPERTY, DEFAULT_MAX_BYTES))
    options = {}
    for name, fpp in columns.items():
        bits_per_value = -8 / math.log(1 - fpp ** (1 / 8))  # the split-block filter's sizing formula
        options[name] = {"ndv": max(1, min(rows, int(max_bytes * 8 / bits_per_value))), "fpp": fpp}
    return {"bloom_filter_options": options} if options else {}


@dataclass(frozen=True)
class SplitBlockBloomFilter:
    """One column chunk's Bloom filter: its bitset as ``(blocks, 8)`` 32-bit words."""

    blocks: np.ndarray

    @property
    def nbytes(self) -> int:
        return int(self.blocks.nbytes)

    def may_contain(self, hashes: np.ndarray) -> np.ndarray:
        """Per uint64 hash: False where the value is certainly absent, True where it may be present."""
        count = np.uint64(self.blocks.shape[0])
        block = (((hashes >> np.uint64(32)) * count) >> np.uint64(32)).astype(np.int64)
        key = (hashes & np.uint64(0xFFFFFFFF)).astype(np.uint32)
        words = self.blocks[block]
        present = np.ones(len(hashes), dtype=bool)
        for index in range(_WORDS_PER_BLOCK):
            bit = (key * _SALT[index]) >> np.uint32(27)
            present &= ((words[:, index] >> bit) & np.uint32(1)).astype(bool)
        return present


def parse_header(data: bytes) -> tuple[int, int] | None:
    """``(header bytes, bitset bytes)`` of the filter whose header starts ``data``; None when the header
    is not a split-block, XXH64, uncompressed filter (such a filter is not used for pruning)."""
    try:
        header, consumed = decode_struct(data)
    except ThriftError:
        return None
    size = header.get(_NUM_BYTES)
    if size is None or size.type != I32 or not isinstance(size.value, int) or size.value <= 0:
        return None
    if size.value % _BYTES_PER_BLOCK or not all(_is_first_member(header, union) for union in
                                                 (_ALGORITHM, _HASH, _COMPRESSION)):
        return None
    return consumed, size.value


def _is_first_member(header: Struct, field_id: int) -> bool:
    union = header.get(field_id)
    return (union is not None and union.type == STRUCT and isinstance(union.value, Struct)
            and [member.id for member in union.value.fields] == [1])


def from_bitset(bitset: bytes) -> SplitBlockBloomFilter:
    """The filter whose bitset (after the header) is ``bitset``."""
    return SplitBlockBloomFilter(np.frombuffer(bitset, dtype="<u4").reshape(-1, _WORDS_PER_BLOCK).astype(np.uint32))

