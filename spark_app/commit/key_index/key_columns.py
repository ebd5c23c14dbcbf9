"""Row groups' key columns kept in the driver's memory, by (file path, key columns, row group).

Updates spread over a large table touch nearly every row group, so no pruning keeps a locate from
reading the key column of the whole table (docs/dataplane.md, "The key index"). A data file never
changes, so the key column a locate read from one of its row groups is kept, compact (an integer
key as offsets from the row group's minimum, 4 bytes a row while the row group's keys span less than
2**32; other keys as read), and later locates match against it instead of reading the file again:
the cache can only miss, never mislead, whatever commits, expiry, compaction or rollbacks did.

Its size is bounded in bytes, one bound for the driver (:data:`DRIVER_KEY_COLUMNS`, shared by the
committers of every table a sync writes: entries are told apart by file path). Each locate is a
round: a row group it uses is kept ahead of those it did not use, and a row group is admitted only
by evicting row groups no locate of this round used (least recently used first), never one this
round needs: a table whose candidate row groups hold more than the bound keeps what fits and reads
the rest each time, rather than reading everything because each row group evicted the next one's.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

DEFAULT_KEY_COLUMN_BYTES = 128 * 1024 * 1024
ESTIMATED_BYTES_PER_ROW = 8  # what the driver plans to keep per row read until it has seen a key column
_OVERHEAD_BYTES = 200
_UINT32_SPAN = 2**32

Entry = tuple[str, tuple[str, ...], int]  # (file path, the file's key column names, row group)


@dataclass(frozen=True)
class KeyColumn:
    """One row group's values of a one-column key.

    Signed integers without nulls: their ``lower`` and ``upper`` bound, and ``offsets`` from ``lower``
    (uint32 when the values span less than 2**32, else the int64 values themselves); other keys:
    ``values`` as read.
    """

    rows: int
    lower: int = 0
    upper: int = 0
    offsets: np.ndarray | None = None
    values: pa.Array | None = None

    @staticmethod
    def of(column: pa.Array | pa.ChunkedArray) -> KeyColumn:
        if isinstance(column, pa.ChunkedArray):
            column = column.combine_chunks()
        if not pa.types.is_signed_integer(column.type) or column.null_count or not len(column):
            return KeyColumn(len(column), values=column)
        numbers = column.to_numpy().astype(np.int64, copy=False)
        bounds = pc.min_max(column)
        lower, upper = int(bounds["min"].as_py()), int(bounds["max"].as_py())
        if upper - lower < _UINT32_SPAN:
            return KeyColumn(len(column), lower, upper, (numbers - lower).astype(np.uint32))
        return KeyColumn(len(column), lower, upper, numbers.copy())

    @property
    def compact(self) -> bool:
        return self.offsets is not None and self.offsets.dtype == np.uint32

    def integers(self) -> np.ndarray:
        """The int64 values (of an integer column)."""
        assert self.offsets is not None
        return self.offsets.astype(np.int64) + self.lower if self.compact else self.offsets

    @property
    def nbytes(self) -> int:
        held = self.offsets.nbytes if self.offsets is not None else (self.values.nbytes if self.values is not None else 0)
        return _OVERHEAD_BYTES + int(held)


class KeyColumnCache:
    """Key columns by :data:`Entry`, bounded by ``max_bytes``; see the module docstring for what stays."""

    def __init__(self, max_bytes: int = DEFAULT_KEY_COLUMN_BYTES):
        self.max_bytes = max_bytes
        self._entries: OrderedDict[Entry, tuple[KeyColumn, int]] = OrderedDict()
        self._bytes = 0
        self._round = 0
        self._round_bytes = 0  # of the entries this round used
        self.bytes_per_row = float(ESTIMATED_BYTES_PER_ROW)  # of the last key column offered
        self.hits = 0
        self.misses = 0

    def begin(self) -> None:
        """Start a round (one locate)."""
        self._round += 1
        self._round_bytes = 0

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def bytes(self) -> int:
        return self._bytes

    def room(self) -> int:
        """Bytes this round can still add: all but what its row groups already hold."""
        return max(0, self.max_bytes - self._round_bytes)

    def claim(self, entry: Entry) -> bool:
        """Whether the cache holds ``entry``, which this round then uses (so that nothing it admits evicts it)."""
        found = self._entries.get(entry)
        if found is None:
            return False
        column, used = found
        self._entries[entry] = (column, self._round)
        self._entries.move_to_end(entry)
        if used != self._round:
            self._round_bytes += column.nbytes
        return True

    def get(self, entry: Entry) -> KeyColumn | None:
        if not self.claim(entry):
            self.misses += 1
            return None
        self.hits += 1
        return self._entries[entry][0]

    def put(self, entry: Entry, column: KeyColumn) -> bool:
        """Keep ``column``; False when it does not fit without evicting what this round uses."""
        size = column.nbytes
        self.bytes_per_row = size / max(1, column.rows)
        if entry in self._entries or self._round_bytes + size > self.max_bytes:
            return False
        while self._bytes + size > self.max_bytes:
            oldest, (evicted, _) = next(iter(self._entries.items()))
            del self._entries[oldest]
            self._bytes -= evicted.nbytes
        self._entries[entry] = (column, self._round)
        self._bytes += size
        self._round_bytes += size
        return True


DRIVER_KEY_COLUMNS = KeyColumnCache()  # the driver's one cache, shared by the tables of a sync: one bound in all
