"""A peer: what a user would run instead of IcebergSync, Spark Structured Streaming into Iceberg.

    python -m bench.support.peer CONFIG.json

CONFIG: {"source": "files"|"parquet"|"kafka", "layout": "partitioned"|"unpartitioned", "warehouse": dir,
"checkpoint": dir, "target_file_bytes": N, "cores": 2, "files_dir": dir, "max_files_per_trigger": N,
"bootstrap": "host:port", "topic": name, "max_offsets_per_trigger": N, "classpath": "jar:jar"}

The table is created as a user would (Iceberg's Spark runtime, a Hadoop catalog in a local
warehouse, ``PARTITIONED BY (days(ts))`` or not, zstd and the target file size as table properties,
Iceberg's default distribution: hash for the partitioned table); then one streaming query with
``trigger(availableNow=True)`` reads everything there is and the process ends. The session has the
same settings as the sink's (``spark_app.job.session.build_session``: local[N], UTC, 2g driver).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

from bench.support.dataset import spark_ddl


def produce(config: dict[str, Any]) -> int:
    """Not a contender: put every line of the JSON files on the topic as one record value (no key)."""
    from spark_app.job.session import build_session

    spark = build_session("bench-produce", f"local[{config['cores']}]",
                          {"spark.driver.extraClassPath": config["classpath"]})
    try:
        (spark.read.text(config["files_dir"]).withColumnRenamed("value", "value")
         .write.format("kafka").option("kafka.bootstrap.servers", config["bootstrap"])
         .option("topic", config["topic"]).option("kafka.linger.ms", "20").option("kafka.batch.size", "262144")
         .save())
    finally:
        spark.stop()
    return 0


def main() -> int:
    config = json.loads(Path(sys.argv[1]).read_text())
    if config.get("mode") == "produce":
        return produce(config)
    from pyspark.sql import functions as F
    from pyspark.sql.types import StructType

    from spark_app.job.session import build_session

    conf = {
        "spark.driver.extraClassPath": config["classpath"],
        "spark.sql.extensions": "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions",
        "spark.sql.catalog.peer": "org.apache.iceberg.spark.SparkCatalog",
        "spark.sql.catalog.peer.type": "hadoop",
        "spark.sql.catalog.peer.warehouse": Path(config["warehouse"]).resolve().as_uri(),
    }
    spark = build_session(f"bench-peer-{config['source']}-{config['layout']}", f"local[{config['cores']}]", conf)
    try:
        table = "peer.bench.trips"
        properties = {
            "format-version": "2",
            "write.target-file-size-bytes": str(config["target_file_bytes"]),
            "write.parquet.compression-codec": "zstd",
        }
        partitioned = "PARTITIONED BY (days(ts))" if config["layout"] == "partitioned" else ""
        if partitioned:
            properties["write.distribution-mode"] = "hash"  # Iceberg's default for a partitioned table, made explicit
        props = ", ".join(f"'{k}'='{v}'" for k, v in properties.items())
        spark.sql("CREATE NAMESPACE IF NOT EXISTS peer.bench")
        ddl = spark_ddl(config.get("shape", "flat"))
        spark.sql(f"CREATE TABLE {table} ({ddl}) USING iceberg {partitioned} TBLPROPERTIES ({props})")
        schema = StructType.fromDDL(ddl.replace("`", ""))
        assert isinstance(schema, StructType)
        if config["source"] in ("files", "parquet"):
            frame = (spark.readStream.schema(schema)
                     .option("maxFilesPerTrigger", config["max_files_per_trigger"])
                     .format("json" if config["source"] == "files" else "parquet")
                     .load(config["files_dir"]))
        else:
            raw = (spark.readStream.format("kafka")
                   .option("kafka.bootstrap.servers", config["bootstrap"])
                   .option("subscribe", config["topic"])
                   .option("startingOffsets", "earliest")
                   .option("maxOffsetsPerTrigger", config["max_offsets_per_trigger"])
                   .load())
            frame = raw.select(F.from_json(F.col("value").cast("string"), schema).alias("r")).select("r.*")
        started = time.monotonic()
        query = (frame.writeStream.format("iceberg").outputMode("append")
                 .option("checkpointLocation", config["checkpoint"])
                 .trigger(availableNow=True)
                 .toTable(table))
        query.awaitTermination()
        batches = [p["batchId"] for p in query.recentProgress]
        rows = sum(p["numInputRows"] for p in query.recentProgress)
        print(f"[peer] query done in {time.monotonic() - started:.1f}s: batches={len(set(batches))} "
              f"input_rows={rows}", flush=True)
        if query.exception() is not None:
            raise RuntimeError(str(query.exception()))
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
