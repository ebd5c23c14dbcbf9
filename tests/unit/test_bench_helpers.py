"""Pure helpers of the peers benchmark (bench/): no Spark, no timing, nothing measured."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from bench.run import median_spread, per_trigger, run_order
from bench.support.common import parse_count
from bench.support.dataset import (
    ARROW_SCHEMA,
    checksum,
    json_lines,
    make_rows,
    read_json_files,
    write_json_files,
    write_parquet_files,
)
from bench.support.measure import COMMIT_LINE


def test_counts_and_triggers() -> None:
    assert parse_count("3M") == 3_000_000
    assert parse_count("300k") == 300_000
    assert parse_count("1,500") == 1_500
    assert per_trigger(30, 3) == 10
    assert per_trigger(31, 3) == 11
    assert per_trigger(5, 0) == 5


def test_run_order_interleaves_pairs_and_alternates_who_goes_first() -> None:
    keys = [f"{engine}-{source}-{layout}" for source in ("files", "kafka") for layout in ("partitioned", "unpartitioned")
            for engine in ("sink", "spark")]
    for index in range(4):
        order = run_order(keys, index)
        assert sorted(order) == sorted(keys)
        pairs = [order[i:i + 2] for i in range(0, len(order), 2)]
        for pair in pairs:
            assert {k.split("-", 1)[1] for k in pair} == {pair[0].split("-", 1)[1]}  # same source and layout
            assert pair[0].startswith("sink") == (index % 2 == 0)
    assert run_order(keys, 0)[0].split("-", 1)[1] != run_order(keys, 1)[0].split("-", 1)[1]


def test_median_spread() -> None:
    assert median_spread([3.0, 1.0, 2.0]) == {"median": 2.0, "min": 1.0, "max": 3.0, "n": 3}
    assert median_spread([None, float("nan")]) is None  # type: ignore[list-item]


def test_checksum_is_order_independent_and_sees_changes() -> None:
    rows = make_rows(0, 2_000, 2_000, 3)
    assert rows.schema == ARROW_SCHEMA
    same = checksum(rows.take(pa.array(list(range(1_999, -1, -1)))))
    assert same == checksum(rows)
    assert checksum(rows.slice(1))["checksum"] != checksum(rows)["checksum"]
    changed = rows.set_column(0, "id", pa.array([*range(1_999), 5], pa.int64()))
    assert checksum(changed)["checksum"] != checksum(rows)["checksum"]
    # The same rows through another writer's types (e.g. timestamps in ms, decimals of another precision).
    other = rows.set_column(1, "ts", rows.column("ts").cast(pa.timestamp("ms", tz="UTC")))
    assert checksum(other) == checksum(rows)


def test_json_lines_round_trip_exactly(tmp_path) -> None:  # type: ignore[no-untyped-def]
    facts = write_json_files(tmp_path / "data", 3_000, 3, 2)
    assert facts["rows"] == 3_000 and len(list((tmp_path / "data").glob("part-*.json"))) == 3
    first = json.loads(json_lines(make_rows(0, 1, 3_000, 2))[0].as_py())
    assert first["ts"].endswith("Z") and list(first) == ARROW_SCHEMA.names
    parsed = read_json_files(tmp_path / "data")
    truth = pa.concat_tables([make_rows(i * 1_000, 1_000, 3_000, 2) for i in range(3)])
    assert checksum(parsed) == checksum(truth)


def test_parquet_files_hold_the_same_rows_as_the_json_files(tmp_path) -> None:  # type: ignore[no-untyped-def]
    size = write_parquet_files(tmp_path / "parquet", 3_000, 3, 2)
    paths = sorted((tmp_path / "parquet").glob("part-*.parquet"))
    assert len(paths) == 3 and size == sum(p.stat().st_size for p in paths)
    table = pa.concat_tables([pq.read_table(p) for p in paths])
    assert table.schema.equals(ARROW_SCHEMA)
    write_json_files(tmp_path / "json", 3_000, 3, 2)
    assert checksum(table) == checksum(read_json_files(tmp_path / "json"))


@pytest.mark.parametrize(("line", "records"), [
    ("2026-11-25 03:11:28,001 INFO icebergsync.job commit sink=bench/bench version=1 table=bench.trips snapshot=123 records=100000 "
     "dead_letters=0 files=4 bytes=10 commit_ms=40 frontier={}", 100_000),
    ("2026-11-25 03:11:15,458 INFO icebergsync.job bench/bench v1 attempt 1 fenced bench.trips", None),
])
def test_commit_line(line: str, records: int | None) -> None:
    match = COMMIT_LINE.search(line)
    assert (int(match.group(1)) if match else None) == records


def test_steady_state_rate_and_cpu_between_first_and_last_commit() -> None:
    from bench.run import steady
    from bench.support.measure import cpu_at

    timeline = [[0.0, 0.0], [10.0, 20.0], [20.0, 30.0], [30.0, 50.0]]
    assert cpu_at(timeline, 15.0) == 25.0
    assert cpu_at(timeline, -1.0) is None
    figures = steady([(10.0, 100), (20.0, 100), (30.0, 300)], timeline)
    assert figures["steady_rows"] == 400 and figures["steady_s"] == 20.0
    assert figures["steady_rows_per_s"] == 20.0
    assert figures["steady_cpu_s"] == 30.0 and round(figures["steady_rows_per_cpu_s"], 3) == round(400 / 30, 3)
    assert steady([(10.0, 100)], timeline) == {}
