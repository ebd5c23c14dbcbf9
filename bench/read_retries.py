"""What reading every S3 object through ``icebergsync.transient.reads`` costs, on MinIO, in this one process.

    .venv/bin/python -m bench.read_retries [--files 12] [--rows 300000] [--large-rows 4000000] [--rounds 5]

The job's FileIO (``RetryingFileIO``) hands out files whose every read goes through Python (``RetriedReads`` behind
``pyarrow.PythonFile``: a Python call per read, the file's reads one at a time) so that an error answer to a short
read can be retried. This times the same reads with it and with the FileIO as it was before (the same class, its
``new_input`` pyiceberg's own: Arrow's S3 files, no Python in a read), the two in turn (which goes first alternating by round, after a round that warms up), and prints
each workload's median wall seconds and CPU seconds of this process (steadier on a shared machine) and their ratios
(with / without):

* **scan**: pyiceberg's ``table.scan().to_arrow()`` of a table of ``--files`` data files (pre-buffered, files read in
  parallel): what upkeep's and copy-on-write's reads of data files do;
* **large file**: the same scan of a table of ONE file of ``--large-rows`` rows (several row groups, whose ranges Arrow
  reads in parallel natively, one at a time through Python);
* **key column**: ``pq.ParquetFile(stream).read(columns=["id"])`` of every data file, one after the other (footer,
  then one column chunk: what the key index and upkeep's delete reads do);
* **planning**: ``table.scan().plan_files()`` (the manifest list and manifests, each read whole).

MinIO runs on 127.0.0.1 (tests/infra/services.py) under a temporary directory and is stopped at the end.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from pyiceberg.catalog import Catalog, load_catalog
from pyiceberg.io.pyarrow import PyArrowFile, PyArrowFileIO
from pyiceberg.table import Table

from icebergsync.transient.object_store import RetryingFileIO


class DirectReads(RetryingFileIO):
    """The job's FileIO without the retried reads: its files are pyiceberg's own (Arrow's S3 files)."""

    def new_input(self, location: str) -> PyArrowFile:
        return PyArrowFileIO.new_input(self, location)


VARIANTS = {"with RetriedReads": "icebergsync.transient.object_store.RetryingFileIO",
            "without": f"{DirectReads.__module__}.{DirectReads.__qualname__}"}


def rows(count: int, seed: int) -> pa.Table:
    """``count`` rows of taxi-like columns."""
    rng = np.random.default_rng(seed)
    return pa.table({
        "id": pa.array(np.arange(count, dtype=np.int64) + seed * 10**9),
        "ts": pa.array(rng.integers(1_700_000_000_000_000, 1_800_000_000_000_000, count), pa.timestamp("us")),
        "amount": pa.array(rng.random(count) * 100),
        "vendor": pa.array(rng.integers(0, 50, count).astype(np.int32)),
        "zone": pa.array([f"zone-{n}" for n in rng.integers(0, 300, count)]),
    })


def make_table(catalog: Catalog, name: str, files: int, per_file: int) -> None:
    table = catalog.create_table(name, schema=rows(1, 0).schema)
    for seed in range(files):
        table.append(rows(per_file, seed + 1))


def scan(table: Table) -> int:
    return table.scan().to_arrow().num_rows


def key_column(table: Table) -> int:
    read = 0
    for task in table.scan().plan_files():
        with table.io.new_input(task.file.file_path).open() as stream:
            read += pq.ParquetFile(stream).read(columns=["id"]).num_rows
    return read


def planning(table: Table) -> int:
    return sum(1 for _ in table.scan().plan_files())


def timed(work: Callable[[Table], int], table: Table) -> tuple[float, float, int]:
    """Wall seconds, this process's CPU seconds (every thread's: Arrow's I/O and decoding too) and what ``work`` says."""
    wall, cpu = time.perf_counter(), time.process_time()
    result = work(table)
    return time.perf_counter() - wall, time.process_time() - cpu, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--files", type=int, default=12)
    parser.add_argument("--rows", type=int, default=300_000, help="rows per file of the scanned table")
    parser.add_argument("--large-rows", type=int, default=4_000_000, help="rows of the one-file table")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    from tests.infra.services import start_minio

    with tempfile.TemporaryDirectory(prefix="bench-read-retries-") as workdir:
        s3 = start_minio(Path(workdir) / "minio")
        try:
            properties = {**s3.fileio_properties, "type": "sql", "uri": f"sqlite:///{workdir}/catalog.db",
                          "warehouse": f"s3://{s3.bucket}/warehouse"}
            catalogs = {variant: load_catalog("bench", **{**properties, "py-io-impl": impl})
                        for variant, impl in VARIANTS.items()}
            writer = catalogs["without"]
            writer.create_namespace("bench")
            make_table(writer, "bench.many", args.files, args.rows)
            make_table(writer, "bench.large", 1, args.large_rows)
            workloads: dict[str, tuple[Callable[[Table], int], str]] = {
                "scan": (scan, "bench.many"), "large file": (scan, "bench.large"),
                "key column": (key_column, "bench.many"), "planning": (planning, "bench.many")}
            seconds: dict[tuple[str, str], list[float]] = {}
            cpu_seconds: dict[tuple[str, str], list[float]] = {}
            load_before = os.getloadavg()
            for round_ in range(args.rounds + 1):  # round 0 warms up (connections, imports, caches): not counted
                for workload, (work, name) in workloads.items():
                    results = set()
                    for variant, catalog in sorted(catalogs.items(), reverse=round_ % 2 == 1):
                        took, cpu, result = timed(work, catalog.load_table(name))
                        if round_:
                            seconds.setdefault((workload, variant), []).append(took)
                            cpu_seconds.setdefault((workload, variant), []).append(cpu)
                        results.add(result)
                    assert len(results) == 1, f"{workload}: the variants read differently: {results}"
            print(f"{args.files} files of {args.rows} rows, one file of {args.large_rows} rows, {args.rounds} rounds; "
                  f"load {load_before[0]:.1f} before, {os.getloadavg()[0]:.1f} after")
            print("| workload | wall s without | wall s with | ratio | CPU s without | CPU s with | ratio |\n"
                  "| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
            for workload in workloads:
                cells = []
                for measured in (seconds, cpu_seconds):
                    without = statistics.median(measured[(workload, "without")])
                    with_reads = statistics.median(measured[(workload, "with RetriedReads")])
                    cells.append(f"{without:.3f} | {with_reads:.3f} | {with_reads / without:.2f}")
                print(f"| {workload} | {' | '.join(cells)} |")
        finally:
            s3._server.stop()


if __name__ == "__main__":
    main()
