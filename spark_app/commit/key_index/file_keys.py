"""Each data file's key summary (row groups, their key statistics and Bloom filters), cached by path.

A summary is read from the file's footer and the Bloom filters it points to. A data file is
immutable, so a summary cached by the file's path is valid for as long as the path is: the cache can
only miss, never mislead. Its size is bounded in bytes (least recently used summaries go first), so
the driver's memory does not grow with the table.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from spark_app.iceberg.bloom_filter import (
    HEADER_READ_BYTES,
    SplitBlockBloomFilter,
    from_bitset,
    parse_header,
)

DEFAULT_CACHE_BYTES = 128 * 1024 * 1024
_ROW_GROUP_OVERHEAD_BYTES = 200  # what a summary costs besides its Bloom filter, roughly
_FIELD_ID = b"PARQUET:field_id"


@dataclass(frozen=True)
class RowGroupKeys:
    """One row group: its rows and what bounds its first key column's values."""

    rows: int
    lower: Any  # the statistics' min and max (None: not recorded)
    upper: Any
    bloom: SplitBlockBloomFilter | None  # None: no usable filter


@dataclass(frozen=True)
class FileKeys:
    """A data file's key columns (its own names of the key field ids, in key order) and row groups."""

    columns: tuple[str, ...]
    first_type: pa.DataType | None  # the Arrow type of the first key column in this file
    row_groups: tuple[RowGroupKeys, ...]

    @property
    def nbytes(self) -> int:
        return sum(_ROW_GROUP_OVERHEAD_BYTES + (g.bloom.nbytes if g.bloom else 0) for g in self.row_groups)


def read_file_keys(stream: Any, key_field_ids: tuple[int, ...]) -> FileKeys:
    """The summary of the Parquet file open as ``stream`` for the key columns ``key_field_ids``; a file
    without some key column (written before it existed) has no row groups: it holds no key."""
    parquet = pq.ParquetFile(stream)
    by_id = {int(f.metadata[_FIELD_ID]): f for f in parquet.schema_arrow if f.metadata and _FIELD_ID in f.metadata}
    if not all(field_id in by_id for field_id in key_field_ids):
        return FileKeys((), None, ())
    first = by_id[key_field_ids[0]]
    column = parquet.schema_arrow.get_field_index(first.name)
    groups = []
    for index in range(parquet.metadata.num_row_groups):
        chunk = parquet.metadata.row_group(index).column(column)
        statistics = chunk.statistics
        bounded = statistics is not None and statistics.has_min_max
        groups.append(RowGroupKeys(parquet.metadata.row_group(index).num_rows,
                                   statistics.min if bounded else None, statistics.max if bounded else None,
                                   _read_bloom(stream, chunk.bloom_filter_offset, chunk.bloom_filter_length)))
    return FileKeys(tuple(by_id[i].name for i in key_field_ids), first.type, tuple(groups))


def _read_bloom(stream: Any, offset: int | None, length: int | None) -> SplitBlockBloomFilter | None:
    if not offset or offset < 0:
        return None
    stream.seek(offset)
    head = stream.read(length if length and length > 0 else HEADER_READ_BYTES)
    parsed = parse_header(head)
    if parsed is None:
        return None
    header_bytes, bitset_bytes = parsed
    bitset = head[header_bytes:header_bytes + bitset_bytes]
    if len(bitset) < bitset_bytes:
        bitset += stream.read(bitset_bytes - len(bitset))
    return from_bitset(bitset) if len(bitset) == bitset_bytes else None


class FileKeysCache:
    """Summaries by (file path, key field ids), least recently used first out beyond ``max_bytes``."""

    def __init__(self, max_bytes: int = DEFAULT_CACHE_BYTES):
        self.max_bytes = max_bytes
        self._entries: OrderedDict[tuple[str, tuple[int, ...]], FileKeys] = OrderedDict()
        self._bytes = 0
        self.hits = 0
        self.misses = 0

    def get(self, path: str, key_field_ids: tuple[int, ...], read: Callable[[], FileKeys]) -> FileKeys:
        """The summary of ``path``, from the cache or else from ``read()`` (then cached)."""
        entry = (path, key_field_ids)
        found = self._entries.get(entry)
        if found is not None:
            self._entries.move_to_end(entry)
            self.hits += 1
            return found
        self.misses += 1
        summary = read()
        self._entries[entry] = summary
        self._bytes += summary.nbytes
        while self._bytes > self.max_bytes and len(self._entries) > 1:
            _, evicted = self._entries.popitem(last=False)
            self._bytes -= evicted.nbytes
        return summary
