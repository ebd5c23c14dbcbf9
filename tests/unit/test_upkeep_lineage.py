"""Row lineage through a v3 rewrite (spark_app/staging/lineage.py): ids from positions, explicit values kept."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
from pyiceberg.manifest import DataFileContent, FileFormat
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField

from spark_app.iceberg.internals import LiveFile, full_data_file
from spark_app.staging.lineage import LAST_UPDATED_SEQUENCE_NUMBER, ROW_ID, Lineage, with_lineage


def live(first_row_id: int | None, rows: int = 6, sequence: int = 7) -> LiveFile:
    data_file = full_data_file(content=DataFileContent.DATA, file_path="/t/data/a.parquet", file_format=FileFormat.PARQUET,
                               record_count=rows, file_size_in_bytes=100, first_row_id=first_row_id)
    return LiveFile(data_file, sequence, "/t/metadata/m.avro")


def batch(row_ids: list[int | None], sequences: list[int | None]) -> pa.Table:
    return pa.table({"id": pa.array(range(len(row_ids)), pa.int64()), ROW_ID.name: pa.array(row_ids, pa.int64()),
                     LAST_UPDATED_SEQUENCE_NUMBER.name: pa.array(sequences, pa.int64())})


def test_row_ids_follow_the_positions_of_the_rows_read_past_the_deleted_ones() -> None:
    lineage = Lineage(live(100), np.array([1, 3]))
    first = lineage.fill(batch([None, None], [None, None]))  # positions 0 and 2
    second = lineage.fill(batch([None, 900], [None, 4]))  # positions 4 and 5; the second was rewritten before
    assert first.column(ROW_ID.name).to_pylist() == [100, 102]
    assert second.column(ROW_ID.name).to_pylist() == [104, 900]
    assert second.column(LAST_UPDATED_SEQUENCE_NUMBER.name).to_pylist() == [7, 4]
    assert Lineage(live(10), None).fill(batch([None] * 3, [None] * 3)).column(ROW_ID.name).to_pylist() == [10, 11, 12]


def test_a_file_without_a_first_row_id_keeps_null_row_ids() -> None:
    filled = Lineage(live(None), None).fill(batch([None, None], [None, None]))
    assert filled.column(ROW_ID.name).to_pylist() == [None, None]
    assert filled.column(LAST_UPDATED_SEQUENCE_NUMBER.name).to_pylist() == [7, 7]


def test_the_lineage_columns_follow_the_tables_own() -> None:
    schema = Schema(NestedField(1, "id", LongType(), required=True), identifier_field_ids=[1])
    extended = with_lineage(schema)
    assert [f.field_id for f in extended.fields] == [1, 2147483540, 2147483539]
    assert extended.identifier_field_ids == [1]
