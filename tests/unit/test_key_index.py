"""The key index's building blocks: Parquet-compatible hashing probed against the Bloom filters pyarrow
writes as the sink configures them, the columns that get filters, and the bounded summary cache."""

from __future__ import annotations

import io
import uuid
from datetime import date, datetime, timedelta

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField, StringType

from spark_app.commit.key_index.file_keys import FileKeys, FileKeysCache, RowGroupKeys, read_file_keys
from spark_app.commit.key_index.key_columns import KeyColumn, KeyColumnCache
from spark_app.commit.key_index.reads import KeyMatcher
from spark_app.iceberg import bloom_filter
from spark_app.iceberg.parquet_hash import hashable, parquet_hashes

ROWS = 4_000
START = datetime(2026, 1, 1)


def _column(kind: str, numbers: range) -> pa.Array:
    """Values of one key type made from ``numbers`` (distinct numbers give distinct values)."""
    return {
        "int16": lambda: pa.array(numbers, pa.int16()),
        "int32": lambda: pa.array([n * 3 for n in numbers], pa.int32()),
        "int64": lambda: pa.array([n * 1_000_003 - 2**40 for n in numbers], pa.int64()),
        "string": lambda: pa.array([str(uuid.UUID(int=n * 7919)) for n in numbers], pa.string()),
        "date": lambda: pa.array([date(2000, 1, 1) + timedelta(days=n) for n in numbers], pa.date32()),
        "timestamp": lambda: pa.array([START + timedelta(microseconds=n) for n in numbers], pa.timestamp("us")),
        "uuid": lambda: pa.array([n.to_bytes(16, "big") for n in numbers], pa.binary(16)),
        "binary": lambda: pa.array([n.to_bytes(5, "little") for n in numbers], pa.binary()),
    }[kind]()


KINDS = ["int16", "int32", "int64", "string", "date", "timestamp", "uuid", "binary"]


def parquet_file(values: pa.Array, rows_per_group: int, fpp: float = 0.01) -> bytes:
    """A Parquet file of one key column (field id 1) with Bloom filters as the sink writes them."""
    schema = pa.schema([pa.field("k", values.type, nullable=False, metadata={"PARQUET:field_id": "1"})])
    sink = io.BytesIO()
    with pq.ParquetWriter(sink, schema, **bloom_filter.write_options({"k": fpp}, rows_per_group, {})) as writer:
        writer.write_table(pa.table({"k": values}, schema=schema), row_group_size=rows_per_group)
    return sink.getvalue()


@pytest.mark.parametrize("kind", KINDS)
def test_every_written_value_is_found_by_its_row_groups_filter_and_absent_ones_rarely(kind: str) -> None:
    assert hashable(_column(kind, range(1)).type)
    present = _column(kind, range(ROWS))
    summary = read_file_keys(io.BytesIO(parquet_file(present, ROWS // 2)), (1,))
    assert [group.rows for group in summary.row_groups] == [ROWS // 2, ROWS // 2]
    first, second = (group.bloom for group in summary.row_groups)
    assert first is not None and second is not None
    assert first.may_contain(parquet_hashes(present[: ROWS // 2])).all()
    assert second.may_contain(parquet_hashes(present[ROWS // 2:])).all()
    absent = _column(kind, range(ROWS, 2 * ROWS))
    if kind == "int16":
        absent = _column(kind, range(ROWS, min(2 * ROWS, 2**15)))
    false_positives = float(np.mean(first.may_contain(parquet_hashes(absent))))
    assert false_positives < 0.03, f"{kind}: {false_positives:.3f} of absent values pass a filter sized for 1%"


def test_a_filter_is_capped_by_the_max_bytes_property_and_stays_correct() -> None:
    values = _column("int64", range(ROWS))
    options = bloom_filter.write_options({"k": 0.01}, ROWS, {bloom_filter.MAX_BYTES_PROPERTY: "1024"})
    assert options["bloom_filter_options"]["k"]["ndv"] < ROWS
    schema = pa.schema([pa.field("k", pa.int64(), metadata={"PARQUET:field_id": "1"})])
    sink = io.BytesIO()
    with pq.ParquetWriter(sink, schema, **options) as writer:
        writer.write_table(pa.table({"k": values}, schema=schema))
    (group,) = read_file_keys(io.BytesIO(sink.getvalue()), (1,)).row_groups
    assert group.bloom is not None and group.bloom.nbytes <= 1024
    assert group.bloom.may_contain(parquet_hashes(values)).all()


def test_a_file_without_filters_or_without_the_key_column_is_summarised_without_pruning_power() -> None:
    schema = pa.schema([pa.field("k", pa.int64(), metadata={"PARQUET:field_id": "1"}),
                        pa.field("v", pa.string(), metadata={"PARQUET:field_id": "2"})])
    sink = io.BytesIO()
    pq.write_table(pa.table({"k": [5, 9], "v": ["a", "b"]}, schema=schema), sink)
    (group,) = read_file_keys(io.BytesIO(sink.getvalue()), (1,)).row_groups
    assert (group.rows, group.lower, group.upper, group.bloom) == (2, 5, 9, None)
    assert read_file_keys(io.BytesIO(sink.getvalue()), (3,)) == FileKeys((), None, ())


def test_a_key_column_renamed_since_the_file_was_written_is_found_by_field_id() -> None:
    schema = pa.schema([pa.field("old_name", pa.int64(), metadata={"PARQUET:field_id": "7"})])
    sink = io.BytesIO()
    pq.write_table(pa.table({"old_name": [1, 2, 3]}, schema=schema), sink)
    summary = read_file_keys(io.BytesIO(sink.getvalue()), (7,))
    assert summary.columns == ("old_name",) and summary.first_type == pa.int64()


def test_key_columns_get_filters_unless_turned_off_and_iceberg_properties_add_columns() -> None:
    schema = Schema(NestedField(1, "id", LongType(), required=True), NestedField(2, "email", StringType()),
                    NestedField(3, "note", StringType()), identifier_field_ids=[1])
    assert bloom_filter.bloom_filter_columns(schema, {}) == {"id": 0.001}
    properties = {"write.parquet.bloom-filter-enabled.column.email": "true",
                  "write.parquet.bloom-filter-fpp.column.email": "0.05",
                  "write.parquet.bloom-filter-enabled.column.missing": "true"}
    assert bloom_filter.bloom_filter_columns(schema, properties) == {"email": 0.05, "id": 0.001}
    other_column = {"write.parquet.bloom-filter-enabled.column.note": "true"}  # no rate of its own: the default's
    assert bloom_filter.bloom_filter_columns(schema, other_column) == {"id": 0.001, "note": 0.01}
    off = {"write.parquet.bloom-filter-enabled.column.id": "false"}
    assert bloom_filter.bloom_filter_columns(schema, off) == {}
    assert bloom_filter.write_options({}, 100, {}) == {}
    assert bloom_filter.bloom_filter_columns(Schema(NestedField(1, "id", LongType())), {}) == {}


def test_a_header_that_is_not_a_split_block_xxhash_filter_is_not_used() -> None:
    assert bloom_filter.parse_header(b"\x00") is None  # an empty struct: no size
    assert bloom_filter.parse_header(b"\xff\xff") is None  # not a struct


def _summary(bloom_bytes: int) -> FileKeys:
    bloom = bloom_filter.from_bitset(bytes(bloom_bytes))
    return FileKeys(("k",), pa.int64(), (RowGroupKeys(10, 0, 9, bloom),))


def test_the_cache_returns_a_summary_read_once_and_drops_the_least_recently_used_beyond_its_bytes() -> None:
    reads: list[str] = []

    def reader(path: str, size: int):  # type: ignore[no-untyped-def]
        return lambda: reads.append(path) or _summary(size)

    cache = FileKeysCache(max_bytes=3 * 1024)
    for path in ("a", "b", "a"):
        cache.get(path, (1,), reader(path, 1024))
    assert reads == ["a", "b"] and (cache.hits, cache.misses) == (1, 2)
    cache.get("c", (1,), reader("c", 1024))  # a, b, c no longer fit with their overhead: b is the oldest
    cache.get("a", (1,), reader("a", 1024))
    cache.get("b", (1,), reader("b", 1024))
    assert reads == ["a", "b", "c", "b"]
    cache.get("a", (2,), reader("a", 32))  # other key columns: another summary
    assert reads[-1] == "a"


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("spread", [1, 10_000])  # a dense key range (a table of booleans) and a sparse one
def test_the_matcher_finds_exactly_the_rows_holding_a_touched_key(kind: str, spread: int) -> None:
    numbers = range(0, ROWS * spread, spread) if kind not in ("int16", "date") else range(ROWS)
    column = _column(kind, numbers)
    absent = numbers[-1] + 1
    touched = pa.concat_arrays([column.take(pa.array([0, 5, 5, ROWS - 1, 1234])), _column(kind, range(absent, absent + 3))])
    matcher = KeyMatcher(pa.table({"k": touched}))
    assert matcher.positions(pa.table({"k": column})).tolist() == [0, 5, 1234, ROWS - 1]
    assert matcher.positions(pa.table({"k": column.slice(6, 1000)})).tolist() == []  # none in the row group's range


def test_the_matcher_compares_integer_keys_as_int64_across_a_promotion_and_handles_nulls_and_several_columns() -> None:
    old_file = pa.table({"k": pa.array([7, 2**31 - 1, -5], pa.int32())})  # written before int was promoted to long
    matcher = KeyMatcher(pa.table({"k": pa.array([2**40, -5, 7], pa.int64())}))
    assert matcher.positions(old_file).tolist() == [0, 2]
    with_nulls = pa.table({"k": pa.array(["a", None, "b", "c"], pa.string())})
    assert KeyMatcher(pa.table({"k": ["c", "a"]})).positions(with_nulls).tolist() == [0, 3]
    rows = pa.table({"a": [1, 1, 2, 2], "b": ["x", "y", "x", "y"]})
    assert KeyMatcher(pa.table({"a": [2, 1], "b": ["x", "z"]})).positions(rows).tolist() == [2]


def test_a_key_column_is_kept_compact_and_gives_back_its_values() -> None:
    dense = KeyColumn.of(pa.chunked_array([pa.array([2**40 + 9, 2**40, 2**40 + 3], pa.int64())]))
    assert dense.compact and dense.offsets is not None and dense.offsets.dtype == np.uint32
    assert (dense.lower, dense.upper, dense.integers().tolist()) == (2**40, 2**40 + 9, [2**40 + 9, 2**40, 2**40 + 3])
    wide = KeyColumn.of(pa.array([-(2**62), 2**62], pa.int64()))
    assert not wide.compact and wide.integers().tolist() == [-(2**62), 2**62]
    assert KeyColumn.of(pa.array(["b", "a"])).values == pa.array(["b", "a"])
    assert KeyColumn.of(pa.array([1, None], pa.int32())).values is not None  # nulls: kept as read
    keys = KeyMatcher(pa.table({"k": pa.array([2**40 + 3, 2**62, 5], pa.int64())}))
    assert keys.match(dense).tolist() == [2] and keys.match(wide).tolist() == [1]


def test_the_key_column_cache_keeps_what_fits_and_never_evicts_what_the_current_locate_uses() -> None:
    column = KeyColumn.of(pa.array(range(1000), pa.int64()))  # 4,000 bytes of offsets
    cache = KeyColumnCache(max_bytes=2 * column.nbytes)
    cache.begin()
    assert cache.put(("a", ("k",), 0), column) and cache.put(("b", ("k",), 0), column)
    assert not cache.put(("c", ("k",), 0), column)  # full of this locate's row groups: c is read each time
    assert cache.room() == 0 and cache.bytes == 2 * column.nbytes
    cache.begin()  # the next locate uses a, and needs c
    assert cache.get(("a", ("k",), 0)) is column and cache.room() == column.nbytes
    assert cache.put(("c", ("k",), 0), column)  # evicts b, which this locate did not use
    assert cache.get(("b", ("k",), 0)) is None and cache.get(("c", ("k",), 0)) is column
    assert (cache.hits, cache.misses, cache.bytes) == (2, 1, 2 * column.nbytes)


def test_a_range_holds_a_touched_key_on_either_bound_and_a_filter_is_probed_with_the_keys_in_range() -> None:
    from spark_app.commit.key_index.locate import _FirstKey

    first = _FirstKey(1, LongType(), pa.chunked_array([pa.array([10, 5, 10, 30], pa.int64())]))
    assert first.sorted == [5, 10, 30]
    assert first.may_hold(0, 5) and first.may_hold(10, 20) and first.may_hold(30, None) and first.may_hold(None, 5)
    assert not first.may_hold(6, 9) and not first.may_hold(31, None) and not first.may_hold(None, 4)
    bloom = _summary(4 * 32).row_groups[0].bloom  # four blocks, all zero: holds nothing
    assert bloom is not None
    present = bloom_filter.SplitBlockBloomFilter(bloom.blocks.copy())
    hashes = parquet_hashes(pa.array([10], pa.int64()))
    block = int((int(hashes[0]) >> 32) * present.blocks.shape[0] >> 32)
    present.blocks[block] = 0xFFFFFFFF  # now 10 (and whatever shares its block) may be present
    assert first.bloom_may_hold(RowGroupKeys(9, 6, 10, present), pa.int64())  # 10 is the group's max
    assert not first.bloom_may_hold(RowGroupKeys(9, 6, 10, bloom), pa.int64())
    assert not first.bloom_may_hold(RowGroupKeys(9, 11, 29, present), pa.int64())  # no touched key in 11..29
