"""The sink's executor writer alone, in this process, on pre-generated Arrow batches (no Spark).

    .venv/bin/python -m bench.micro --rows 1M [--layout partitioned] [--batch 20000] [--variants]

Feeds ``spark_app.staging.writer.stage_partition`` the same 20k-row Arrow batches (with the three control
columns) that ``mapInArrow`` hands a task, and compares its CPU time with a plain pyarrow encode
of the same rows. ``--variants`` also times candidate writer changes, applied by monkeypatching in
this process only (spark_app/ is not modified): they show what a change would buy before making it.
Needs the data cache that ``bench.internals`` writes (``--workdir``).
"""

from __future__ import annotations

import argparse
import contextlib
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from bench.support.common import cached_rows, load_data, parse_count


def batches_of(table: pa.Table, size: int) -> list[pa.RecordBatch]:
    """What a task receives: the declared columns plus the null control columns, ``size`` rows at a time."""
    from spark_app.decoding.deadletter import ERROR_COLUMN, POSITION_COLUMN, RAW_COLUMN

    out = []
    for offset in range(0, table.num_rows, size):
        chunk = table.slice(offset, size).combine_chunks()
        batch = chunk.to_batches()[0]
        for name in (ERROR_COLUMN, RAW_COLUMN, POSITION_COLUMN):
            batch = batch.append_column(name, pa.nulls(batch.num_rows, pa.string()))
        out.append(batch)
    return out


def plan_for(directory: Path, layout: str, target: int, properties: dict[str, str]) -> Any:
    from pyiceberg.catalog.sql import SqlCatalog

    from icebergsync.catalog import partition_spec
    from icebergsync.schema import iceberg_schema
    from icebergsync.spec import GENERATOR_COLUMNS
    from spark_app.staging.writer import WRITER_MEMORY_BYTES, WritePlan, table_plan

    (directory / "wh").mkdir(parents=True, exist_ok=True)
    catalog = SqlCatalog("micro", uri=f"sqlite:///{directory}/catalog.db", warehouse=f"file://{directory}/wh")
    catalog.create_namespace("micro")
    schema = iceberg_schema(list(GENERATOR_COLUMNS))
    by = ["day(ts)", "bucket(16, vendor)"] if layout == "partitioned" else []
    table = catalog.create_table("micro.trips", schema, partition_spec=partition_spec(schema, by),
                                 properties={"write.parquet.compression-codec": "zstd", **properties})
    return WritePlan(sink_id="micro", sink_version=1, file_prefix="isync-micro-v1-a", table=table_plan(table),
                     dead_letter=None, target_file_bytes=target, writer_memory_bytes=WRITER_MEMORY_BYTES,
                     required_columns=tuple(f.name for f in table.schema().fields if f.required),
                     event_time_column=None)


def cpu_time(fn: Callable[[], Any], repeat: int) -> float:
    """Best CPU seconds (this process, all threads) of ``repeat`` calls."""
    best = float("inf")
    for _ in range(repeat):
        started = time.process_time()
        fn()
        best = min(best, time.process_time() - started)
    return best


@contextlib.contextmanager
def patched(target: Any, name: str, value: Any) -> Iterator[None]:
    old = getattr(target, name)
    setattr(target, name, value)
    try:
        yield
    finally:
        setattr(target, name, old)


def split_without_copy(batch: pa.RecordBatch, required: tuple[str, ...]) -> tuple[pa.RecordBatch, pa.Array, pa.Array]:
    """split_dead_letters that returns the batch itself when no row is bad (the common case)."""
    from spark_app.decoding.deadletter import ERROR_COLUMN

    if ERROR_COLUMN in batch.schema.names:
        errors = batch.column(ERROR_COLUMN)
        if errors.null_count == batch.num_rows and all(
            batch.column(n).null_count == 0 for n in required if n in batch.schema.names
        ):
            return batch, pa.array([False] * 0, pa.bool_()), errors
    return ORIGINAL_SPLIT(batch, required)


ORIGINAL_SPLIT: Any = None


def main(argv: list[str] | None = None) -> int:
    global ORIGINAL_SPLIT
    parser = argparse.ArgumentParser(prog="bench.micro", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", default="1M")
    parser.add_argument("--layout", default="unpartitioned", choices=["unpartitioned", "partitioned"])
    parser.add_argument("--batch", type=int, default=20_000, help="spark.sql.execution.arrow.maxRecordsPerBatch")
    parser.add_argument("--target-file-size", default="8Mi")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--variants", action="store_true")
    parser.add_argument("--workdir", type=Path, default=Path("/dev/shm/icebergsync-bench"))
    args = parser.parse_args(argv)
    from icebergsync.units import parse_size
    from spark_app.staging import writer

    rows = parse_count(args.rows)
    if cached_rows(args.workdir) < rows:
        raise SystemExit(f"the data cache in {args.workdir} has fewer than {rows} rows: run bench.internals first")
    table = load_data(args.workdir, rows)
    target = parse_size(args.target_file_size)
    ORIGINAL_SPLIT = writer.split_dead_letters
    scratch = Path(tempfile.mkdtemp(prefix="bench-micro-", dir="/dev/shm"))
    results: list[tuple[str, float]] = []

    def stage(batch_size: int = args.batch, properties: dict[str, str] | None = None) -> Callable[[], Any]:
        directory = scratch / f"t{len(results)}-{time.monotonic_ns()}"
        plan = plan_for(directory, args.layout, target, properties or {})
        feed = batches_of(table, batch_size)
        return lambda: writer.stage_partition(plan, iter(feed), f"{time.monotonic_ns() % 99999:05d}-0")

    def encode(**options: Any) -> Callable[[], Any]:
        def go() -> None:
            per_file = max(1, int(target / 26))
            for offset in range(0, table.num_rows, per_file):
                chunk = table.slice(offset, per_file)
                pq.write_table(chunk, str(scratch / "encode.parquet"), compression="zstd",
                               store_decimal_as_integer=True, row_group_size=max(1, -(-chunk.num_rows // 4)), **options)
        return go

    try:
        results.append(("pyarrow encode (ceiling)", cpu_time(encode(), args.repeat)))
        results.append((f"stage_partition, {args.layout}, {args.batch}-row batches", cpu_time(stage(), args.repeat)))
        if args.variants:
            with patched(writer, "split_dead_letters", split_without_copy):
                results.append(("  + no dead-letter filter copy when no row is bad", cpu_time(stage(), args.repeat)))
            results.append(("  + 100k-row Arrow batches (maxRecordsPerBatch)", cpu_time(stage(100_000), args.repeat)))
            low = ["vendor", "payment_type", "pickup_zone", "dropoff_zone", "passenger_count", "rate_code",
                   "store_and_forward", "pickup_date"]
            results.append(("pyarrow encode, dictionary only on low-cardinality columns",
                            cpu_time(encode(use_dictionary=low), args.repeat)))
            results.append(("pyarrow encode, zstd level 3 (Iceberg Java's default)",
                            cpu_time(encode(compression_level=3), args.repeat)))
            sink = pa.BufferOutputStream()
            pq.write_table(table.slice(0, 500_000), sink, compression="zstd", store_decimal_as_integer=True)
            level1 = sink.getvalue().size
            sink = pa.BufferOutputStream()
            pq.write_table(table.slice(0, 500_000), sink, compression="zstd", compression_level=3,
                           store_decimal_as_integer=True)
            print(f"bytes/row zstd level 1 (default) {level1 / 500_000:.1f}, level 3 {sink.getvalue().size / 500_000:.1f}")
            sink = pa.BufferOutputStream()
            pq.write_table(table.slice(0, 500_000), sink, compression="zstd", store_decimal_as_integer=True,
                           use_dictionary=low)
            print(f"bytes/row zstd, dictionary on low-cardinality columns only {sink.getvalue().size / 500_000:.1f}")
            parts = pc.value_counts(table.column("vendor")).to_pylist()
            print(f"vendors: {len(parts)} distinct (bucket(16, vendor) gives at most that many buckets)")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    base = results[0][1]
    print(f"{rows:,} rows, CPU seconds (best of {args.repeat}):")
    for name, seconds in results:
        print(f"  {name:<62} {seconds:6.2f} s  {rows / seconds / 1e3:8.0f}k rows/CPU-s  {seconds / base:5.2f}x encode")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
