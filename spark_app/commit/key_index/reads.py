"""Reading a locate's candidate row groups: the positions of the rows holding the touched keys.

Runs in the driver or in a Spark task (:mod:`.tasks`); what it returns is bounded by the rows the
keys are in, not by the rows it reads.
"""

from __future__ import annotations

import bisect
import contextlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyiceberg.io import FileIO

from spark_app.commit.key_index.key_columns import KeyColumn, KeyColumnCache

POSITION_COLUMN = "__isync_position"


@dataclass(frozen=True)
class Candidate:
    """A data file's row groups that may hold a touched key: ``(row group, its first row's position)``."""

    path: str
    columns: tuple[str, ...]  # the file's own names of the key columns, in key order
    row_groups: tuple[tuple[int, int], ...]
    rows: int
    group_rows: tuple[int, ...] = ()  # the rows of each of ``row_groups``

    @property
    def size(self) -> int:  # what spreading candidates over tasks balances
        return self.rows


def read_candidates(io: FileIO, candidates: Sequence[Candidate], keys: pa.Table,
                    cache: KeyColumnCache | None = None) -> list[tuple[str, np.ndarray]]:
    """Per candidate file, the positions of its rows whose key is a row of ``keys``; with ``cache``, the key
    columns of a one-column key are taken from it where it has them and kept in it where it has room."""
    matcher = KeyMatcher(keys)
    return [(candidate.path, _matching_positions(io, candidate, matcher, cache)) for candidate in candidates]


def _matching_positions(io: FileIO, candidate: Candidate, matcher: KeyMatcher,
                        cache: KeyColumnCache | None) -> np.ndarray:
    """Positions, in the candidate's file, of its candidate row groups' rows whose key is one of ``matcher``'s."""
    matches: list[np.ndarray] = []
    columns = list(candidate.columns)
    one_column = cache is not None and len(columns) == 1
    parquet: pq.ParquetFile | None = None
    with contextlib.ExitStack() as opened:
        for index, offset in candidate.row_groups:
            cached = cache.get((candidate.path, candidate.columns, index)) if cache is not None and one_column else None
            if cached is not None:
                found = matcher.match(cached)
            else:
                if parquet is None:
                    parquet = pq.ParquetFile(opened.enter_context(io.new_input(candidate.path).open()))
                rows = parquet.read_row_group(index, columns=columns).select(columns)
                if cache is not None and one_column:
                    column = KeyColumn.of(rows.column(0))
                    cache.put((candidate.path, candidate.columns, index), column)
                    found = matcher.match(column)
                else:
                    found = matcher.positions(rows.rename_columns(list(matcher.keys.column_names)))
            if found.size:
                matches.append(found + offset)
    return np.concatenate(matches) if matches else np.empty(0, dtype=np.int64)


class KeyMatcher:
    """The touched keys, prepared once to be matched against many row groups' key columns.

    A key of one integer column (the common case: a database's sequence) is matched by a table of
    booleans over the row group's key range, built from the touched keys that lie in that range (the
    sorted keys, sliced by the column's min and max): a trigger whose keys are spread over a large table
    costs each row group a lookup per row, not a hash table of every touched key. A key of one string or
    binary column is matched by a hash lookup of the touched keys in the column's range; other keys by a
    hash lookup (one column) or a semi join (several).
    """

    def __init__(self, keys: pa.Table):
        self.keys = keys
        self._conformed: dict[pa.DataType, pa.ChunkedArray] = {}
        self._sorted: dict[pa.DataType | str, _SortedKeys | None] = {}

    def positions(self, rows: pa.Table) -> np.ndarray:
        """Positions within ``rows`` of the rows whose key is one of the touched keys (same key columns)."""
        if self.keys.num_columns > 1:
            conformed = _cast_like(self.keys, rows.schema)
            numbered = rows.append_column(POSITION_COLUMN, pa.array(np.arange(rows.num_rows, dtype=np.int64)))
            joined = numbered.join(conformed, keys=list(self.keys.column_names), join_type="left semi")
            return np.sort(joined.column(POSITION_COLUMN).to_numpy())
        return self.match(KeyColumn.of(rows.column(0)))

    def match(self, column: KeyColumn) -> np.ndarray:
        """Positions within a row group's key column (of a one-column key) of the rows holding a touched key."""
        if column.offsets is not None:
            touched = self._sorted_integers()
            if touched is not None:
                return np.flatnonzero(touched.mask_integers(column)).astype(np.int64)
            values = pa.array(column.integers())
        else:
            assert column.values is not None
            values = column.values
            touched = self._sorted_as(values.type)
            if touched is not None and not values.null_count and len(values):
                return np.flatnonzero(touched.mask(values)).astype(np.int64)
        mask = pc.is_in(values, value_set=self._conformed_as(values.type)).to_numpy(zero_copy_only=False)
        return np.flatnonzero(mask).astype(np.int64)

    def _sorted_integers(self) -> _SortedKeys | None:
        """The touched keys as int64 (a file written before an int key was promoted to long needs no cast)."""
        if _INTEGERS not in self._sorted:
            key = self.keys.column(0)
            self._sorted[_INTEGERS] = _SortedKeys.of(key) if pa.types.is_signed_integer(key.type) else None
        return self._sorted[_INTEGERS]

    def _conformed_as(self, arrow_type: pa.DataType) -> pa.ChunkedArray:
        """The touched keys as values of ``arrow_type`` (the type of the key column in a file)."""
        if arrow_type not in self._conformed:
            values = self.keys.column(0)
            self._conformed[arrow_type] = values if values.type == arrow_type else pc.cast(values, arrow_type)
        return self._conformed[arrow_type]

    def _sorted_as(self, arrow_type: pa.DataType) -> _SortedKeys | None:
        if arrow_type not in self._sorted:
            ordered = _SortedKeys.ordered(arrow_type)
            self._sorted[arrow_type] = _SortedKeys.of(self._conformed_as(arrow_type)) if ordered else None
        return self._sorted[arrow_type]


_INTEGERS = "int64"  # the key of the touched keys as integers, beside those by Arrow type
_INTEGER_TABLE_ROWS = 4  # a boolean table is used while the key range is at most this many times the rows


@dataclass(frozen=True)
class _SortedKeys:
    """The distinct touched values of a one-column key, sorted: integers as numpy, others as Python values."""

    values: pa.Array
    numbers: np.ndarray | None  # integer keys
    python: list[Any] | None  # string and binary keys (Arrow's order of UTF-8 and bytes is Python's)

    @staticmethod
    def ordered(arrow_type: pa.DataType) -> bool:
        """Whether values of ``arrow_type`` (not integers) sort in Arrow as in Python: strings and bytes."""
        return (pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type)
                or pa.types.is_binary(arrow_type) or pa.types.is_large_binary(arrow_type))

    @staticmethod
    def of(values: pa.ChunkedArray) -> _SortedKeys:
        unique = pc.drop_null(pc.unique(values))
        if isinstance(unique, pa.ChunkedArray):
            unique = unique.combine_chunks()
        unique = unique.take(pc.sort_indices(unique))
        if pa.types.is_integer(unique.type):
            return _SortedKeys(unique, unique.to_numpy().astype(np.int64), None)
        return _SortedKeys(unique, None, unique.to_pylist())

    def mask(self, column: pa.Array) -> np.ndarray:
        """Whether each value of ``column`` (strings or bytes; non-null, non-empty) is a touched key."""
        assert self.python is not None
        bounds = pc.min_max(column)
        lower, upper = bounds["min"].as_py(), bounds["max"].as_py()
        start, end = bisect.bisect_left(self.python, lower), bisect.bisect_right(self.python, upper)
        if start >= end:
            return np.zeros(len(column), dtype=bool)
        return pc.is_in(column, value_set=self.values.slice(start, end - start)).to_numpy(zero_copy_only=False)

    def mask_integers(self, column: KeyColumn) -> np.ndarray:
        """Whether each value of an integer key column is a touched key."""
        assert self.numbers is not None
        start = int(np.searchsorted(self.numbers, column.lower))
        end = int(np.searchsorted(self.numbers, column.upper, side="right"))
        if start >= end:
            return np.zeros(column.rows, dtype=bool)
        touched = self.numbers[start:end]
        if column.compact and column.upper - column.lower < _INTEGER_TABLE_ROWS * column.rows + 65536:
            assert column.offsets is not None
            table = np.zeros(column.upper - column.lower + 1, dtype=bool)
            table[touched - column.lower] = True
            return table[column.offsets]
        return np.isin(column.integers(), touched)


def _cast_like(keys: pa.Table, schema: pa.Schema) -> pa.Table:
    columns: Sequence[pa.ChunkedArray] = [
        keys.column(name) if keys.column(name).type == schema.field(name).type
        else pc.cast(keys.column(name), schema.field(name).type) for name in keys.column_names
    ]
    return pa.Table.from_arrays(list(columns), names=keys.column_names)
