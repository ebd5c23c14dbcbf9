"""Keyed syncs through the job: change files in, a table equal to the change stream's model out,
read back by Apache Iceberg's own Spark runtime and by pyiceberg, in each delete layout: position
delete files (format 2, the default), deletion vectors (format 3) and equality deletes (on request)."""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from spark_app.iceberg.internals import is_deletion_vector, live_files, referenced_data_file
from spark_app.job.loop import SyncJob
from tests.integration.keyed_support import (
    SCHEMA,
    ChangeStream,
    delete_contents,
    pyiceberg_rows,
    spark_rows,
    sync_change_files,
    write_change_files,
)
from tests.integration.sync_support import BackgroundJob, catalog_of, make_sync, sink_commits


@pytest.mark.parametrize(("deletes", "format_version", "layout"), [
    ("position", "2", "position"), ("position", "3", "deletion-vector"), ("equality", "2", "equality")])
def test_each_delete_layout_reads_as_the_model_in_spark_and_pyiceberg(
        tmp_path: Path, spark: SparkSession, deletes: str, format_version: str, layout: str) -> None:
    """Updates that move rows between day partitions, deletes and re-inserts: the older row of each key goes
    in the layout asked for, in the same snapshot as its new row, and both readers see exactly the model."""
    stream = ChangeStream("debezium", random.Random(f"layout-{layout}"))
    table = sync_change_files(tmp_path, spark, stream, deletes=deletes, format_version=format_version)
    assert table.metadata.format_version == int(format_version)
    kinds = delete_contents(table)
    assert set(kinds) == {layout}, kinds
    if layout == "deletion-vector":
        snapshot = table.current_snapshot()
        assert snapshot is not None
        targets = [referenced_data_file(f.data_file) for f in live_files(table, snapshot) if is_deletion_vector(f.data_file)]
        assert len(targets) == len(set(targets)), "two deletion vectors for one data file"
    assert spark_rows(spark, table) == stream.model
    if layout != "equality":  # pyiceberg's reader refuses equality deletes
        assert pyiceberg_rows(table) == stream.model


@pytest.mark.parametrize(("fmt", "copy_on_write"), [("debezium", None), ("upsert", "0")])
def test_change_files_end_in_the_model_of_the_stream(tmp_path: Path, spark: SparkSession, fmt: str,
                                                     copy_on_write: str | None) -> None:
    """With the defaults the commits write the small files they touch again (changes.copyOnWriteBelow): no delete
    file is left for upkeep; with that off, upkeep rewrites each trigger's deletes away."""
    inbox = tmp_path / "inbox"
    stream = ChangeStream(fmt, random.Random(f"files-{fmt}"))
    write_change_files(inbox, stream, 6, 700)
    sync = make_sync(tmp_path, {"files": {"path": str(inbox), "maxFilesPerTrigger": 2}}, schema=SCHEMA,
                     table={"key": ["id"], "partitionBy": ["day(updated_at)"]},
                     changes={"format": fmt, **({"copyOnWriteBelow": copy_on_write} if copy_on_write else {})},
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
    if copy_on_write is None:
        assert not delete_contents(table), "a small table keeps no delete file"
    else:
        assert "maintenance" in kinds  # on by default: each trigger's deletes are rewritten away
    assert spark_rows(spark, table) == stream.model
    dead_letters = catalog.load_table("sales.orders_dlq").scan().to_arrow()
    assert dead_letters.num_rows == stream.dead
    assert all(json.loads(position)["line"] >= 1 for position in dead_letters.column("position").to_pylist())


def test_a_keyed_table_evolves_its_partitioning_and_deletes_reach_the_older_files(tmp_path: Path,
                                                                                  spark: SparkSession) -> None:
    """A keyed sync's partitionBy changes between versions; the rows the new version updates or deletes
    live in files of the old spec, so its position deletes are written under that spec (upkeep off, so that they
    stay to be read), and both readers see the model of the whole stream."""
    inbox = tmp_path / "inbox"
    stream = ChangeStream("debezium", random.Random("partition-evolution"))
    write_change_files(inbox, stream, 6, 400)

    def sync(partition_by: list[str]) -> Any:
        return make_sync(tmp_path, {"files": {"path": str(inbox), "maxFilesPerTrigger": 1}}, schema=SCHEMA,
                         table={"key": ["id"], "partitionBy": partition_by},
                         changes={"format": "debezium", "copyOnWriteBelow": "0"}, deadLetter={"table": "sales.orders_dlq"},
                         maintenance={"compaction": {"enabled": False}, "rewriteDeletes": {"enabled": False}})

    def committed(name: str) -> Callable[[], bool]:
        def reached() -> bool:
            commits = sink_commits(catalog_of(sync([])).load_table("sales.orders"), "test/orders")
            return bool(commits) and (commits[-1].frontier or {}).get("after", "") >= name
        return reached

    with BackgroundJob(SyncJob(sync(["day(updated_at)"]), 1, spark)) as running:
        running.wait_until(committed("0002.json"), "three files committed", timeout=300)
    with BackgroundJob(SyncJob(sync(["bucket(4, id)"]), 2, spark)) as running:
        running.wait_until(committed("0005.json"), "the last file committed", timeout=300)
    table = catalog_of(sync([])).load_table("sales.orders")
    assert [str(f.transform) for f in table.spec().fields] == ["bucket[4]"]
    day_spec = next(s.spec_id for s in table.metadata.partition_specs if [str(f.transform) for f in s.fields] == ["day"])
    deletes = [task for task in table.scan().plan_files() for _ in task.delete_files]
    assert any(task.file.spec_id == day_spec for task in deletes), "no delete reached a file of the old spec"
    assert spark_rows(spark, table) == stream.model
    assert pyiceberg_rows(table) == stream.model
