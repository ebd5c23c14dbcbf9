"""The oracle's second reader: Apache Iceberg's Java reader through Spark, which honours what pyiceberg ignores (a
delete file's ``referenced_data_file``, equality deletes), in the ONE local session of the test process.

It reads main's head and the snapshot of every tag and branch, each under the schema that snapshot was committed
under, as the first reader does. How often: ``ICEBERGSYNC_MODEL_SPARK_EVERY`` steps (0: never between steps); the
end of every ``ICEBERGSYNC_MODEL_SPARK_EXAMPLES``-th example is read too (0: never). The suite's setting reads the
end of every fifth example only, within the model's time budget; a long run can read after every step.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql import SparkSession

Read = Counter[tuple[int, Any]]

SPARK_EVERY = int(os.environ.get("ICEBERGSYNC_MODEL_SPARK_EVERY", "0"))
SPARK_EXAMPLES = int(os.environ.get("ICEBERGSYNC_MODEL_SPARK_EXAMPLES", "5"))


class SparkReader:
    """Reads the model's table through Iceberg's Spark runtime, by metadata location (no catalog of its own)."""

    def __init__(self, spark: SparkSession) -> None:
        self.spark = spark
        self.reads = 0

    def rows(self, metadata_location: str, columns: Sequence[str], snapshot_id: int | None = None) -> Read:
        """The (id, value of ``columns``) rows of the table at ``snapshot_id`` (default: main's head), deletes
        applied (:func:`values_of`)."""
        reader = self.spark.read.format("iceberg")
        if snapshot_id is not None:
            reader = reader.option("snapshot-id", str(snapshot_id))
        self.reads += 1
        read = reader.load(metadata_location).select("id", *columns).collect()
        return Counter((row["id"], row[columns[0]] if len(columns) == 1 else tuple(row[name] for name in columns))
                       for row in read)


def values_of(rows: pa.Table, columns: Sequence[str]) -> list[Any]:
    """Each row's value as the oracle states it: the one column's value, or the tuple of several columns' (as
    :meth:`SparkReader.rows` reads it)."""
    if len(columns) == 1:
        return rows.column(columns[0]).to_pylist()
    return list(zip(*(rows.column(name).to_pylist() for name in columns), strict=True))
