"""Keyed syncs through the job: change files in, a table equal to the change stream's model out,
read back by Apache Iceberg's own Spark runtime (equality deletes applied)."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from spark_app.job import SyncJob
from tests.integration.keyed_support import SCHEMA, ChangeStream, spark_rows
from tests.integration.sync_support import BackgroundJob, catalog_of, make_sync, sink_commits


@pytest.mark.parametrize("fmt", ["debezium", "upsert"])
def test_change_files_end_in_the_model_of_the_stream(tmp_path: Path, spark: SparkSession, fmt: str) -> None:
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    stream = ChangeStream(fmt, random.Random(f"files-{fmt}"))
    for number in range(6):
        values, keys = stream.records(700)
        lines = []
        for value, key in zip(values, keys, strict=True):
            if value is None and key is not None:  # an upsert-format delete by message key has no file form
                value = json.dumps({**json.loads(key), "__deleted": True}).encode()
            lines.append((value or b"null").decode())
        (inbox / f"{number:04d}.json").write_text("\n".join(lines) + "\n")
    sync = make_sync(tmp_path, {"files": {"path": str(inbox), "maxFilesPerTrigger": 2}}, schema=SCHEMA,
                     table={"key": ["id"], "partitionBy": ["day(updated_at)"]}, changes={"format": fmt},
                     deadLetter={"table": "sales.orders_dlq"})
    catalog = catalog_of(sync)

    def reached() -> bool:
        commits = sink_commits(catalog.load_table("sales.orders"), "test/orders")
        return bool(commits) and commits[-1].frontier == {"after": "0005.json"}

    with BackgroundJob(SyncJob(sync, 1, spark)) as running:
        running.wait_until(reached, "the last file committed", timeout=300)
    table = catalog.load_table("sales.orders")
    kinds = [c.kind for c in sink_commits(table, "test/orders")]
    assert [kind for kind in kinds if kind != "maintenance"] == ["fence", "data", "data", "data"]
    assert "maintenance" in kinds  # on by default: each trigger's deletes are rewritten away
    assert spark_rows(spark, table) == stream.model
    dead_letters = catalog.load_table("sales.orders_dlq").scan().to_arrow()
    assert dead_letters.num_rows == stream.dead
    assert all(json.loads(position)["line"] >= 1 for position in dead_letters.column("position").to_pylist())
