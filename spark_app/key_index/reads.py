"""Reading a locate's candidate row groups: the positions of the rows holding the touched keys.

Runs in the driver or in a Spark task (:mod:`.tasks`); what it returns is bounded by the rows the
keys are in, not by the rows it reads.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyiceberg.io import FileIO

POSITION_COLUMN = "__isync_position"


@dataclass(frozen=True)
class Candidate:
    """A data file's row groups that may hold a touched key: ``(row group, its first row's position)``."""

    path: str
    columns: tuple[str, ...]  # the file's own names of the key columns, in key order
    row_groups: tuple[tuple[int, int], ...]
    rows: int

    @property
    def size(self) -> int:  # what spreading candidates over tasks balances
        return self.rows


def read_candidates(io: FileIO, candidates: Sequence[Candidate], keys: pa.Table) -> list[tuple[str, np.ndarray]]:
    """Per candidate file, the positions of its rows whose key is a row of ``keys``."""
    return [(candidate.path, _matching_positions(io, candidate, keys)) for candidate in candidates]


def _matching_positions(io: FileIO, candidate: Candidate, keys: pa.Table) -> np.ndarray:
    """Positions, in the candidate's file, of its candidate row groups' rows whose key is a row of ``keys``."""
    matches: list[np.ndarray] = []
    columns = list(candidate.columns)
    with io.new_input(candidate.path).open() as stream:
        parquet = pq.ParquetFile(stream)
        for index, offset in candidate.row_groups:
            rows = parquet.read_row_group(index, columns=columns).select(columns)
            found = _positions_in(rows.rename_columns(list(keys.column_names)), keys)
            if found.size:
                matches.append(found + offset)
    return np.concatenate(matches) if matches else np.empty(0, dtype=np.int64)


def _positions_in(rows: pa.Table, keys: pa.Table) -> np.ndarray:
    """Positions within ``rows`` of the rows whose key is in ``keys`` (both with the same key columns)."""
    conformed = _cast_like(keys, rows.schema)
    if keys.num_columns == 1:
        mask = pc.is_in(rows.column(0), value_set=conformed.column(0))
        return np.flatnonzero(mask.to_numpy(zero_copy_only=False)).astype(np.int64)
    numbered = rows.append_column(POSITION_COLUMN, pa.array(np.arange(rows.num_rows, dtype=np.int64)))
    joined = numbered.join(conformed, keys=list(keys.column_names), join_type="left semi")
    return np.sort(joined.column(POSITION_COLUMN).to_numpy())


def _cast_like(keys: pa.Table, schema: pa.Schema) -> pa.Table:
    columns: Sequence[pa.ChunkedArray] = [
        keys.column(name) if keys.column(name).type == schema.field(name).type
        else pc.cast(keys.column(name), schema.field(name).type) for name in keys.column_names
    ]
    return pa.Table.from_arrays(list(columns), names=keys.column_names)
