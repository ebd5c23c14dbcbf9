"""Joining Parquet files by copying row groups (spark_app/iceberg/parquet_stitch.py) and the Thrift codec under it."""

from __future__ import annotations

import datetime
import decimal
import io
import struct
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from spark_app.iceberg.parquet_stitch import MAGIC, Piece, StitchRefused, plan_stitch
from spark_app.iceberg.thrift_compact import (
    BINARY,
    DOUBLE,
    FALSE,
    I32,
    I64,
    LIST,
    MAP,
    STRUCT,
    TRUE,
    Field,
    List,
    Map,
    Struct,
    ThriftError,
    decode_struct,
    encode_struct,
)

SCHEMA = pa.schema([
    pa.field("id", pa.int64(), nullable=False),
    pa.field("name", pa.string()),
    pa.field("amount", pa.decimal128(12, 2)),
    pa.field("at", pa.timestamp("us", tz="UTC")),
    pa.field("tags", pa.list_(pa.string())),
    pa.field("point", pa.struct([("x", pa.float64()), ("y", pa.float64())])),
    pa.field("attributes", pa.map_(pa.string(), pa.int32())),
])


def rows(start: int, count: int) -> pa.Table:
    ids = range(start, start + count)
    return pa.table({
        "id": list(ids),
        "name": [None if i % 7 == 0 else f"name-{i % 13}" for i in ids],
        "amount": [decimal.Decimal(i) / 100 for i in ids],
        "at": [datetime.datetime(2025, 1, 1, tzinfo=datetime.UTC) + datetime.timedelta(seconds=i) for i in ids],
        "tags": [[f"t{i % 3}"] * (i % 3) for i in ids],
        "point": [{"x": float(i), "y": -float(i)} for i in ids],
        "attributes": [[("k", i % 5)] for i in ids],
    }, schema=SCHEMA)


def write(path: Path, *row_groups: pa.Table, **options: object) -> Path:
    with pq.ParquetWriter(path, SCHEMA, **{"compression": "zstd", **options}) as writer:
        for group in row_groups:
            writer.write_table(group, row_group_size=group.num_rows)
    return path


def piece(path: Path) -> Piece:
    return Piece(lambda: path.open("rb"), path.stat().st_size)


def footer_bytes(path: Path) -> bytes:
    data = path.read_bytes()
    (size,) = struct.unpack("<I", data[-8:-4])
    return data[-8 - size:-8]


def columns_without_offsets(metadata: pq.FileMetaData, row_group: int) -> list[dict[str, object]]:
    offsets = {"file_offset", "data_page_offset", "dictionary_page_offset", "index_page_offset"}
    return [{k: v for k, v in column.items() if k not in offsets}
            for column in metadata.row_group(row_group).to_dict()["columns"]]


def test_footers_decode_and_encode_back_byte_for_byte(tmp_path: Path) -> None:
    variants: list[dict[str, Any]] = [{}, {"use_dictionary": False}, {"write_statistics": False}, {"compression": "snappy"}]
    for number, options in enumerate(variants):
        path = write(tmp_path / f"{number}.parquet", rows(0, 1_000), rows(1_000, 20), **options)
        footer = footer_bytes(path)
        decoded, used = decode_struct(footer)
        assert used == len(footer)
        assert encode_struct(decoded) == footer


def test_fields_of_every_wire_type_survive_a_round_trip_even_unknown_ones() -> None:
    nan = struct.pack("<d", float("nan"))
    value = Struct([
        Field(1, TRUE, True), Field(2, FALSE, False), Field(3, I32, -7), Field(4, I64, 2**62),
        Field(5, DOUBLE, nan), Field(6, BINARY, b"\x00\xff"),
        Field(40, LIST, List(I64, list(range(-20, 20)))),  # a jump of more than 15 ids, a list of 40
        Field(41, LIST, List(TRUE, [1, 2, 1])),  # booleans inside a list: one byte each
        Field(42, MAP, Map(BINARY, STRUCT, [(b"k", Struct([Field(1, I32, 1)]))])),
        Field(43, MAP, Map(0, 0, [])),
        Field(32_000, STRUCT, Struct([Field(3, TRUE, True)])),
    ])
    encoded = encode_struct(value)
    decoded, used = decode_struct(encoded + b"trailing")
    assert used == len(encoded)
    assert decoded == value
    assert encode_struct(decoded) == encoded


def test_truncated_bytes_are_an_error_not_a_wrong_struct() -> None:
    encoded = encode_struct(Struct([Field(1, BINARY, b"abcdef"), Field(2, I32, 5)]))
    for cut in range(len(encoded)):
        with pytest.raises(ThriftError):
            decode_struct(encoded[:cut])


def test_stitched_file_holds_the_pieces_rows_and_row_groups_in_order(tmp_path: Path) -> None:
    first = write(tmp_path / "a.parquet", rows(0, 3_000), rows(3_000, 500))
    second = write(tmp_path / "b.parquet", rows(10_000, 2_000), use_dictionary=False)
    third = write(tmp_path / "c.parquet", rows(20_000, 1))
    out = io.BytesIO()

    stitched_plan = plan_stitch([piece(first), piece(second), piece(third)])
    stitched_plan.write_to(out)

    data = out.getvalue()
    metadata = stitched_plan.metadata
    assert stitched_plan.size == len(data) and data.startswith(MAGIC) and data.endswith(MAGIC)
    stitched = pq.ParquetFile(pa.BufferReader(data))
    originals = [pq.ParquetFile(p) for p in (first, second, third)]
    assert stitched.metadata.num_rows == metadata.num_rows == 5_501
    assert stitched.read().equals(pa.concat_tables([rows(0, 3_500), rows(10_000, 2_000), rows(20_000, 1)]))
    groups = [(f, g) for f in originals for g in range(f.num_row_groups)]
    assert stitched.num_row_groups == len(groups) == 4
    for index, (original, group) in enumerate(groups):
        assert stitched.read_row_group(index).equals(original.read_row_group(group))
        # Statistics, encodings, sizes and codecs are the piece's; only the byte offsets moved.
        assert columns_without_offsets(stitched.metadata, index) == columns_without_offsets(original.metadata, group)
    assert stitched.schema_arrow == SCHEMA
    assert stitched.metadata.metadata == originals[0].metadata.metadata


def test_offsets_point_at_the_copied_pages(tmp_path: Path) -> None:
    first = write(tmp_path / "a.parquet", rows(0, 2_000))
    second = write(tmp_path / "b.parquet", rows(5_000, 2_000))
    out = io.BytesIO()
    plan_stitch([piece(first), piece(second)]).write_to(out)
    body = first.stat().st_size - 8 - len(footer_bytes(first)) - len(MAGIC)
    stitched = pq.ParquetFile(pa.BufferReader(out.getvalue())).metadata
    original = pq.ParquetFile(second).metadata
    for column in range(original.num_columns):
        assert stitched.row_group(1).column(column).data_page_offset == \
            original.row_group(0).column(column).data_page_offset + body


@pytest.mark.parametrize("second_options, why", [
    ({"write_page_index": True}, "offset index"),
    ({"schema": pa.schema([pa.field("id", pa.int64(), nullable=False)])}, "differ"),
])
def test_pieces_that_cannot_be_copied_are_refused(
        tmp_path: Path, second_options: dict[str, object], why: str) -> None:
    first = write(tmp_path / "a.parquet", rows(0, 100))
    schema = second_options.pop("schema", SCHEMA)
    second = tmp_path / "b.parquet"
    assert isinstance(schema, pa.Schema)
    pq.write_table(rows(100, 100).select(schema.names), second, **second_options)
    with pytest.raises(StitchRefused, match=why):
        plan_stitch([piece(first), piece(second)])


def test_a_file_that_is_not_parquet_is_refused(tmp_path: Path) -> None:
    first = write(tmp_path / "a.parquet", rows(0, 100))
    broken = tmp_path / "broken.parquet"
    broken.write_bytes(b"not parquet at all")
    with pytest.raises(StitchRefused, match="not a Parquet file"):
        plan_stitch([piece(first), piece(broken)])
