"""Row lineage kept through a rewrite of a format-version 3 table (Iceberg spec, "Row Lineage").

A v3 row's ``_row_id`` is its file's value of that column, or when null its data file's
``first_row_id`` plus its position; its ``_last_updated_sequence_number`` the file's value, or when
null the data file's data sequence number. A row moved to another file keeps both: the rewrite
writes them as the two columns (field ids 2147483540 and 2147483539), which readers take before
what the new file would give. A file without a ``first_row_id`` (written before the table was
upgraded to v3) has null row ids, and keeps them null.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField

from spark_app.iceberg.internals import LiveFile, first_row_id

ROW_ID = NestedField(2147483540, "_row_id", LongType(), required=False)
LAST_UPDATED_SEQUENCE_NUMBER = NestedField(2147483539, "_last_updated_sequence_number", LongType(), required=False)


def with_lineage(schema: Schema) -> Schema:
    """``schema`` with the two lineage columns after its own: what a v3 rewrite reads and writes."""
    return Schema(*schema.fields, ROW_ID, LAST_UPDATED_SEQUENCE_NUMBER, schema_id=schema.schema_id,
                  identifier_field_ids=schema.identifier_field_ids)


class Lineage:
    """Fills in the lineage of one data file's rows, batch by batch, as they are read without ``deleted``."""

    def __init__(self, live: LiveFile, deleted: np.ndarray | None):
        self._first = first_row_id(live.data_file)
        self._sequence = pa.scalar(live.data_sequence_number, pa.int64())
        count = live.data_file.record_count
        self._positions = np.setdiff1d(np.arange(count, dtype=np.int64), deleted, assume_unique=True) \
            if deleted is not None else None
        self._read = 0

    def fill(self, rows: pa.Table) -> pa.Table:
        """``rows`` (the next ones read) with their row ids and last updated sequence numbers set."""
        start, self._read = self._read, self._read + rows.num_rows
        row_ids = rows.column(ROW_ID.name)
        if self._first is not None:
            positions = self._positions[start:self._read] if self._positions is not None \
                else np.arange(start, self._read, dtype=np.int64)
            row_ids = pc.coalesce(row_ids, pa.array(positions + self._first, pa.int64()))
        sequence = pc.coalesce(rows.column(LAST_UPDATED_SEQUENCE_NUMBER.name), self._sequence)
        rows = rows.set_column(rows.schema.get_field_index(ROW_ID.name), rows.schema.field(ROW_ID.name), row_ids)
        index = rows.schema.get_field_index(LAST_UPDATED_SEQUENCE_NUMBER.name)
        return rows.set_column(index, rows.schema.field(index), sequence)
