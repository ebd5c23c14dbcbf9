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

from pyspark.sql import SparkSession

Read = Counter[tuple[int, str | None]]

SPARK_EVERY = int(os.environ.get("ICEBERGSYNC_MODEL_SPARK_EVERY", "0"))
SPARK_EXAMPLES = int(os.environ.get("ICEBERGSYNC_MODEL_SPARK_EXAMPLES", "5"))


class SparkReader:
    """Reads the model's table through Iceberg's Spark runtime, by metadata location (no catalog of its own)."""

    def __init__(self, spark: SparkSession) -> None:
        self.spark = spark
        self.reads = 0

    def rows(self, metadata_location: str, snapshot_id: int | None = None) -> Read:
        """The (id, who) rows of the table at ``snapshot_id`` (default: main's head), deletes applied."""
        reader = self.spark.read.format("iceberg")
        if snapshot_id is not None:
            reader = reader.option("snapshot-id", str(snapshot_id))
        self.reads += 1
        return Counter((row["id"], row["who"]) for row in reader.load(metadata_location).select("id", "who").collect())
