"""A third engine reads the keyed tables the job writes: chdb, ClickHouse in process (the ``chdb-core``
package pinned in requirements-dev.lock; its engine reports ClickHouse 26.9), through its
``icebergLocal`` table function on the table's current metadata file (``keyed_support.chdb_scan``).

What it reads, per delete layout (docs/connectors.md, "Which engines read a keyed table as written"):

- position delete files (format 2, the default): exactly the model of the change stream;
- equality deletes: applied only to data files of the delete file's own partition spec and value. The
  sink writes them as the Iceberg spec's *global* deletes (under the table's unpartitioned spec), so
  chdb reads an unpartitioned table as the model and a partitioned one as if it had no deletes at all:
  every row of every live data file, the deleted and the replaced ones included;
- deletion vectors (format 3): refused with ``DB::Exception: Position deletes are supported only for
  parquet format`` (a vector lives in a Puffin file).

The two limits are asserted as they are, so a chdb that lifts one fails here and the docs get updated.
"""

from __future__ import annotations

import random
import re
from collections import Counter
from pathlib import Path

import chdb
import pyarrow.parquet as pq
import pytest
from pyiceberg.manifest import DataFileContent
from pyiceberg.table import Table
from pyspark.sql import SparkSession

from spark_app.iceberg.internals import live_files
from tests.integration.keyed_support import (
    ChangeStream,
    chdb_rows,
    chdb_scan,
    delete_contents,
    spark_rows,
    sync_change_files,
)


def stream_of(seed: str) -> ChangeStream:
    """Debezium changes over 500 keys: the table grows to a few hundred rows, most of them updated."""
    return ChangeStream("debezium", random.Random(seed), max_keys=500)


def test_chdb_reads_position_deletes_as_the_model(tmp_path: Path, spark: SparkSession) -> None:
    """Format 2, partitioned by day, the default layout: one position delete file per partition."""
    stream = stream_of("chdb-position")
    table = sync_change_files(tmp_path, spark, stream, deletes="position", format_version="2")
    assert set(delete_contents(table)) == {"position"}
    assert chdb_rows(table) == stream.model


def test_chdb_reads_equality_deletes_of_an_unpartitioned_table_as_the_model(tmp_path: Path, spark: SparkSession) -> None:
    """Unpartitioned, the data files and the (global) equality deletes share the one spec: chdb applies them."""
    stream = stream_of("chdb-equality-unpartitioned")
    table = sync_change_files(tmp_path, spark, stream, deletes="equality", format_version="2", partitioned=False)
    assert set(delete_contents(table)) == {"equality"}
    assert spark_rows(spark, table) == stream.model
    assert chdb_rows(table) == stream.model


def live_data_rows(table: Table) -> Counter[tuple[int, str, int]]:
    """(id, name, updated_at µs) of every row of every live data file, no delete applied (read from the
    manifests: pyiceberg's scan planning refuses a table with equality deletes)."""
    snapshot = table.current_snapshot()
    assert snapshot is not None
    rows: Counter[tuple[int, str, int]] = Counter()
    for live in live_files(table, snapshot):
        if live.data_file.content == DataFileContent.DATA:
            with table.io.new_input(live.data_file.file_path).open() as source:
                data = pq.read_table(source, columns=["id", "name", "updated_at"])
            rows.update(zip(data.column("id").to_pylist(), data.column("name").to_pylist(),
                            data.column("updated_at").cast("int64").to_pylist(), strict=True))
    return rows


def test_chdb_applies_no_global_equality_delete_to_a_partitioned_table(tmp_path: Path, spark: SparkSession) -> None:
    """Partitioned by day, the data files are of the day spec and the equality deletes of the unpartitioned
    one: chdb matches a delete file to data files by spec and partition value only, so it applies none of
    them and returns every row of the live data files, where Spark's Iceberg runtime reads the model."""
    stream = stream_of("chdb-equality-partitioned")
    table = sync_change_files(tmp_path, spark, stream, deletes="equality", format_version="2")
    assert set(delete_contents(table)) == {"equality"}
    assert spark_rows(spark, table) == stream.model
    read = chdb_scan(table)
    written = live_data_rows(table)
    assert Counter(zip(*(read.column(name).to_pylist() for name in ("id", "name", "micros")), strict=True)) == written
    assert written.total() > len(stream.model), "the stream deleted nothing: the test shows no limit"


def test_chdb_refuses_deletion_vectors(tmp_path: Path, spark: SparkSession) -> None:
    """Format 3: the older rows are deleted by deletion vectors (Puffin), which chdb does not read."""
    stream = stream_of("chdb-deletion-vector")
    table = sync_change_files(tmp_path, spark, stream, deletes="position", format_version="3")
    assert set(delete_contents(table)) == {"deletion-vector"}
    with pytest.raises(chdb.ChdbError, match=re.escape(
            "Code: 36. DB::Exception: Position deletes are supported only for parquet format")):
        chdb_scan(table)
